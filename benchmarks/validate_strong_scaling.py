"""Megatron-Core's strong-scaling curve against the simulator, by pipeline schedule.

The Megatron-LM README (quoted in the header of ``megatron-core-h100-weak-scaling.csv``)
strong-scales GPT-3 175B (the table's 177B row: TP 8, PP 6) from 96 to 4608 H100 at a
fixed batch of 1152 sequences; MFU falls from 47% to 42%. The table's own 177B row is a
third point of the same curve: 2304 GPUs at 1152 sequences, 432.8 TFLOP/s a GPU (43.7%)
(:func:`calibrate.published.strong_scaling_curve`). The statement names no schedule, so
each row here is one: the non-interleaved 1F1B the weak-scaling table is predicted with
(:func:`calibrate.published.mcore_scenario`), and the interleaved schedule with each
``v`` that divides the 16 layers of a stage.

First table, per point: the predicted MFU, its error, and the predicted pipeline-bubble
share; then the curve's shape, each point's MFU over the first one's, predicted against
published (the worst of the two ratios' errors).

Second table, per point: the compute-only MFU the published run implies under that
schedule, the published MFU with the predicted step's non-compute share taken out
(published MFU x predicted step / predicted compute). Every point runs the same
micro-batches through the same layers, so under the schedule the runs used this figure is
the same at every point; the simulator's own compute-only MFU is printed beside it.

At 96 GPUs (DP 2, 576 micro-batches per replica) the bubble is ~1% whatever the schedule,
so that end measures the compute model alone; at 4608 (DP 96, 12 micro-batches) the
schedule decides the bubble. Nothing here is fitted.

``--tp-overlap-hidden F`` (0-1) sets the share of TP communication the framework hides
(Megatron-Core's preset: userbuffers' structural 7/8) and ``--tp-overlap-slowdown F`` the
GEMM slowdown under the overlap (the preset's 0.059; 0 when nothing is hidden, as nothing
then runs beside the GEMMs): how much of the gap a weaker overlap than the preset's could
explain. With the overlap on, Megatron's asynchronous TP backward is off (the overlap
replaces it), so ``--tp-overlap-hidden 0`` exposes every TP collective: a bound.

Run: ``python benchmarks/validate_strong_scaling.py [--tp-overlap-hidden F]
[--tp-overlap-slowdown F]`` (reads ../shared/data, or ``$CLUSTERSIM_DATA``).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import replace

from calibrate.fit_training import DATA
from calibrate.published import (
    StrongScalingPoint,
    implied_compute_only_mfu,
    strong_scaling_curve,
    strong_scaling_scenario,
)
from sim.result import StepResult
from sim.scenario.sections import Scenario
from sim.training.step import simulate_step

TABLE = DATA / "megatron-core-h100-weak-scaling.csv"


def shape_error(results: list[StepResult], points: list[StrongScalingPoint]) -> float:
    """Worst error of each later point's MFU over the first's, predicted against
    published (fraction)."""
    first, pub = results[0].mfu, points[0].mfu
    return max(abs((r.mfu / first) / (p.mfu / pub) - 1) for r, p in zip(results[1:], points[1:],
                                                                        strict=True))  # fmt: skip


def _overlap(sc: Scenario, hidden: float | None, slowdown: float | None) -> Scenario:
    """``sc`` with its framework's TP overlap share and GEMM slowdown set where given (the
    slowdown 0 when ``hidden`` is 0 and no slowdown is given)."""
    if hidden is None and slowdown is None:
        return sc
    fw = sc.framework
    assert fw is not None, "the Megatron-Core scenarios name their framework"
    if slowdown is None:
        slowdown = 0.0 if hidden == 0 else fw.tp_overlap_slowdown
    fw = replace(fw, tp_overlap_hidden=fw.tp_overlap_hidden if hidden is None else hidden,
                 tp_overlap_slowdown=slowdown)  # fmt: skip
    return replace(sc, framework=fw)


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a fraction from 0 to 1, got {text!r}")
    return value


def main() -> None:
    """Print both tables (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tp-overlap-hidden", type=_fraction, help="share of TP communication hidden")
    ap.add_argument("--tp-overlap-slowdown", type=_fraction, help="GEMM slowdown under TP overlap")
    args = ap.parse_args()
    row, points = strong_scaling_curve(TABLE)
    per_stage = row.layers // row.pp
    schedules = [1] + [v for v in range(2, per_stage + 1) if per_stage % v == 0]
    batch = row.batch
    mp = row.tp * row.pp
    print(f"GPT-3 {row.name} (TP {row.tp}, PP {row.pp}), batch {batch} sequences: "
          + ", ".join(f"{p.gpus} GPUs (DP {p.gpus // mp}, {p.source}) {p.mfu:.1%}"
                      for p in points))  # fmt: skip
    knobs = (args.tp_overlap_hidden, args.tp_overlap_slowdown)
    runs = {v: [simulate_step(_overlap(strong_scaling_scenario(row, p.gpus, batch, v), *knobs),
                              "analytical") for p in points] for v in schedules}  # fmt: skip
    head = " | ".join(f"{p.gpus:>5}: {'pred':>6} {'error':>7} {'bubble':>6}" for p in points)
    print(f"{'schedule':<16} | {head} | shape error")
    for v, results in runs.items():
        cells = " | ".join(f"{'':>6} {r.mfu:>6.1%} {r.mfu / p.mfu - 1:>+7.1%} "
                           f"{r.breakdown['pipeline_bubble'] / r.step_time_s:>6.1%}"
                           for r, p in zip(results, points, strict=True))  # fmt: skip
        name = "1f1b" if v == 1 else f"interleaved v={v}"
        print(f"{name:<16} | {cells} | {shape_error(results, points):>11.1%}")
    print()
    print("compute-only MFU implied by the published points (simulator's own beside)")
    print(f"{'schedule':<16} | " + " | ".join(f"{p.gpus:>5} GPUs" for p in points)
          + " | simulator")  # fmt: skip
    for v, results in runs.items():
        implied = [implied_compute_only_mfu(p.mfu, r)
                   for r, p in zip(results, points, strict=True)]  # fmt: skip
        name = "1f1b" if v == 1 else f"interleaved v={v}"
        print(f"{name:<16} | " + " | ".join(f"{x:>10.1%}" for x in implied)
              + f" | {implied_compute_only_mfu(results[0].mfu, results[0]):>9.1%}")  # fmt: skip


if __name__ == "__main__":
    main()
