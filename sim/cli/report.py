"""``clustersim report``: one self-contained HTML page from result files.

Reads what ``run --json``, ``plan --json``, ``sweep --out`` and ``collective --json``
write (:mod:`sim.report.records`); needs the ``[plot]`` extra for the figures.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``report`` subcommand."""
    p = sub.add_parser(
        "report",
        help="render result files into one self-contained HTML report",
        description="Figures (scaling with the ideal line, step-time breakdown, memory, "
        "per-link utilisation, bus bandwidth) and tables of run, plan, sweep and collective "
        "results, inline in one HTML file that fetches nothing.",
    )
    p.add_argument(
        "results", nargs="+", metavar="RESULTS", help=".json, .jsonl or .csv result files"
    )
    p.add_argument("--out", required=True, metavar="FILE", help="the HTML file to write")
    p.add_argument("--title", default="clustersim report", help="page title")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Load every file (each refused in one line if bad), render, say where it went."""
    from sim.report import load_results, render_report

    _refuse_input_as_output(args.out, args.results)
    sets = [load_results(path) for path in args.results]
    path = render_report(sets, args.out, args.title)
    print(f"report written to {path} ({len(sets)} result file(s))")
    return 0


def _refuse_input_as_output(out: str, results: list[str]) -> None:
    """``--out`` naming one of the result files (itself or through a link) would replace
    that input by the page: refused, the file left as it is."""
    import os

    from sim.errors import ConfigError

    if not os.path.exists(out):
        return
    for path in results:
        if os.path.exists(path) and os.path.samefile(out, path):
            raise ConfigError(
                f"--out {out!r} is the result file {path!r}; writing the report there would "
                "replace it: give another --out"
            )
