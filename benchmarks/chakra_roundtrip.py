"""Chakra export -> import: does a shipped scenario's step come back with the same time?

For every shipped scenario and its ZeRO-3 variant (``--set parallel.zero=3``): simulate the
step, export it as Chakra traces (``clustersim chakra export``: one file per rank), simulate
the traces again on the same topology (``clustersim chakra run``: replicas folded where
their files mirror replica 0), and print the step time both ways, the error, and what the
export and the import cost (wall seconds on this host; the size of the files). Needs the
``[chakra]`` extra.

Run: ``python benchmarks/chakra_roundtrip.py [--network analytical|flow|scenario]
[--only NAME ...] [--skip NAME ...] [--keep DIR]`` (minutes: the 16,384-GPU scenario alone
writes 16,384 files). ``--network scenario`` uses each scenario's own network.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from sim.chakra.export import StepTraces, write_step_traces
from sim.chakra.run import run_traces
from sim.errors import ClusterSimError
from sim.scenario.layer_list import load_any_scenario
from sim.scenario.load import scenario_names
from sim.training.step import run_step

VARIANTS = {"": (), "zero3": ("parallel.zero=3",)}


def one(name: str, variant: str, network: str, folder: Path) -> dict[str, object]:
    """Export and import one scenario; the row of the table."""
    sets = VARIANTS[variant]
    scenario = load_any_scenario(name, sets)
    net = scenario.network if network == "scenario" else network  # type: ignore[union-attr]
    t0 = time.perf_counter()
    result, run, setup = run_step(scenario, net)  # type: ignore[arg-type]
    t1 = time.perf_counter()
    info: dict[str, str | float] = {"scenario": name, "step_time_s": result.step_time_s}
    label = f"{name}-{variant}" if variant else name
    summary = write_step_traces(StepTraces(setup, run, info), str(folder / label))
    t2 = time.perf_counter()
    cluster = scenario.cluster  # type: ignore[union-attr]
    back = run_traces(folder / label, cluster.topology, nodes=cluster.nodes, network=net)
    t3 = time.perf_counter()
    return {
        "scenario": label,
        "ranks": summary.ranks,
        "network": net,
        "step_s": result.step_time_s,
        "imported_s": back.time_s,
        "error_pct": 100 * (back.time_s / result.step_time_s - 1),
        "simulate_s": t1 - t0,
        "export_s": t2 - t1,
        "MB": summary.bytes / 1e6,
        "import_s": t3 - t2,
        "simulated_ranks": back.simulated_ranks,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--network", default="analytical", choices=("analytical", "flow", "scenario"))
    p.add_argument("--only", nargs="*", default=None, help="these scenarios only")
    p.add_argument("--skip", nargs="*", default=(), help="leave these scenarios out")
    p.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--keep", metavar="DIR", help="write the traces here and keep them")
    args = p.parse_args(argv)
    names = [n for n in (args.only or scenario_names()) if n not in args.skip]
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="chakra-rt-"))
    cols = ("scenario", "ranks", "network", "step_s", "imported_s", "error_pct", "simulate_s",
            "export_s", "MB", "import_s", "simulated_ranks")  # fmt: skip
    print(" | ".join(cols))
    print(" | ".join("---" for _ in cols))
    try:
        for name in names:
            for variant in args.variants:
                folder = root / f"{name}{'-' + variant if variant else ''}"
                folder.mkdir(parents=True, exist_ok=True)
                try:
                    row = one(name, variant, args.network, folder)
                except ClusterSimError as e:
                    print(f"{name} {variant}: not run: {e}")
                    continue
                finally:
                    if not args.keep:
                        shutil.rmtree(folder, ignore_errors=True)
                print(" | ".join(_cell(row[c]) for c in cols))
                sys.stdout.flush()
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.2e}" if abs(value) < 1e-3 and value else f"{value:,.3f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


if __name__ == "__main__":
    sys.exit(main())
