"""The figures of one study (a sweep file), drawn as small multiples a student can read.

- :func:`scaling_panels_figure`: per panel (one per model, or per fabric when one axis
  would hold too many series), throughput against GPUs with each series' ideal line
  above, and scaling efficiency against GPUs with the 100% line below.
- :func:`share_figure`: per point, where the step's time goes, stacked as shares of
  the step (the step time written at the end of each bar).
- :func:`memory_points_figure`: per point, the fullest GPU's memory stacked by kind
  against the GPU's capacity.

:func:`study_points` turns the rows into the points the two bar figures draw.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sim.report.backend import styled
from sim.report.captions import GIB, StudyPoint, part_name, rate_text, seconds_text
from sim.report.plots import component_colors, line_handle, palette
from sim.report.records import SweepRow
from sim.report.series import (
    BREAKDOWN_ORDER,
    MEMORY_ORDER,
    ScalingSeries,
    components,
    facet_key,
    series_labels,
    short_label,
    split_label,
)

__all__ = ["memory_points_figure", "scaling_panels_figure", "share_figure", "study_points"]

_HBM_COLOR = "#c0392b"


def study_points(rows: Sequence[SweepRow]) -> list[StudyPoint]:
    """The simulated points of a sweep, by panel, then series, then GPU count."""
    labels = series_labels(rows)
    key = facet_key([lb for r, lb in zip(rows, labels, strict=True) if r.ok])
    out = []
    for r, label in zip(rows, labels, strict=True):
        if not r.ok:
            continue
        short = short_label(label, key) if key else short_label(label, None)
        bar = ", ".join(p for p in (short, f"{r.gpus} GPUs") if p)
        out.append(
            StudyPoint(
                facet=split_label(label).get(key, "") if key else "",
                series=short,
                label=bar + ("" if r.fits else " (does not fit)"),
                gpus=r.gpus,
                step_time_s=float(r.step_time_s or 0.0),
                breakdown=dict(r.breakdown),
                memory=dict(r.memory_breakdown),
                memory_bytes=float(r.memory_per_gpu_bytes or 0.0),
                hbm_bytes=r.hbm_bytes,
                fits=bool(r.fits),
            )
        )
    order = {f: i for i, f in enumerate(dict.fromkeys(p.facet for p in out))}
    return sorted(out, key=lambda p: (order[p.facet], p.series, p.gpus))


def _facets(items: Sequence[Any]) -> list[str]:
    return list(dict.fromkeys(i.facet for i in items))


def _log2_gpus(ax: Any, gpus: Sequence[int]) -> None:
    from matplotlib.ticker import FixedLocator, NullFormatter

    ax.set_xscale("log", base=2)
    if 0 < len(gpus) <= 12:
        ax.xaxis.set_major_locator(FixedLocator(list(gpus)))
        ax.set_xticklabels([str(g) for g in gpus])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("GPUs")


def scaling_panels_figure(series: Sequence[ScalingSeries]) -> Any:
    """Throughput (top) and scaling efficiency (bottom) against GPUs, a column per panel."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, PercentFormatter

    facets = _facets(series)
    names = list(dict.fromkeys(s.label for s in series))
    colors = dict(zip(names, palette(len(names)), strict=True))
    unit = series[0].unit if series else "tokens/s"
    with styled() as figure:
        width = min(4.2 * len(facets) + 1.0, 14.0)
        fig = figure(figsize=(width, 6.4), layout="constrained")
        axes = fig.subplots(2, len(facets), squeeze=False)
        for col, facet in enumerate(facets):
            ax_t, ax_e = axes[0][col], axes[1][col]
            mine = [s for s in series if s.facet == facet]
            gpus = sorted({g for s in mine for g in (*s.gpus, *s.unfit_gpus)})
            for s in mine:
                c = colors[s.label]
                ax_t.plot(s.gpus, s.tokens_per_s, "o-", color=c, label=s.label or "simulated")
                ax_t.plot(s.gpus, s.ideal_tokens_per_s, "--", color=c, alpha=0.6, linewidth=1.0)
                ax_t.plot(s.unfit_gpus, s.unfit_tokens_per_s, "o", mfc="none", color=c)
                ax_e.plot(s.gpus, s.efficiency, "o-", color=c)
            ax_e.axhline(1.0, color="grey", linestyle="--", linewidth=1.0)
            ax_t.set_yscale("log")
            ax_t.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            ax_t.yaxis.set_major_formatter(FuncFormatter(lambda x, _p: rate_text(x)))
            ax_t.yaxis.set_minor_formatter(NullFormatter())
            ax_t.set_title(facet or "Throughput")
            ax_e.set_ylim(0.0, 1.1)
            ax_e.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
            for ax in (ax_t, ax_e):
                _log2_gpus(ax, gpus)
            if col == 0:
                ax_t.set_ylabel(f"throughput ({unit})")
                ax_e.set_ylabel("scaling efficiency")
        handles = [line_handle("-", colors[n], n or "simulated", marker="o") for n in names]
        handles += [
            line_handle("--", "grey", "ideal: linear scaling from the smallest point"),
            line_handle("none", "grey", "does not fit in memory", marker="o", mfc="none"),
        ]
        fig.legend(handles=handles, loc="outside lower center", ncol=min(3, len(handles)))
    return fig


