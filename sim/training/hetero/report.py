"""What a heterogeneous step reports per GPU model: count, compute, and waiting time.

For each GPU model: how many GPUs of it the cluster has, the micro-batches its replicas
run, its compute seconds per micro-batch (the forward and backward of the stage it holds,
at its own speed), its compute seconds per step (micro-batches x that, the largest over
the stages it holds) and its *idle* seconds: how long it waits per step for the slowest
model's compute (the bottleneck's compute per step minus its own). Communication,
bubbles and the optimizer are the same wait for every GPU and are not counted here.

A GPU in a TP group with a slower model runs at that model's speed in the step; its own
compute is reported as the stage's compute scaled by the two models' per-layer times
(:func:`sim.training.hetero.replicas.layer_compute_s`), an approximation. The members of
a replica class are taken to hold the GPU models of its first replica.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from sim.training.compute.passes import PassCost
from sim.training.hetero.replicas import MixedStep

__all__ = ["gpu_type_report", "mixed_notes"]


def _stage_mb_s(costs: Mapping[tuple[int, str], PassCost], pp: int, v: int, s: int) -> float:
    """Compute seconds of one micro-batch's forward and backward on stage ``s``."""
    return sum(costs[(c * pp + s, k)].compute_s for c in range(v) for k in "FB")


def gpu_type_report(mixed: MixedStep) -> dict[str, dict[str, Any]]:
    """Per GPU model (sorted by name): ``count``, ``microbatches`` (per replica, the
    distinct values), ``compute_per_microbatch_s``, ``compute_per_step_s``, ``idle_s``
    and ``bottleneck`` (True for the model whose compute sets the pace), in seconds.
    """
    topo = mixed.critical.setup.topology
    counts = Counter(topo.gpu_of(g).name for g in topo.gpus)
    per_mb: dict[str, float] = {}
    per_step: dict[str, float] = {}
    mbs: dict[str, set[int]] = {}
    for cls in mixed.classes:
        st, plan = cls.setup, cls.setup.plan
        for s in range(plan.pp):
            stage_s = _stage_mb_s(cls.run.costs, plan.pp, plan.virtual_stages, s)
            slow = mixed.layer_s[st.gpu_at(s).name]
            for name in sorted({topo.gpu_of(g).name for g in st.stages[s].gpus}):
                own = stage_s * mixed.layer_s[name] / slow
                per_mb[name] = max(per_mb.get(name, 0.0), own)
                per_step[name] = max(per_step.get(name, 0.0), cls.microbatches * own)
                mbs.setdefault(name, set()).add(cls.microbatches)
    pace = max(sorted(per_step), key=lambda n: per_step[n])
    return {
        name: {
            "count": counts[name],
            "microbatches": sorted(mbs[name]),
            "compute_per_microbatch_s": float(per_mb[name]),
            "compute_per_step_s": float(per_step[name]),
            "idle_s": float(per_step[pace] - per_step[name]),
            "bottleneck": name == pace,
        }
        for name in sorted(per_step)
    }


def mixed_notes(mixed: MixedStep) -> list[str]:
    """Notes saying how the step was split and what was approximated."""
    crit = mixed.critical
    par = crit.setup.scenario.parallel
    per_replica = sorted((r, c.microbatches) for c in mixed.classes for r in c.replicas)
    notes = [
        f"heterogeneous step: {len(mixed.classes)} replica class(es) simulated, each at its "
        f"own GPUs' speed (TP groups at their slowest member); the step is the slowest's "
        f"(replica {crit.replicas[0]}, stages on "
        f"{', '.join(sorted({g.name for g in crit.setup.stage_gpus}))}); approximations in "
        "sim.training.hetero",
        f"parallel.batch_split {par.batch_split}: micro-batches per replica "
        + ", ".join(str(m) for _, m in per_replica)
        + (" (floor of the throughput share, remainder one each to the fastest)"
           if par.batch_split == "proportional" else ""),
    ]  # fmt: skip
    if par.stage_split == "speed" and crit.setup.plan.pp > 1:
        notes.append(
            "parallel.stage_split speed: layers per stage "
            + ", ".join(map(str, mixed.layers))
            + " (largest remainder of the speed share; embedding and head not counted)"
        )
    return notes
