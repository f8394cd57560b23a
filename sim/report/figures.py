"""Which figure fits which results, and :func:`plot_for`, which writes one to a file.

Figure kinds: ``scaling`` (sweeps), ``breakdown`` and ``memory`` (runs and plans),
``links`` (runs and plans with per-link rows) and ``busbw`` (collectives).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sim.errors import ConfigError
from sim.files import write_atomic
from sim.report.backend import figure_bytes, import_matplotlib, plot_format
from sim.report.loaders import ResultSet
from sim.report.plots import (
    breakdown_figure,
    busbw_figure,
    links_figure,
    memory_figure,
    scaling_figure,
)
from sim.report.records import RunRecord
from sim.report.series import (
    collective_series,
    link_matrix,
    plan_labels,
    run_labels,
    scaling_series,
)

__all__ = ["DEFAULT_FIGURE", "FIGURE_KINDS", "MAX_PLAN_BARS", "bars", "figure_for", "plot_for"]

FIGURE_KINDS: dict[str, tuple[str, ...]] = {
    "scaling": ("sweep",),
    "breakdown": ("run", "plan"),
    "memory": ("run", "plan"),
    "links": ("run", "plan"),
    "busbw": ("collective",),
}
"""Figure kind -> the result kinds it is drawn from."""

DEFAULT_FIGURE = {
    "run": "breakdown",
    "plan": "breakdown",
    "sweep": "scaling",
    "collective": "busbw",
}
"""The figure ``plot_for`` draws for each result kind when none is named."""

MAX_PLAN_BARS = 12
"""Candidates of a plan search shown in its bar charts (the best ones)."""


def bars(sets: Sequence[ResultSet]) -> list[tuple[str, RunRecord]]:
    """(label, record) per bar: every run, and the best :data:`MAX_PLAN_BARS` of each plan list."""
    runs = [(s.source, r) for s in sets if s.kind == "run" for r in s.records]
    out = list(zip(run_labels(runs), (r for _, r in runs), strict=True))
    plan_sets = [s for s in sets if s.kind == "plan"]
    for s in plan_sets:
        best = s.records[:MAX_PLAN_BARS]
        prefix = f"{s.source} " if len(plan_sets) > 1 else ""
        out += [(prefix + label, r) for label, r in zip(plan_labels(best), best, strict=True)]
    return out


def figure_for(sets: Sequence[ResultSet], kind: str) -> Any:
    """Draw one figure of ``kind`` from the result sets it applies to.

    Raises
    ------
    MissingExtraError
        matplotlib is not installed (``pip install 'clustersim[plot]'``).
    ConfigError
        Unknown kind, no results of a kind the figure is drawn from, or nothing to draw
        (no per-link rows, a sweep with one GPU count); the message says which.
    """
    import_matplotlib()  # the friendly error first, whatever the figure
    if kind not in FIGURE_KINDS:
        raise ConfigError(f"figure {kind!r} is unknown; allowed: {', '.join(FIGURE_KINDS)}")
    usable = [s for s in sets if s.kind in FIGURE_KINDS[kind]]
    if not usable:
        have = ", ".join(sorted({s.kind for s in sets})) or "none"
        need = " or ".join(FIGURE_KINDS[kind])
        raise ConfigError(f"figure {kind!r} needs {need} results; got {have}")
    if kind == "scaling":
        return _scaling(usable)
    if kind == "busbw":
        return busbw_figure(collective_series([(s.source, s.records) for s in usable]))
    labelled = bars(usable)
    if kind == "links":
        matrix = link_matrix(labelled)
        if matrix is None:
            raise ConfigError(
                "no per-link utilisation in these results (their records have no 'links' rows)"
            )
        return links_figure(matrix)
    return breakdown_figure(labelled) if kind == "breakdown" else memory_figure(labelled)


def _scaling(sets: Sequence[ResultSet]) -> Any:
    series = [
        sr for s in sets for sr in scaling_series(s.records, s.source if len(sets) > 1 else "")
    ]
    gpus = {g for sr in series for g in sr.gpus}
    if not gpus:
        raise ConfigError("no simulated point that fits in memory: nothing to plot")
    if len(gpus) < 2:
        raise ConfigError(f"every point has {gpus.pop()} GPUs: no scaling curve to draw")
    return scaling_figure(series)


def plot_for(
    results: ResultSet | Sequence[ResultSet] | Sequence[Mapping[str, Any]],
    kind: str | None,
    path: str | Path,
) -> Path:
    """Draw one figure of some results into a ``.png`` or ``.svg`` file.

    Parameters
    ----------
    results : ResultSet, list of ResultSet, or list of dicts
        E.g. ``[step_result.to_dict()]`` from ``run``, a sweep's rows, or the records of
        ``collective --json`` (the result kind is told from their fields).
    kind : str or None
        ``scaling``, ``breakdown``, ``memory``, ``links`` or ``busbw``; None: the default
        for the results (:data:`DEFAULT_FIGURE`).
    path : str or Path
        Output file; its suffix picks the format.

    Returns
    -------
    Path
        The file written (same inputs, same matplotlib: byte-identical file).

    Raises
    ------
    ConfigError
        Bad suffix, missing folder, or a figure these results cannot give.
    MissingExtraError
        matplotlib is not installed (``pip install 'clustersim[plot]'``).
    """
    fmt = plot_format(str(path))
    sets = _as_sets(results)
    fig = figure_for(sets, kind or DEFAULT_FIGURE[sets[0].kind])
    return write_atomic(path, figure_bytes(fig, fmt))


def _as_sets(
    results: ResultSet | Sequence[ResultSet] | Sequence[Mapping[str, Any]],
) -> list[ResultSet]:
    if isinstance(results, ResultSet):
        return [results]
    items = list(results)
    if items and all(isinstance(r, ResultSet) for r in items):
        return items  # type: ignore[return-value]
    return [ResultSet.from_dicts(items)]  # type: ignore[arg-type]
