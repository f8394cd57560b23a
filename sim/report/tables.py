"""The report's tables: rows of formatted text built from records, and their HTML.

Numbers are shown in the units people read (GiB, GB/s, %, µs); the records keep SI.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from sim.report.loaders import ResultSet
from sim.report.records import PlanRecord, RunRecord, SweepRow
from sim.report.series import BREAKDOWN_ORDER, MEMORY_ORDER, components, hbm_capacity_bytes
from sim.studies.columns import throughput_unit

__all__ = [
    "Table",
    "breakdown_table",
    "collective_table",
    "links_table",
    "memory_table",
    "plans_table",
    "runs_table",
    "sweep_table",
    "table_html",
    "traffic_table",
]

GIB = 2.0**30
DASH = "–"


@dataclass(frozen=True)
class Table:
    """A table of text cells.

    Attributes
    ----------
    name : str
        Identifies the table in the page (``data-table``).
    caption : str
        Shown above it.
    header : tuple of str
        Column names.
    rows : tuple of tuple of str
        Formatted cells.
    """

    name: str
    caption: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


def _f(value: float | None, fmt: str) -> str:
    return DASH if value is None else format(value, fmt)


def _pct(value: float | None) -> str:
    return DASH if value is None else f"{value:.1%}"


def _gib(value: float | None) -> str:
    return DASH if value is None else f"{value / GIB:.1f}"


def _yes(value: bool | None) -> str:
    return DASH if value is None else ("yes" if value else "NO")


def _settings(d: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in d.items())


def _metrics(r: RunRecord | SweepRow) -> tuple[str, ...]:
    return (
        _f(r.step_time_s, ".4g"),
        _f(r.tokens_per_s, ",.0f"),
        _f(r.tflops_per_gpu, ".1f"),
        _pct(r.mfu),
        _gib(r.memory_per_gpu_bytes),
        _yes(r.fits),
        _f(r.cost_per_step_usd, ".4f"),
    )


_METRIC_HEADER = (
    "step time (s)",
    "tokens/s",
    "TFLOP/s per GPU",
    "MFU",
    "memory/GPU (GiB)",
    "fits",
    "$/step",
)


def _header_for(units: set[str | None]) -> tuple[str, ...]:
    """:data:`_METRIC_HEADER` with the rows' throughput unit (:func:`throughput_unit`)."""
    unit = throughput_unit(units)
    return tuple(unit if h == "tokens/s" else h for h in _METRIC_HEADER)


def runs_table(bars: Sequence[tuple[str, RunRecord]]) -> Table:
    """One row per run: what ran, its headline numbers and its plan."""
    rows = tuple(
        (
            label,
            f"{r.gpus} × {r.gpu or 'GPU'}" + (f" on {r.topology}" if r.topology else ""),
            *_metrics(r),
            _settings(r.plan),
        )
        for label, r in bars
    )
    return Table("runs", "Runs", ("run", "GPUs", *_METRIC_HEADER, "plan"), rows)


def traffic_table(bars: Sequence[tuple[str, RunRecord]]) -> Table:
    """Bytes on the wire per link class per step, per run (GB)."""
    scopes = components([r.link_bytes_by_scope for _, r in bars], ("nvlink", "pcie", "net"))
    rows = tuple(
        (label, *(f"{r.link_bytes_by_scope.get(s, 0.0) / 1e9:,.1f}" for s in scopes))
        for label, r in bars
    )
    return Table("traffic", "Bytes on links per step, GB (whole cluster)", ("run", *scopes), rows)


def breakdown_table(bars: Sequence[tuple[str, RunRecord]]) -> Table:
    """Step time per component (seconds and share of the step) per run."""
    names = components([r.breakdown for _, r in bars], BREAKDOWN_ORDER)
    rows = tuple(
        (
            label,
            *(
                f"{r.breakdown.get(n, 0.0):.4g} ({r.breakdown.get(n, 0.0) / r.step_time_s:.1%})"
                for n in names
            ),
        )
        for label, r in bars
    )
    return Table(
        "breakdown", "Step time breakdown, seconds (share of the step)", ("run", *names), rows
    )


