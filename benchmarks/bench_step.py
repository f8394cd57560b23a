"""Speed of training-step simulation.

Rows: GPT-3 175B on 1024 H100 (TP 8, PP 8, DP 16, 1F1B, 96 micro-batches) with the flow
and the analytical network: the first run, the same question again (a kept result) and a
new configuration on the same cluster (the global batch one data-parallel batch larger per
call, 97-117 micro-batches: what a search asks; the median of 21 calls); the Megatron 1.7B
row (32 A100) per configuration, cold (first configuration on its cluster) and warm (a
sweep over multiples of the row's batch sharing the cluster).
Wall times on one core, seconds. Run: ``python benchmarks/bench_step.py``.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace
from pathlib import Path

from calibrate.published import MegatronRow, megatron_scenario, read_megatron_table
from sim.scenario.load import Scenario, load_scenario
from sim.training.step import simulate_step

TABLE = (
    Path(__file__).resolve().parents[2]
    / "shared"
    / "data"
    / "published"
    / "megatron-lm-a100-weak-scaling.csv"
)


def timed(fn: object) -> tuple[float, object]:
    """Wall time of one call."""
    t0 = time.perf_counter()
    out = fn()  # type: ignore[operator]
    return time.perf_counter() - t0, out


def new_configuration(sc: Scenario) -> None:
    """Print the median wall time of 21 analytical steps, each a batch not asked before."""
    step = sc.parallel.dp * sc.parallel.micro_batch
    walls = []
    for k in range(1, 22):
        batch = sc.training.global_batch + k * step
        changed = load_scenario("gpt3-175b-1024", [f"training.global_batch={batch}"])
        wall, r = timed(lambda changed=changed: simulate_step(changed, network="analytical"))
        walls.append(wall)
    label = "GPT-3 175B, 1024 H100, new configuration"
    print(
        f"{label:<46} {'analytical':<11} {statistics.median(walls):>9.4f} {r.step_time_s:>9.3f} {r.mfu:>6.1%}"
    )


def main() -> None:
    """Print the table."""
    print(f"{'case':<46} {'network':<11} {'wall (s)':>9} {'step (s)':>9} {'MFU':>6}")
    sc = load_scenario("gpt3-175b-1024")
    for net in ("analytical", "flow"):
        cold, r = timed(lambda net=net: simulate_step(sc, network=net))
        warm, r = timed(lambda net=net: simulate_step(sc, network=net))
        print(
            f"{'GPT-3 175B, 1024 H100, first run':<46} {net:<11} {cold:>9.3f} {r.step_time_s:>9.3f} {r.mfu:>6.1%}"
        )
        print(
            f"{'GPT-3 175B, 1024 H100, again':<46} {net:<11} {warm:>9.3f} {r.step_time_s:>9.3f} {r.mfu:>6.1%}"
        )
        if net == "analytical":
            new_configuration(sc)
    row = (
        read_megatron_table(TABLE)[0]
        if TABLE.exists()
        else MegatronRow("1.7B", 2304, 24, 1, 32, 512, 137.0)
    )
    cold, r = timed(lambda: simulate_step(megatron_scenario(row, "a100-megatron")))
    label = "Megatron 1.7B row, 32 A100, first config"
    print(f"{label:<46} {'analytical':<11} {cold:>9.4f} {r.step_time_s:>9.3f} {r.mfu:>6.1%}")
    batches = [row.batch * k for k in range(1, 11)]
    total, _ = timed(
        lambda: [
            simulate_step(megatron_scenario(replace(row, batch=b), "a100-megatron"))
            for b in batches
        ]
    )
    print(
        f"{'Megatron 1.7B row, per config in a 10-batch sweep':<46} {'analytical':<11} {total / len(batches):>9.4f}"
    )


if __name__ == "__main__":
    main()
