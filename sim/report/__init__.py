"""Plots and a self-contained HTML report, built from clustersim's result records.

The report sits above the simulator: it reads the flat records that ``clustersim run
--json``, sweeps, plan searches and ``clustersim collective --json`` write (formats in
:mod:`sim.report.records`), never the simulator's internals. Loading needs only the core
install; drawing needs the ``[plot]`` extra (matplotlib), imported on first use::

    from sim.report import load_results, render_report, plot_for
    sets = [load_results("run.json"), load_results("sweep.csv")]
    render_report(sets, "report.html")
    plot_for(sets[1], "scaling", "scaling.svg")
"""

from sim.report.backend import MissingExtraError
from sim.report.figures import DEFAULT_FIGURE, FIGURE_KINDS, figure_for, plot_for
from sim.report.loaders import KINDS, ResultSet, detect_kind, load_results
from sim.report.page import render_report, report_html
from sim.report.records import CollectiveRecord, LinkRecord, PlanRecord, RunRecord, SweepRow

__all__ = [
    "DEFAULT_FIGURE",
    "FIGURE_KINDS",
    "KINDS",
    "CollectiveRecord",
    "LinkRecord",
    "MissingExtraError",
    "PlanRecord",
    "ResultSet",
    "RunRecord",
    "SweepRow",
    "detect_kind",
    "figure_for",
    "load_results",
    "plot_for",
    "render_report",
    "report_html",
]