def memory_table(bars: Sequence[tuple[str, RunRecord]]) -> Table:
    """Memory per component of the fullest GPU, its total and the HBM capacity (GiB)."""
    names = components([r.memory_breakdown for _, r in bars], MEMORY_ORDER)
    rows = tuple(
        (
            label,
            *(_gib(r.memory_breakdown.get(n, 0.0)) for n in names),
            _gib(r.memory_per_gpu_bytes),
            _gib(hbm_capacity_bytes(r)),
            _yes(r.fits),
        )
        for label, r in bars
    )
    return Table("memory", "Memory per GPU, GiB", ("run", *names, "total", "HBM", "fits"), rows)


def plans_table(rs: ResultSet) -> Table:
    """Every candidate of a plan search, best first, with all its settings."""
    plans: Sequence[PlanRecord] = rs.records
    keys = list(dict.fromkeys(k for p in plans for k in p.parallel))
    rows = tuple(
        (str(i), *(str(p.parallel.get(k, DASH)) for k in keys), *_metrics(p))
        for i, p in enumerate(plans, 1)
    )
    return Table(
        "plans", f"Plans from {rs.source}, best first", ("rank", *keys, *_METRIC_HEADER), rows
    )


def sweep_table(rs: ResultSet) -> Table:
    """Every point of a sweep: its grid values, metrics, and why it failed if it did."""
    points: Sequence[SweepRow] = rs.records
    keys = list(dict.fromkeys(k for p in points for k in p.grid))
    rows = tuple(
        (
            *(str(p.grid.get(k, DASH)) for k in keys),
            str(p.gpus),
            *_metrics(p),
            _pct(p.scaling_efficiency),
            p.reason or "",
        )
        for p in points
    )
    unit = _header_for({p.throughput_unit for p in points})
    header = (*keys, "GPUs", *unit, "scaling efficiency", "failed because")
    return Table("sweep", f"Sweep {rs.source}", header, rows)


def collective_table(sets: Sequence[ResultSet]) -> Table:
    """Every collective record: nccl-tests' columns plus where it ran and the algorithm."""
    rows = tuple(
        (
            *((s.source,) if len(sets) > 1 else ()),
            r.op,
            str(r.n_ranks),
            r.topology or DASH,
            f"{r.size_bytes:.0f}",
            f"{r.time_s * 1e6:.2f}",
            f"{r.algbw_GBps:.2f}",
            f"{r.busbw_GBps:.2f}",
            f"{r.algorithm}/{r.protocol}" if r.protocol else r.algorithm,
        )
        for s in sets
        for r in s.records
    )
    header = (
        "op",
        "GPUs",
        "topology",
        "size (B)",
        "time (µs)",
        "algbw (GB/s)",
        "busbw (GB/s)",
        "algorithm",
    )
    return Table(
        "collectives", "Collectives", (*(("source",) if len(sets) > 1 else ()), *header), rows
    )


def links_table(bars: Sequence[tuple[str, RunRecord]]) -> Table:
    """Per run and link kind: how many links, their mean and peak utilisation, bytes carried."""
    rows = []
    for label, r in bars:
        by_kind: dict[str, list[Any]] = {}
        for lk in r.links or ():
            by_kind.setdefault(lk.kind, []).append(lk)
        for kind, links in sorted(by_kind.items()):
            utils = [lk.utilisation for lk in links]
            rows.append(
                (
                    label,
                    kind,
                    str(len(links)),
                    _pct(sum(utils) / len(utils)),
                    _pct(max(utils)),
                    f"{sum(lk.bytes for lk in links) / 1e9:,.2f}",
                )
            )
    header = ("run", "link kind", "links", "mean utilisation", "peak utilisation", "GB/step")
    return Table("links", "Link utilisation by kind", header, tuple(rows))


def table_html(table: Table) -> str:
    """The table as an HTML ``<table>``: numbers right-aligned, long text wrapped."""
    head = "".join(f"<th>{escape(h)}</th>" for h in table.header)
    body = "\n".join("<tr>" + "".join(_td(c) for c in row) + "</tr>" for row in table.rows)
    return (
        f'<div class="table-wrap"><table class="data" data-table="{escape(table.name)}">'
        f"<caption>{escape(table.caption)}</caption>\n<thead><tr>{head}</tr></thead>\n"
        f"<tbody>\n{body}\n</tbody></table></div>"
    )


def _td(cell: str) -> str:
    cls = ' class="num"' if _looks_numeric(cell) else ' class="wrap"' if len(cell) > 40 else ""
    return f"<td{cls}>{escape(cell)}</td>"


def _looks_numeric(cell: str) -> bool:
    text = cell.replace(",", "").rstrip("%").split(" (")[0]
    try:
        float(text)
    except ValueError:
        return False
    return True
