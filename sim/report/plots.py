"""The report's figures, one builder per kind, each returning a matplotlib ``Figure``.

Builders take the plain data of :mod:`sim.report.series` and draw it; they import
matplotlib through :mod:`sim.report.backend` only when called (the ``[plot]`` extra).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from sim.report.backend import styled
from sim.report.records import RunRecord
from sim.report.series import (
    BREAKDOWN_ORDER,
    MEMORY_ORDER,
    CollectiveSeries,
    LinkMatrix,
    ScalingSeries,
    components,
    hbm_capacity_bytes,
)

__all__ = [
    "breakdown_figure",
    "busbw_figure",
    "component_colors",
    "line_handle",
    "links_figure",
    "memory_figure",
    "palette",
    "scaling_figure",
]

GIB = 2.0**30
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h", "<", ">", "p")
_HBM_COLOR = "#c0392b"


def palette(n: int) -> list[Any]:
    """``n`` distinct colours, the same ones for the same positions in every figure."""
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def component_colors(names: Sequence[str], preferred: Sequence[str]) -> dict[str, Any]:
    """A fixed colour per component: the known ones keep theirs whatever else is shown."""
    order = list(preferred) + sorted(set(names) - set(preferred))
    colors = palette(len(order))
    return {n: colors[order.index(n)] for n in names}


def scaling_figure(series: Sequence[ScalingSeries]) -> Any:
    """Throughput and step time against GPUs, each series with its ideal linear-scaling line.

    Both axes are logarithmic, so ideal scaling is a straight line from each series'
    smallest point; points that do not fit in memory are drawn hollow and not joined.
    """
    from matplotlib.ticker import EngFormatter, FixedLocator, LogLocator, NullFormatter

    with styled() as figure:
        fig = figure(figsize=(10.0, 4.2), layout="constrained")
        ax_t, ax_s = fig.subplots(1, 2)
        colors = palette(len(series))
        gpus = sorted({g for s in series for g in (*s.gpus, *s.unfit_gpus)})
        for s, c in zip(series, colors, strict=True):
            for ax, y, ideal, unfit in (
                (ax_t, s.tokens_per_s, s.ideal_tokens_per_s, s.unfit_tokens_per_s),
                (ax_s, s.step_time_s, s.ideal_step_time_s, s.unfit_step_time_s),
            ):
                label = s.label or "simulated"
                ax.plot(s.gpus, y, "o-", color=c, label=label if s.gpus else None)
                ax.plot(s.gpus, ideal, "--", color=c, alpha=0.6, linewidth=1.0)
                ax.plot(
                    s.unfit_gpus, unfit, "o", mfc="none", color=c, label=None if s.gpus else label
                )
        for ax, title, unit in (
            (ax_t, "Throughput", "tokens/s"),
            (ax_s, "Step time", "s"),
        ):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(title)
            ax.set_xlabel("GPUs")
            ax.set_ylabel(f"{title.lower()} ({unit})")
            if 0 < len(gpus) <= 12:
                ax.xaxis.set_major_locator(FixedLocator(gpus))
                ax.set_xticklabels([str(g) for g in gpus])
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(EngFormatter(sep=""))
            ax.yaxis.set_minor_formatter(NullFormatter())
        handles = ax_t.get_legend_handles_labels()[0]
        handles += [
            line_handle("--", "grey", "ideal linear scaling (dashed)"),
            line_handle("none", "grey", "does not fit in memory", marker="o", mfc="none"),
        ]
        fig.legend(handles=handles, loc="outside lower center", ncol=min(3, len(handles)))
    return fig


def line_handle(style: Any, color: str, label: str, **kw: Any) -> Any:
    """A legend entry that is not drawn in the axes."""
    from matplotlib.lines import Line2D

    return Line2D([], [], linestyle=style, color=color, label=label, **kw)


def _stacked_bars(
    ax: Any,
    labels: Sequence[str],
    parts: Sequence[Mapping[str, float]],
    preferred: Sequence[str],
    scale: float,
) -> None:
    """Horizontal bars, one per label, stacked by component (values divided by ``scale``)."""
    names = components(parts, preferred)
    colors = component_colors(names, preferred)
    y = list(range(len(labels)))
    left = [0.0] * len(labels)
    for name in names:
        widths = [p.get(name, 0.0) / scale for p in parts]
        ax.barh(y, widths, left=left, color=colors[name], label=name.replace("_", " "), height=0.6)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.set_yticks(y, labels=list(labels))
    ax.set_ylim(len(labels) - 0.5, -0.5)  # first bar on top
    ax.grid(axis="y", visible=False)


def _legend_columns(ax: Any) -> int:
    """All legend entries on one row up to 6, else rows of 5."""
    n = len(ax.get_legend_handles_labels()[0])
    return n if n <= 6 else 5


def _bar_height(n: int) -> float:
    return 1.6 + 0.45 * n


def breakdown_figure(bars: Sequence[tuple[str, RunRecord]]) -> Any:
    """Step time of each run, stacked by where it goes (compute, exposed communication, ...)."""
    with styled() as figure:
        fig = figure(figsize=(9.0, _bar_height(len(bars))), layout="constrained")
        ax = fig.subplots()
        _stacked_bars(
            ax, [b[0] for b in bars], [b[1].breakdown for b in bars], BREAKDOWN_ORDER, 1.0
        )
        for i, (_, run) in enumerate(bars):
            ax.annotate(
                f" {run.step_time_s:.3g} s",
                (sum(run.breakdown.values()), i),
                va="center",
                fontsize=8,
            )
        ax.set_xlabel("seconds per step")
        ax.set_title("Step time breakdown")
        ax.margins(x=0.12)
        fig.legend(loc="outside lower center", ncol=_legend_columns(ax))
    return fig


def memory_figure(bars: Sequence[tuple[str, RunRecord]]) -> Any:
    """Memory of the fullest GPU of each run by component, with its HBM capacity where known."""
    with styled() as figure:
        fig = figure(figsize=(9.0, _bar_height(len(bars))), layout="constrained")
        ax = fig.subplots()
        runs = [b[1] for b in bars]
        _stacked_bars(
            ax, [b[0] for b in bars], [r.memory_breakdown for r in runs], MEMORY_ORDER, GIB
        )
        labelled = False
        for i, run in enumerate(runs):
            total = run.memory_per_gpu_bytes / GIB
            cap = hbm_capacity_bytes(run)
            if cap is not None:
                ax.plot([cap / GIB] * 2, [i - 0.42, i + 0.42], "--", color=_HBM_COLOR, linewidth=1.6,
                        label=None if labelled else "HBM capacity")  # fmt: skip
                labelled = True
            text = f" {total:.1f} GiB" + ("" if run.fits else "  does not fit")
            ax.annotate(
                text, (total, i), va="center", fontsize=8, color="black" if run.fits else _HBM_COLOR
            )
        ax.set_xlabel("GiB per GPU (fullest GPU)")
        ax.set_title("Memory per GPU")
        ax.margins(x=0.15)
        fig.legend(loc="outside lower center", ncol=_legend_columns(ax))
    return fig


def links_figure(matrix: LinkMatrix) -> Any:
    """Heatmap of link utilisation: the busiest links (rows) in each run (columns); for a
    single run, bars (a one-column heatmap of small shares reads as one colour)."""
    import numpy as np

    rows, cols = len(matrix.links), len(matrix.runs)
    if cols == 1:
        return _link_bars(matrix)
    with styled() as figure:
        fig = figure(figsize=(max(6.0, 3.5 + 1.8 * cols), 1.4 + 0.24 * rows), layout="constrained")
        ax = fig.subplots()
        data = np.ma.masked_invalid(np.array(matrix.utilisation, dtype=float))
        from matplotlib import colormaps

        cmap = colormaps["viridis"].with_extremes(bad="#dddddd")
        im = ax.imshow(data, cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
        ax.set_yticks(
            range(rows),
            labels=[f"{n} ({k})" for n, k in zip(matrix.links, matrix.kinds, strict=True)],
        )
        ax.set_xticks(range(cols), labels=list(matrix.runs), rotation=15, ha="right")
        ax.grid(False)
        if rows * cols <= 240:
            for i, row in enumerate(matrix.utilisation):
                for j, u in enumerate(row):
                    if math.isfinite(u):
                        ax.text(j, i, _percent(u), ha="center", va="center", fontsize=7,
                                color="black" if u > 0.6 else "white")  # fmt: skip
        shown = (
            f"busiest {rows} of {matrix.total_links} links"
            if rows < matrix.total_links
            else "all links"
        )
        ax.set_title(f"Link utilisation ({shown})")
        fig.colorbar(im, ax=ax, label="utilisation (busy fraction of the step)", shrink=0.9)
    return fig


def _link_bars(matrix: LinkMatrix) -> Any:
    """The busiest links of one run as horizontal bars of utilisation, coloured by kind."""
    from matplotlib.patches import Patch
    from matplotlib.ticker import PercentFormatter

    kinds = list(dict.fromkeys(matrix.kinds))
    colors = dict(zip(kinds, palette(len(kinds)), strict=True))
    util = [row[0] for row in matrix.utilisation]
    with styled() as figure:
        fig = figure(figsize=(9.0, 1.4 + 0.22 * len(util)), layout="constrained")
        ax = fig.subplots()
        y = list(range(len(util)))
        ax.barh(y, util, color=[colors[k] for k in matrix.kinds], height=0.7)
        for i, u in enumerate(util):
            ax.annotate(f" {_percent(u)}", (u, i), va="center", fontsize=7)
        ax.set_yticks(y, labels=list(matrix.links))
        ax.set_ylim(len(util) - 0.5, -0.5)
        ax.set_xlim(0.0, max(1.0, max(util, default=0.0)) * 1.08)
        ax.xaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
        ax.set_xlabel("utilisation (busy fraction of the step)")
        ax.grid(axis="y", visible=False)
        shown = (
            f"busiest {len(util)} of {matrix.total_links}"
            if len(util) < matrix.total_links
            else "all"
        )
        ax.set_title(f"Link utilisation, {matrix.runs[0]} ({shown} links)")
        handles = [Patch(color=colors[k], label=k) for k in kinds]
        fig.legend(handles=handles, loc="outside lower center", ncol=min(5, len(handles)))
    return fig


def _percent(u: float) -> str:
    """Utilisation as a whole percent; a small non-zero share reads '<1%', not '0%'."""
    return "<1%" if 0 < u < 0.005 else f"{u:.0%}"


def _bytes_label(x: float, _pos: object = None) -> str:
    """1024 -> '1 KiB' (collective sizes are powers of two)."""
    for unit, size in (("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10)):
        if x >= size:
            return f"{x / size:g} {unit}"
    return f"{x:g} B"


def busbw_figure(series: Sequence[CollectiveSeries]) -> Any:
    """Bus bandwidth against message size per collective series; marker shape = algorithm."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    algos = sorted({a for s in series for a in s.algorithms})
    marker = {a: _MARKERS[i % len(_MARKERS)] for i, a in enumerate(algos)}
    with styled() as figure:
        fig = figure(figsize=(9.0, 4.6), layout="constrained")
        ax = fig.subplots()
        for s, c in zip(series, palette(len(series)), strict=True):
            ax.plot(s.size_bytes, s.busbw_GBps, "-", color=c, label=s.label)
            for a in algos:
                pts = [
                    (x, y)
                    for x, y, al in zip(s.size_bytes, s.busbw_GBps, s.algorithms, strict=True)
                    if al == a
                ]
                if pts:
                    ax.plot(
                        *zip(*pts, strict=True),
                        linestyle="none",
                        marker=marker[a],
                        color=c,
                        markersize=5,
                    )
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(LogLocator(base=4.0))
        ax.xaxis.set_major_formatter(FuncFormatter(_bytes_label))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("message size")
        ax.set_ylabel("bus bandwidth (GB/s)")
        ax.set_title("Collective bus bandwidth (nccl-tests definition)")
        ax.set_ylim(bottom=0.0)
        first = ax.legend(loc="upper left")
        ax.add_artist(first)
        handles = [line_handle("none", "grey", a, marker=marker[a]) for a in algos]
        ax.legend(handles=handles, loc="center left", bbox_to_anchor=(1.0, 0.5), title="algorithm")
    return fig
