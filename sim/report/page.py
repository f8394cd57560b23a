"""The HTML report: one self-contained file with every figure inline as SVG.

No script, no external stylesheet, font or image: the page's Content-Security-Policy
forbids fetching anything, so a figure that tried would show up as a browser error.
Same inputs and the same matplotlib give a byte-identical file (no dates, fixed ids).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape
from pathlib import Path
from typing import Any

from sim.errors import ConfigError
from sim.files import write_atomic
from sim.report.backend import figure_svg, import_matplotlib
from sim.report.captions import (
    StudyPoint,
    breakdown_sentence,
    memory_sentence,
    scaling_sentence,
)
from sim.report.figures import MAX_PLAN_BARS, bars, figure_for
from sim.report.glossary import glossary_html
from sim.report.loaders import ResultSet
from sim.report.records import RunRecord
from sim.report.series import scaling_series
from sim.report.study import memory_points_figure, scaling_panels_figure, share_figure, study_points
from sim.report.tables import (
    breakdown_table,
    collective_table,
    links_table,
    memory_table,
    plans_table,
    runs_table,
    sweep_table,
    table_html,
    traffic_table,
)

__all__ = ["render_report", "report_html"]

_CSS = """
:root { color-scheme: light; }
body { margin: 0; background: #f6f7f9; color: #1d2329;
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 32px 64px; background: #fff; }
h1 { font-size: 26px; margin: 0 0 4px; } h2 { font-size: 20px; margin: 40px 0 8px;
  border-bottom: 2px solid #e3e6ea; padding-bottom: 4px; } h3 { font-size: 16px; margin: 24px 0 6px; }
nav a { margin-right: 14px; } .meta { color: #5b6570; margin: 0 0 12px; }
figure { margin: 18px 0 22px; } figure svg { display: block; max-width: 100%; height: auto; }
figcaption { color: #5b6570; font-size: 13px; margin-top: 4px; }
p.finding { color: #1d2329; font-size: 14px; font-weight: 600; margin: 2px 0 4px; }
dl.glossary dt { font-weight: 600; margin-top: 8px; } dl.glossary dd { margin: 2px 0 0 18px; }
.note { background: #fff7e0; border-left: 4px solid #e0a800; padding: 8px 12px; margin: 8px 0; }
.table-wrap { overflow-x: auto; margin: 8px 0 18px; }
table.data { border-collapse: collapse; font-size: 12.5px; font-variant-numeric: tabular-nums; }
table.data caption { text-align: left; font-weight: 600; padding: 4px 0; }
table.data th, table.data td { padding: 3px 9px; border-bottom: 1px solid #e3e6ea; vertical-align: top; }
table.data td { white-space: nowrap; } table.data td.wrap { white-space: normal; min-width: 240px; }
table.data th { background: #eef1f4; text-align: left; } td.num { text-align: right; }
table.data tbody tr:nth-child(even) { background: #fafbfc; }
"""

_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


class _Page:
    """Collects the body of the page; numbers figures so their SVG ids stay unique."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.figures = 0

    def add(self, html: str) -> None:
        self.parts.append(html)

    def figure(self, sets: Sequence[ResultSet], kind: str, caption: str, absent: str) -> None:
        """The figure, or a visible note saying why it is not there."""
        self.drawn(kind, lambda: figure_for(sets, kind), caption, absent)

    def drawn(
        self,
        kind: str,
        build: Callable[[], Any],
        caption: str,
        absent: str,
        sentence: str = "",
    ) -> None:
        """The figure ``build`` draws, its caption and the sentence read from its numbers;
        a visible note instead when it raises ConfigError (nothing to draw)."""
        try:
            fig = build()
        except ConfigError as e:
            self.add(
                f'<figure class="figure skipped" data-figure="{kind}">'
                f'<p class="note">{escape(absent)} not shown: {escape(str(e))}</p></figure>'
            )
            return
        self.figures += 1
        svg = figure_svg(fig, f"f{self.figures}")
        svg = svg.replace("<svg ", f'<svg role="img" aria-label="{escape(caption)}" ', 1)
        said = f'<p class="finding">{escape(sentence)}</p>' if sentence else ""
        self.add(
            f'<figure class="figure" data-figure="{kind}" id="fig{self.figures}">\n{svg}\n'
            f"<figcaption>{said}{escape(caption)}</figcaption></figure>"
        )


def _runs_section(page: _Page, sets: Sequence[ResultSet]) -> None:
    labelled = bars(sets)
    page.add('<section id="runs"><h2>Runs</h2>')
    page.add(table_html(runs_table(labelled)))
    page.add(table_html(traffic_table(labelled)))
    page.figure(
        sets,
        "breakdown",
        "Where each step's time goes (the parts sum to the step time).",
        "Breakdown",
    )
    page.add(table_html(breakdown_table(labelled)))
    page.figure(
        sets,
        "memory",
        "Memory of the fullest GPU by component; dashed: HBM capacity.",
        "Memory figure",
    )
    page.add(table_html(memory_table(labelled)))
    page.figure(
        sets,
        "links",
        "Utilisation of the busiest links in each run.",
        "Per-link utilisation heatmap",
    )
    if any(r.links for _, r in labelled):
        page.add(table_html(links_table(labelled)))
    _notes(
        page, [f"{label}: {n}" for label, r in labelled for n in r.notes] + _sum_checks(labelled)
    )
    page.add("</section>")


def _sum_checks(labelled: Sequence[tuple[str, RunRecord]]) -> list[str]:
    """A note for each run whose breakdown does not add up to its step time (0.1 %)."""
    out = []
    for label, r in labelled:
        total, step = sum(r.breakdown.values()), r.step_time_s
        if abs(total - step) > 1e-3 * step:
            out.append(
                f"{label}: the breakdown sums to {total:.4g} s but the step time is {step:.4g} s"
            )
    return out


def _notes(page: _Page, notes: Sequence[str]) -> None:
    if notes:
        page.add('<ul class="notes">' + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul>")


def _plans_section(page: _Page, rs: ResultSet, index: int) -> None:
    page.add(f'<section id="plans-{index}"><h2>Plans: {escape(rs.source)}</h2>')
    page.add(table_html(plans_table(rs)))
    shown = (
        f"the best {MAX_PLAN_BARS} of {len(rs.records)}"
        if len(rs.records) > MAX_PLAN_BARS
        else "all"
    )
    page.figure(
        [rs], "breakdown", f"Step time breakdown of {shown} candidates, best on top.", "Breakdown"
    )
    page.figure(
        [rs],
        "memory",
        f"Memory per GPU of {shown} candidates; dashed: HBM capacity.",
        "Memory figure",
    )
    page.add("</section>")


def _sweeps_section(page: _Page, sets: Sequence[ResultSet]) -> None:
    page.add('<section id="sweeps"><h2>Sweeps</h2>')
    for rs in sets:
        _study(page, rs)
    page.add("</section>")


def _study(page: _Page, rs: ResultSet) -> None:
    """One sweep file: scaling per panel, where the time goes, memory, then its table."""
    rows = rs.records
    series = scaling_series(rows)
    points = study_points(rows)
    page.add(f"<h3>{escape(rs.source)}</h3>")

    def scaling() -> Any:
        if not any(len(s.gpus) > 1 for s in series):
            raise ConfigError("no series has two GPU counts that fit: there is no scaling here")
        return scaling_panels_figure(series)

    page.drawn(
        "scaling",
        scaling,
        "Top: throughput against GPUs (log scales); dashed: ideal linear scaling from each "
        "series' smallest point. Bottom: scaling efficiency, the throughput per GPU over that "
        "of the series' smallest point (100%: linear). A series is the points that differ "
        "only in GPU count; one panel per model.",
        "Scaling curves",
        scaling_sentence(series),
    )
    with_parts = [p for p in points if p.breakdown]

    def parts(build: Callable[[Sequence[StudyPoint]], Any]) -> Callable[[], Any]:
        def draw() -> Any:
            if not with_parts:
                raise ConfigError("these rows carry no breakdown (written by an older clustersim)")
            return build(with_parts)

        return draw

    page.drawn(
        "breakdown",
        parts(share_figure),
        "Where each point's step time goes, as shares of the step (the parts sum to it); "
        "the step time is written at the end of each bar.",
        "Breakdown per point",
        breakdown_sentence(with_parts) if with_parts else "",
    )
    page.drawn(
        "memory",
        parts(memory_points_figure),
        "Memory of the fullest GPU of each point by kind; dashed: the GPU's capacity.",
        "Memory per point",
        memory_sentence(with_parts) if with_parts else "",
    )
    failed = sum(1 for r in rows if not r.ok)
    if failed:
        _notes(
            page, [f"{rs.source}: {failed} of {len(rows)} points failed (see 'failed because')."]
        )
    page.add(table_html(sweep_table(rs)))


def _collectives_section(page: _Page, sets: Sequence[ResultSet]) -> None:
    page.add('<section id="collectives"><h2>Collectives</h2>')
    page.figure(
        sets,
        "busbw",
        "Bus bandwidth against message size; marker: algorithm/protocol chosen.",
        "busbw",
    )
    page.add(table_html(collective_table(sets)))
    page.add("</section>")


def report_html(inputs: Sequence[ResultSet], title: str = "clustersim report") -> str:
    """The whole report as HTML text.

    Sections in a fixed order: runs (all run results together), each plan list, sweeps
    (one scaling figure for all), collectives. Figures that the inputs cannot give
    (e.g. per-link utilisation from results without ``links``) appear as a note saying why.

    Raises
    ------
    ConfigError
        When ``inputs`` is empty.
    MissingExtraError
        matplotlib is not installed (``pip install 'clustersim[plot]'``).
    """
    if not inputs:
        raise ConfigError("a report needs at least one result file")
    import_matplotlib()  # fail before any work, not halfway through
    from sim.version import __version__

    page = _Page()
    by_kind = {
        k: [s for s in inputs if s.kind == k] for k in ("run", "plan", "sweep", "collective")
    }
    if by_kind["run"]:
        _runs_section(page, by_kind["run"])
    for i, rs in enumerate(by_kind["plan"], 1):
        _plans_section(page, rs, i)
    if by_kind["sweep"]:
        _sweeps_section(page, by_kind["sweep"])
    if by_kind["collective"]:
        _collectives_section(page, by_kind["collective"])
    page.add(glossary_html())
    sources = "".join(
        f"<tr><td>{escape(s.source)}</td><td>{s.kind}</td><td class='num'>{len(s.records)}</td></tr>"
        for s in inputs
    )
    nav = _nav(by_kind)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">\n'
        f"<title>{escape(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n<main>\n"
        f'<header><h1>{escape(title)}</h1><p class="meta">clustersim {__version__}: '
        f"{len(inputs)} result file(s), {page.figures} figure(s)</p>\n"
        f'<div class="table-wrap"><table class="data" data-table="inputs"><caption>Inputs</caption>'
        f"<thead><tr><th>file</th><th>kind</th><th>records</th></tr></thead><tbody>{sources}</tbody>"
        f"</table></div>\n{nav}</header>\n"
        + "\n".join(page.parts)
        + "\n</main>\n</body>\n</html>\n"
    )


def _nav(by_kind: dict[str, list[ResultSet]]) -> str:
    links = [("runs", "Runs")] if by_kind["run"] else []
    links += [(f"plans-{i}", f"Plans: {rs.source}") for i, rs in enumerate(by_kind["plan"], 1)]
    links += [("sweeps", "Sweeps")] if by_kind["sweep"] else []
    links += [("collectives", "Collectives")] if by_kind["collective"] else []
    links += [("glossary", "Glossary")]
    return "<nav>" + "".join(f'<a href="#{a}">{escape(t)}</a>' for a, t in links) + "</nav>\n"


def render_report(
    inputs: Sequence[ResultSet], out_path: str | Path, title: str = "clustersim report"
) -> Path:
    """Write the report of ``inputs`` to ``out_path`` (one self-contained HTML file).

    Parameters
    ----------
    inputs : sequence of ResultSet
        From :func:`~sim.report.load_results` (or :meth:`ResultSet.from_dicts`).
    out_path : str or Path
        The HTML file to write; its folder must exist.
    title : str
        Heading and ``<title>`` of the page.

    Returns
    -------
    Path
        The file written.
    """
    return write_atomic(out_path, report_html(inputs, title).encode("utf-8"))
