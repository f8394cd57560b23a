"""Analytical vs flow backend: step time of every shipped scenario and its ZeRO-3 variant.

Both backends run the same step model; they differ in how concurrent traffic shares the
network: the flow backend re-solves max-min fair rates on every link whenever a transfer
starts or ends (every TP rank's DP/ZeRO collectives, pipeline sends and gathers share
NICs and spine links as they overlap); the analytical backend times each collective in
closed form and charges groups that run together the extra load on their most loaded
link (:meth:`sim.training.compute.passes.CollectiveTimer.concurrent_time_s`). Issue 9's
target: they agree within 10% on step time.

Run: ``python benchmarks/backend_agreement.py [--only NAME]``. Prints one row per case
as it finishes: step times, their difference, and each backend's wall time.
"""

from __future__ import annotations

import argparse
import time

from sim.scenario.load import load_scenario, scenario_names
from sim.training.step import simulate_step

#: ZeRO-3 variant of a scenario: shard the optimizer, gradients and parameters over DP.
ZERO3 = ("parallel.zero=3",)


def cases(only: str | None) -> list[tuple[str, tuple[str, ...]]]:
    """(scenario, --set overrides) of every case."""
    names = [n for n in scenario_names() if "/" not in n and (only is None or n == only)]
    return [(n, sets) for n in names for sets in ((), ZERO3)]


def main() -> None:
    """Print the table, one row per case as it finishes."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", help="one scenario name")
    args = ap.parse_args()
    head = f"{'scenario':<22} {'variant':<8} {'analytical s':>13} {'flow s':>10} {'diff':>7}"
    print(head + f" {'wall a (s)':>10} {'wall f (s)':>10}", flush=True)
    worst = 0.0
    for name, sets in cases(args.only):
        sc = load_scenario(name, sets)
        t0 = time.perf_counter()
        a = simulate_step(sc, network="analytical").step_time_s
        t1 = time.perf_counter()
        f = simulate_step(sc, network="flow").step_time_s
        t2 = time.perf_counter()
        diff = a / f - 1
        worst = max(worst, abs(diff))
        variant = "zero3" if sets else "as is"
        print(f"{name:<22} {variant:<8} {a:>13.4f} {f:>10.4f} {diff:>+7.1%} "
              f"{t1 - t0:>10.2f} {t2 - t1:>10.2f}", flush=True)  # fmt: skip
    print(f"largest |difference|: {worst:.1%}")


if __name__ == "__main__":
    main()
