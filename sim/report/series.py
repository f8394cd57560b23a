"""What the figures show, as plain data: scaling series, link rows, collective curves.

Everything here is pure (no matplotlib), so the arithmetic behind each figure (the
ideal-scaling line, which links a heatmap shows) is tested on its own.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sim.errors import TopologyError
from sim.report.records import CollectiveRecord, PlanRecord, RunRecord, SweepRow

__all__ = [
    "BREAKDOWN_ORDER",
    "MEMORY_ORDER",
    "CollectiveSeries",
    "LinkMatrix",
    "ScalingSeries",
    "collective_series",
    "components",
    "facet_key",
    "hbm_capacity_bytes",
    "link_matrix",
    "plan_labels",
    "run_labels",
    "scale_keys",
    "scaling_series",
    "series_labels",
    "short_label",
    "split_label",
    "throughput_unit",
]

BREAKDOWN_ORDER = (
    "compute",
    "tp_comm_exposed",
    "ep_comm",
    "pipeline_bubble",
    "pp_comm_exposed",
    "dp_comm_exposed",
    "zero3_gather_exposed",
    "param_gather",
    "optimizer",
)
"""Stacking order of step-time components (the simulator's own order); others follow, sorted."""

MEMORY_ORDER = ("weights", "grads", "optimizer", "activations", "workspace")
"""Stacking order of memory components; others follow, sorted."""


def components(dicts: Iterable[Mapping[str, float]], preferred: Sequence[str]) -> list[str]:
    """The keys of ``dicts`` that are non-zero somewhere, ``preferred`` ones first.

    Examples
    --------
    >>> components([{"b": 1.0, "z": 2.0, "a": 0.0}], ("z", "a"))
    ['z', 'b']
    """
    nonzero = {k for d in dicts for k, v in d.items() if v}
    return [k for k in preferred if k in nonzero] + sorted(nonzero - set(preferred))


def hbm_capacity_bytes(run: RunRecord) -> float | None:
    """HBM per GPU of a run, bytes: the record's own ``hbm_bytes``, else the catalog's.

    None when neither knows the GPU (the memory figure then draws no capacity line).
    """
    if run.hbm_bytes is not None:
        return run.hbm_bytes
    from sim.catalog import gpu_spec  # reading the hardware catalog (data), not the simulator

    try:
        return gpu_spec(run.gpu).hbm_bytes
    except TopologyError:  # not in the catalog
        return None


@dataclass(frozen=True)
class ScalingSeries:
    """One curve of a scaling figure: the best fitting point per GPU count of one series.

    Attributes
    ----------
    label : str
        The series' key values, e.g. ``"topology=h100-ib-ndr"`` (empty for a single series).
    gpus : tuple of int
        GPU counts, ascending.
    tokens_per_s, step_time_s : tuple of float
        The point with the highest throughput at each count.
    ideal_tokens_per_s, ideal_step_time_s : tuple of float
        Linear scaling from the series' smallest point: throughput ``T0 * g / g0``; step
        time ``tokens_per_step(g) / (T0 * g / g0)``, so weak and strong scaling both read right.
    unfit_gpus, unfit_tokens_per_s, unfit_step_time_s : tuple
        Simulated points that do not fit in memory (drawn hollow, not joined).
    facet : str
        The value of the key the report draws one panel per value of (the model, say),
        ``""`` when one panel holds every series.
    unit : str
        What the throughput counts: ``"tokens/s"`` or ``"images/s"``.
    """

    label: str
    gpus: tuple[int, ...]
    tokens_per_s: tuple[float, ...]
    step_time_s: tuple[float, ...]
    ideal_tokens_per_s: tuple[float, ...]
    ideal_step_time_s: tuple[float, ...]
    unfit_gpus: tuple[int, ...] = ()
    unfit_tokens_per_s: tuple[float, ...] = ()
    unfit_step_time_s: tuple[float, ...] = ()
    facet: str = ""
    unit: str = "tokens/s"

    @property
    def efficiency(self) -> tuple[float, ...]:
        """Throughput per GPU over that of the series' smallest point, per GPU count."""
        return tuple(t / i if i > 0 else math.nan
                     for t, i in zip(self.tokens_per_s, self.ideal_tokens_per_s, strict=True))  # fmt: skip


def scale_keys(rows: Sequence[SweepRow]) -> list[str]:
    """Grid keys that set the GPU count: each of their values goes with one count only.

    Such a key (``nodes``, say) moves points along a curve; the other grid keys
    (``topology``, ``parallel.zero``...) tell curves apart.

    Examples
    --------
    >>> rows = [SweepRow(gpus=8 * n, step_time_s=1.0, tokens_per_s=1.0, tflops_per_gpu=1.0,
    ...         mfu=0.5, memory_per_gpu_bytes=1.0, fits=True, nodes=n, fabric=f)
    ...         for n in (1, 2) for f in ("ib", "roce")]
    >>> scale_keys(rows)
    ['nodes']
    """
    from sim.studies.efficiency import gpu_count_keys

    return gpu_count_keys([_as_dict(r) for r in rows], _grid_keys(rows))


def _as_dict(r: SweepRow) -> dict[str, Any]:
    """What :mod:`sim.studies.efficiency` reads of a row."""
    return {**r.grid, "gpus": r.gpus, "gpu": r.gpu, "tokens_per_s": r.tokens_per_s,
            "fits": r.fits, "reason": r.reason}  # fmt: skip


def series_labels(rows: Sequence[SweepRow]) -> list[str]:
    """The series of each row: the file's ``scaling_series`` column, or, for files written
    before rows carried it, the same rule (:mod:`sim.studies.efficiency`) applied to the
    grid keys (without the study's ``cases``, which such a file does not record)."""
    if any(r.scaling_series is not None for r in rows if r.ok):
        return [r.scaling_series or "" for r in rows]
    from sim.studies.efficiency import scaling_columns

    cols = scaling_columns([_as_dict(r) for r in rows], _grid_keys(rows))
    return [c["scaling_series"] or "" for c in cols]


def split_label(label: str) -> dict[str, str]:
    """``"a.b=1, c=x"`` -> ``{"a.b": "1", "c": "x"}``.

    >>> split_label("model.preset=vgg16, parallel.overlap_dp=true")
    {'model.preset': 'vgg16', 'parallel.overlap_dp': 'true'}
    """
    out = {}
    for part in label.split(", ") if label else []:
        key, _, value = part.partition("=")
        out[key] = value
    return out


FACET_KEYS = ("model.preset", "gpu", "cluster.topology")
"""Keys the report draws one panel per value of, first present first (when series vary in it)."""
MAX_SERIES_PER_AXIS = 6


def facet_key(labels: Sequence[str]) -> str | None:
    """The series key that gets one panel per value: the model where it varies (its
    throughputs differ by orders of magnitude), else the GPU model or fabric when one
    axis would hold more than :data:`MAX_SERIES_PER_AXIS` series; None: one panel."""
    keys: dict[str, set[str]] = {}
    for label in set(labels):
        for k, v in split_label(label).items():
            keys.setdefault(k, set()).add(v)
    varying = [k for k, vs in keys.items() if len(vs) > 1]
    if "model.preset" in varying:
        return "model.preset"
    if len(set(labels)) <= MAX_SERIES_PER_AXIS:
        return None
    return next((k for k in (*FACET_KEYS, *varying) if k in varying), None)


def short_label(label: str, drop: str | None) -> str:
    """A series label for a legend: the facet's key left out, keys by their last part.

    >>> short_label("model.preset=vgg16, parallel.overlap_dp=true", "model.preset")
    'overlap_dp=true'
    """
    parts = [f"{k.rsplit('.', 1)[-1]}={v}" for k, v in split_label(label).items() if k != drop]
    return ", ".join(parts)


def scaling_series(rows: Sequence[SweepRow], prefix: str = "") -> list[ScalingSeries]:
    """Group sweep points into scaling curves (one per series, :func:`series_labels`).

    Failed points are left out. Where grouping leaves every curve with a single GPU
    count (the grid varied the plan at each size, not a separate scale key), the curve is
    the best point per GPU count over the whole sweep.

    Parameters
    ----------
    rows : sequence of SweepRow
        The sweep's points.
    prefix : str
        Put before every label (the source file when several sweeps share a figure).
    """
    labels = series_labels(rows)
    groups: dict[str, list[SweepRow]] = {}
    for r, label in zip(rows, labels, strict=True):
        if r.ok:
            groups.setdefault(label, []).append(r)
    if all(len({r.gpus for r in g}) < 2 for g in groups.values()):
        named = any(label for label in groups)
        best = "best per GPU count" if named else ""
        return [_series(_join(prefix, best), [r for r in rows if r.ok])]
    key = facet_key(list(groups))
    out = []
    for label, g in groups.items():
        facet = split_label(label).get(key, "") if key else ""
        out.append(_series(_join(prefix, short_label(label, key)), g, facet))
    return out


def _join(prefix: str, label: str) -> str:
    return ": ".join(p for p in (prefix, label) if p)


def _series(label: str, rows: list[SweepRow], facet: str = "") -> ScalingSeries:
    """Best fitting point per GPU count; the ideal line from the smallest of them."""
    best: dict[int, SweepRow] = {}
    for r in rows:
        if r.fits and (r.gpus not in best or _tps(r) > _tps(best[r.gpus])):
            best[r.gpus] = r
    gpus = sorted(best)
    pts = [best[g] for g in gpus]
    tps = tuple(_tps(r) for r in pts)
    step = tuple(float(r.step_time_s or 0.0) for r in pts)
    ideal_tps: tuple[float, ...] = ()
    ideal_step: tuple[float, ...] = ()
    if pts:
        t0, g0 = tps[0], gpus[0]
        ideal_tps = tuple(t0 * g / g0 for g in gpus)
        ideal_step = tuple(
            t * s / i if i > 0 else math.nan for t, s, i in zip(tps, step, ideal_tps, strict=True)
        )
    unfit = sorted((r for r in rows if not r.fits), key=lambda r: (r.gpus, -_tps(r)))
    return ScalingSeries(
        label=label,
        gpus=tuple(gpus),
        tokens_per_s=tps,
        step_time_s=step,
        ideal_tokens_per_s=ideal_tps,
        ideal_step_time_s=ideal_step,
        unfit_gpus=tuple(r.gpus for r in unfit),
        unfit_tokens_per_s=tuple(_tps(r) for r in unfit),
        unfit_step_time_s=tuple(float(r.step_time_s or 0.0) for r in unfit),
        facet=facet,
        unit=throughput_unit(rows),
    )


def throughput_unit(rows: Iterable[SweepRow]) -> str:
    """``images/s`` when the rows say their throughput counts images, else ``tokens/s``."""
    units = {r.throughput_unit for r in rows if r.throughput_unit}
    return units.pop() if len(units) == 1 else "tokens/s"


def _tps(r: SweepRow) -> float:
    return float(r.tokens_per_s or 0.0)


def _grid_keys(rows: Iterable[SweepRow]) -> list[str]:
    """Union of the rows' grid keys, in first-seen order."""
    keys: dict[str, None] = {}
    for r in rows:
        keys.update(dict.fromkeys(r.grid))
    return list(keys)


@dataclass(frozen=True)
class LinkMatrix:
    """Utilisation of the busiest links (rows) in each run that has link rows (columns).

    Attributes
    ----------
    links, kinds : tuple of str
        Row names and their link kinds, grouped by kind, busiest first within a kind.
    runs : tuple of str
        Column labels.
    utilisation : tuple of tuple of float
        ``utilisation[i][j]``: link ``i`` in run ``j``; NaN where the run has no such link.
    total_links : int
        Distinct links in all runs (rows beyond ``max_rows`` are not shown).
    """

    links: tuple[str, ...]
    kinds: tuple[str, ...]
    runs: tuple[str, ...]
    utilisation: tuple[tuple[float, ...], ...]
    total_links: int


def link_matrix(runs: Sequence[tuple[str, RunRecord]], max_rows: int = 40) -> LinkMatrix | None:
    """The heatmap's data: the ``max_rows`` busiest links over the runs that have ``links``.

    Busiest means highest utilisation in any run (ties by name). None when no run has links.
    """
    cols = [
        (label, {lk.name: lk for lk in run.links}) for label, run in runs if run.links is not None
    ]
    if not cols:
        return None
    peak: dict[str, float] = {}
    kind: dict[str, str] = {}
    for _, by_name in cols:
        for name, lk in by_name.items():
            peak[name] = max(peak.get(name, 0.0), lk.utilisation)
            kind.setdefault(name, lk.kind)
    chosen = sorted(peak, key=lambda n: (-peak[n], _natural(n)))[:max_rows]
    chosen.sort(key=lambda n: (kind[n], -peak[n], _natural(n)))
    nan = math.nan
    matrix = tuple(
        tuple(by_name[n].utilisation if n in by_name else nan for _, by_name in cols)
        for n in chosen
    )
    return LinkMatrix(
        links=tuple(chosen),
        kinds=tuple(kind[n] for n in chosen),
        runs=tuple(label for label, _ in cols),
        utilisation=matrix,
        total_links=len(peak),
    )


def _natural(name: str) -> tuple[tuple[int, str], ...]:
    """Sort key that puts ``gpu2`` before ``gpu10``."""
    return tuple((int(p), "") if p.isdigit() else (-1, p) for p in re.split(r"(\d+)", name))


@dataclass(frozen=True)
class CollectiveSeries:
    """One busbw-versus-size curve: one op on one group of GPUs from one source.

    Attributes
    ----------
    label : str
        E.g. ``"all_reduce, 8 GPUs, dgx-h100 (flow)"``.
    size_bytes, busbw_GBps : tuple of float
        Ascending sizes and the bus bandwidth at each (GB/s).
    algorithms : tuple of str
        ``algorithm/protocol`` used at each size.
    """

    label: str
    size_bytes: tuple[float, ...]
    busbw_GBps: tuple[float, ...]
    algorithms: tuple[str, ...]


def collective_series(
    sets: Sequence[tuple[str, Sequence[CollectiveRecord]]],
) -> list[CollectiveSeries]:
    """Curves from collective results, per (source, op, ranks, topology, network).

    The source is named in the label only when there are several sources.
    """
    groups: dict[str, list[CollectiveRecord]] = {}
    for source, records in sets:
        for r in records:
            where = f"{r.topology} ({r.network})" if r.topology else r.network
            label = f"{r.op}, {r.n_ranks} GPUs" + (f", {where}" if where else "")
            groups.setdefault(_join(source if len(sets) > 1 else "", label), []).append(r)
    out = []
    for label, rs in groups.items():
        rs = sorted(rs, key=lambda r: r.size_bytes)
        out.append(
            CollectiveSeries(
                label=label,
                size_bytes=tuple(r.size_bytes for r in rs),
                busbw_GBps=tuple(r.busbw_GBps for r in rs),
                algorithms=tuple(_algo(r) for r in rs),
            )
        )
    return out


def _algo(r: CollectiveRecord) -> str:
    return f"{r.algorithm}/{r.protocol}" if r.protocol else r.algorithm


def run_labels(runs: Sequence[tuple[str, RunRecord]]) -> list[str]:
    """A short label per run: scenario, GPUs and network, plus the source where two agree.

    Examples
    --------
    >>> from sim.report.records import RunRecord
    >>> r = RunRecord(scenario="s", gpus=8, gpu="H100-SXM", network="flow", step_time_s=1.0,
    ...     tokens_per_s=1.0, tflops_per_gpu=1.0, mfu=0.5, fits=True, memory_per_gpu_bytes=1.0,
    ...     memory_breakdown={}, breakdown={"compute": 1.0})
    >>> run_labels([("a.json", r), ("b.json", r)])
    ['s, 8 GPUs, flow (a.json)', 's, 8 GPUs, flow (b.json)']
    """
    base = [", ".join(p for p in (r.scenario, f"{r.gpus} GPUs", r.network) if p) for _, r in runs]
    return [
        f"{b} ({source})" if base.count(b) > 1 else b
        for b, (source, _) in zip(base, runs, strict=True)
    ]


def plan_labels(plans: Sequence[PlanRecord]) -> list[str]:
    """``#rank`` plus the settings that differ between the candidates, e.g. ``#1 tp=8 pp=4``."""
    keys = _varying_keys([p.parallel for p in plans])
    return [
        " ".join([f"#{i}", *(f"{k}={p.parallel.get(k)}" for k in keys)])
        for i, p in enumerate(plans, 1)
    ]


def _varying_keys(settings: Sequence[Mapping[str, Any]]) -> list[str]:
    """Keys whose values differ between the settings (what tells candidates apart)."""
    keys: dict[str, None] = {}
    for s in settings:
        keys.update(dict.fromkeys(s))
    return [k for k in keys if len({repr(s.get(k)) for s in settings}) > 1]