def _bar_axes(figure: Any, points: Sequence[StudyPoint], width: float) -> tuple[Any, list[Any]]:
    """A figure with one axis per panel, each as tall as its number of bars."""
    facets = _facets(points)
    counts = [sum(1 for p in points if p.facet == f) for f in facets]
    fig = figure(figsize=(width, 1.4 + 0.26 * sum(counts) + 0.5 * len(facets)),
                 layout="constrained")  # fmt: skip
    axes = fig.subplots(len(facets), 1, squeeze=False, height_ratios=[c + 1 for c in counts])
    return fig, [row[0] for row in axes]


def _stack(ax: Any, points: Sequence[StudyPoint], parts: list[dict[str, float]],
           names: Sequence[str], colors: dict[str, Any], scale: Sequence[float]) -> None:  # fmt: skip
    y = list(range(len(points)))
    left = [0.0] * len(points)
    for name in names:
        widths = [p.get(name, 0.0) / s if s > 0 else 0.0 for p, s in zip(parts, scale, strict=True)]
        ax.barh(y, widths, left=left, color=colors[name], height=0.7)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.set_yticks(y, labels=[p.label for p in points])
    ax.set_ylim(len(points) - 0.5, -0.5)
    ax.grid(axis="y", visible=False)


def share_figure(points: Sequence[StudyPoint]) -> Any:
    """Each point's step time split by part, as shares of the step; the step time at the end."""
    from matplotlib.patches import Patch
    from matplotlib.ticker import PercentFormatter

    names = components([p.breakdown for p in points], BREAKDOWN_ORDER)
    colors = component_colors(names, BREAKDOWN_ORDER)
    with styled() as figure:
        fig, axes = _bar_axes(figure, points, 10.0)
        for ax, facet in zip(axes, _facets(points), strict=True):
            mine = [p for p in points if p.facet == facet]
            _stack(ax, mine, [p.breakdown for p in mine], names, colors,
                   [p.step_time_s for p in mine])  # fmt: skip
            for i, p in enumerate(mine):
                ax.annotate(f" {seconds_text(p.step_time_s)}", (1.0, i), va="center", fontsize=7)
            ax.set_xlim(0.0, 1.12)
            ax.xaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
            ax.set_title(facet, loc="left")
        axes[-1].set_xlabel("share of the step time (step time at the end of each bar)")
        handles = [Patch(color=colors[n], label=part_name(n)) for n in names]
        fig.legend(handles=handles, loc="outside lower center", ncol=min(4, len(handles)))
    return fig


def memory_points_figure(points: Sequence[StudyPoint]) -> Any:
    """Each point's fullest GPU by kind of memory (GiB) against the GPU's capacity (dashed)."""
    from matplotlib.patches import Patch

    names = components([p.memory for p in points], MEMORY_ORDER)
    colors = component_colors(names, MEMORY_ORDER)
    with styled() as figure:
        fig, axes = _bar_axes(figure, points, 10.0)
        for ax, facet in zip(axes, _facets(points), strict=True):
            mine = [p for p in points if p.facet == facet]
            _stack(ax, mine, [p.memory for p in mine], names, colors, [GIB] * len(mine))
            for i, p in enumerate(mine):
                if p.hbm_bytes:
                    ax.plot([p.hbm_bytes / GIB] * 2, [i - 0.45, i + 0.45], "--",
                            color=_HBM_COLOR, linewidth=1.4)  # fmt: skip
                ax.annotate(f" {p.memory_bytes / GIB:.1f} GiB", (p.memory_bytes / GIB, i),
                            va="center", fontsize=7, color="black" if p.fits else _HBM_COLOR)  # fmt: skip
            ax.margins(x=0.12)
            ax.set_title(facet, loc="left")
        axes[-1].set_xlabel("GiB on the fullest GPU")
        handles = [Patch(color=colors[n], label=part_name(n)) for n in names]
        handles.append(line_handle("--", _HBM_COLOR, "the GPU's memory (HBM)"))
        fig.legend(handles=handles, loc="outside lower center", ncol=min(4, len(handles)))
    return fig
