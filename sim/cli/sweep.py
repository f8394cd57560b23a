"""``clustersim sweep``: a scenario over a grid of keys, one row per point.

The simulator is imported inside :func:`run`, so ``clustersim sweep --help`` starts fast.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from sim.cli.outputs import (
    add_profile_options,
    add_set_option,
    check_plot_path,
    count,
    scenario_sets,
)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``sweep`` subcommand."""
    p = sub.add_parser(
        "sweep",
        help="run a scenario over a grid of keys (process pool or Ray)",
        description="Simulate the cartesian product of --grid values laid over a scenario "
        "(or a study file from scenarios/studies). Rows are appended to --out as points "
        "finish; --resume continues a killed sweep.",
    )
    p.add_argument("scenario", help="scenario preset or YAML file, or a study file")
    p.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V1,V2,...",
        help="a scenario key and its values, e.g. cluster.nodes=1,2,4 (repeatable)",
    )
    add_set_option(p, "override a scenario field for every point")
    add_profile_options(p)
    p.add_argument(
        "--jobs", "-j", type=count(1), default=1,
        help="worker processes (default 1; at most the CPUs available)",
    )  # fmt: skip
    p.add_argument("--backend", default="local", help="local (process pool) or ray")
    p.add_argument("--out", metavar="FILE", help="append rows to FILE (.csv, .jsonl, .parquet)")
    p.add_argument("--resume", action="store_true", help="continue the sweep that wrote --out")
    p.add_argument("--network", help="flow or analytical for every point (default: the scenario's)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the rows as a JSON list")
    out.add_argument("--csv", action="store_true", help="print the rows as CSV")
    p.add_argument("--plot", metavar="FILE", help="draw the scaling figure (.png or .svg)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run the sweep; print a table, JSON or CSV; draw the figure if asked."""
    from sim.files import dumps_json
    from sim.studies.files import csv_text
    from sim.studies.grid import sweep_spec
    from sim.studies.runner import columns_of, run_sweep, usable_jobs

    if args.network is not None:
        from sim.network import backend

        backend(args.network, "--network")
    if args.plot:
        check_plot_path(args.plot)
    spec = sweep_spec(args.scenario, args.grid, scenario_sets(args))
    if args.jobs >= 1 and usable_jobs(args.jobs, args.backend) < args.jobs:
        cpus = usable_jobs(args.jobs, args.backend)
        print(f"clustersim: note: --jobs {args.jobs} capped at {cpus}, the CPUs available",
              file=sys.stderr)  # fmt: skip
    with _sigterm_as_interrupt():
        rows = run_sweep(
            spec,
            args.out,
            jobs=args.jobs,
            backend=args.backend,
            resume=args.resume,
            network=args.network,
            progress=not args.no_progress,
        )
    columns = columns_of(spec)
    if args.json:
        print(dumps_json(rows, indent=1))
    elif args.csv:
        sys.stdout.write(csv_text(rows, columns))
    else:
        print(table(rows, spec.keys))
        if args.out:
            print(f"rows written to {args.out}")
    _refuse_if_every_point_failed(rows)
    if args.plot:
        from sim.report import plot_for

        plot_for(rows, "scaling", args.plot)
    return 0


def _refuse_if_every_point_failed(rows: list[dict[str, Any]]) -> None:
    """A sweep none of whose points could be simulated is a user error (exit status 2),
    not a result: a bad ``--set`` or a grid value every point shares. Its rows are kept
    (printed, and in ``--out``) with each point's reason."""
    from sim.errors import ConfigError

    if not rows or any(not r.get("reason") or r.get("step_time_s") is not None for r in rows):
        return
    reasons = sorted({str(r["reason"]) for r in rows})
    more = f" (and {len(reasons) - 1} other reason(s))" if len(reasons) > 1 else ""
    raise ConfigError(f"no point of the sweep could be simulated: {reasons[0]}{more}")


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Handle SIGTERM (``kill PID``) as Ctrl-C: the sweep stops its workers and says what
    it kept, instead of dying with its workers left running."""

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        old = signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread (the sweep runs inside another program)
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(rows: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> str:
    """Rows as an aligned text table (units people read: GiB, %)."""
    from sim.studies.columns import throughput_unit

    unit = throughput_unit(r.get("throughput_unit") for r in rows)
    head = [*keys, "GPUs", "step(s)", unit, "MFU", "mem GiB", "fits", "scaling", "reason"]
    body = []
    for r in rows:
        fits = "-" if r.get("fits") is None else ("yes" if r["fits"] else "NO")
        body.append(
            [
                *(str(r.get(k)) for k in keys),
                _fmt(r.get("gpus"), "d"),
                _fmt(r.get("step_time_s"), ".4g"),
                _fmt(r.get("tokens_per_s"), ",.0f"),
                _fmt(r.get("mfu"), ".1%"),
                _fmt(
                    None
                    if r.get("memory_per_gpu_bytes") is None
                    else r["memory_per_gpu_bytes"] / 2**30,
                    ".1f",
                ),
                fits,
                _fmt(r.get("scaling_efficiency"), ".1%"),
                str(r.get("reason") or ""),
            ]
        )
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head[:-1])]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head[:-1], widths, strict=True)) + "  reason"]
    for b in body:
        lines.append(
            "  ".join(c.rjust(w) for c, w in zip(b[:-1], widths, strict=True)) + "  " + b[-1]
        )
    if any(r.get("scaling_efficiency") is not None for r in rows):
        lines.append(
            "scaling: throughput per GPU over that of the smallest point of the same series "
            "(rows that differ only in GPU count); '-' where a series has one GPU count"
        )
    return "\n".join(line.rstrip() for line in lines)
