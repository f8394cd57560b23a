"""Megatron-Core's strong-scaling statement against the simulator, by pipeline schedule.

The Megatron-LM README (quoted in the header of ``megatron-core-h100-weak-scaling.csv``)
strong-scales GPT-3 175B (the table's 177B row: TP 8, PP 6) from 96 to 4608 H100 at a
fixed batch of 1152 sequences; MFU falls from 47% to 42%. The statement names no
schedule, so each row here is one: the non-interleaved 1F1B the weak-scaling table is
predicted with (:func:`calibrate.published.mcore_scenario`), and the interleaved schedule
with each ``v`` that divides the 16 layers of a stage. Per end: the published and
predicted MFU, and the predicted step's compute-only MFU (model FLOPs over the compute
time alone) and pipeline-bubble share; last, the ratio of the two ends' MFU (published
0.89).

At 96 GPUs (DP 2, 576 micro-batches per replica) the bubble is ~1% whatever the
schedule, so that end measures the compute model alone; at 4608 (DP 96, 12
micro-batches) the schedule decides the bubble. Nothing here is fitted.

Run: ``python benchmarks/validate_strong_scaling.py`` (reads ../shared/data, or
``$CLUSTERSIM_DATA``).
"""

from __future__ import annotations

from calibrate.fit_training import DATA
from calibrate.published import (
    read_mcore_strong_scaling,
    read_mcore_table,
    strong_scaling_scenario,
)
from sim.result import StepResult
from sim.training.step import simulate_step

TABLE = DATA / "megatron-core-h100-weak-scaling.csv"


def _cells(r: StepResult, published: float) -> str:
    compute_only = r.mfu * r.step_time_s / r.breakdown["compute"]
    bubble = r.breakdown["pipeline_bubble"] / r.step_time_s
    return (f"{published:>6.1%} {r.mfu:>6.1%} {r.mfu / published - 1:>+7.1%} "
            f"{compute_only:>8.1%} {bubble:>7.1%}")  # fmt: skip


def main() -> None:
    """Print the table (see the module docstring)."""
    claim = read_mcore_strong_scaling(TABLE)
    row = next(r for r in read_mcore_table(TABLE) if r.name == claim.row)
    per_stage = row.layers // row.pp
    schedules = [1] + [v for v in range(2, per_stage + 1) if per_stage % v == 0]
    low, high = claim.gpus
    print(f"GPT-3 {row.name} (TP {row.tp}, PP {row.pp}), batch {claim.batch}: "
          f"{low} -> {high} H100 (DP {low // (row.tp * row.pp)} -> "
          f"{high // (row.tp * row.pp)})")  # fmt: skip
    end = f"{'pub':>6} {'pred':>6} {'error':>7} {'compute':>8} {'bubble':>7}"
    print(f"{'schedule':<16} | {low} GPUs: {end} | {high} GPUs: {end} | ratio")
    for v in schedules:
        a, b = (simulate_step(strong_scaling_scenario(row, g, claim.batch, v), "analytical")
                for g in claim.gpus)  # fmt: skip
        name = "1f1b" if v == 1 else f"interleaved v={v}"
        print(f"{name:<16} | {'':>9} {_cells(a, claim.mfu[0])} | {'':>10} "
              f"{_cells(b, claim.mfu[1])} | {b.mfu / a.mfu:.3f}")  # fmt: skip
    print(f"{'published':<16} | {'':>9} {claim.mfu[0]:>6.1%} {'':>31} | {'':>10} "
          f"{claim.mfu[1]:>6.1%} {'':>31} | {claim.mfu[1] / claim.mfu[0]:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
