"""Gradient buckets: what a stage's data-parallel synchronisation issues, and when.

A bucket is one or two collectives (a reduce-scatter in the shard group, then an
all-reduce across replica groups for hybrid sharding; or what a data-parallel technique
makes of them, :mod:`sim.training.graph.techniques`) released while a backward pass runs:
in the last micro-batch's backward of each chunk (ZeRO-0/1) or in every micro-batch's
backward (ZeRO-2/3), after the unit that completes it. DDP's buckets
(``parallel.bucket_bytes``) are merged up to :data:`SIM_BUCKETS` per model chunk.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.training.graph.techniques import technique_steps
from sim.training.setup import StepSetup
from sim.workload.comms import StepComm, dp_buckets, step_comm
from sim.workload.lora import adapt_comm
from sim.workload.techniques import techniques_of
from sim.workload.zero import zero_semantics

__all__ = [
    "SIM_BUCKETS",
    "Bucket",
    "bucket_release_units",
    "buckets_of",
    "reduces_after",
    "stage_comm",
]

# Gradient buckets simulated per model chunk at most: DDP's buckets (parallel.bucket_bytes)
# are merged up to this count. Overlap granularity is coarsened; total bytes are exact.
SIM_BUCKETS = 4


@dataclass(frozen=True)
class Bucket:
    """One gradient bucket: its collectives in order, ``(group kind, op, bytes)``.

    Group kinds: ``dp``, ``edp`` (expert parameters), ``shard`` and ``replica``
    (hybrid sharding). ``local_s``: seconds the data-parallel stream spends on the bucket
    before its collectives (compression kernels, a parameter server's push and pull:
    :mod:`sim.training.graph.techniques`; 0 for plain reductions).
    """

    steps: tuple[tuple[str, str, float], ...]
    local_s: float = 0.0

    @property
    def label(self) -> str:
        """Name of the bucket's work in timelines: ``dp_<first op>`` (``dp_ps`` without one)."""
        return f"dp_{self.steps[0][1]}" if self.steps else "dp_ps"


def stage_comm(setup: StepSetup, s: int) -> StepComm:
    """Communication volumes of stage ``s`` (bytes)."""
    sc, plan = setup.scenario, setup.plan
    c = step_comm(sc.model, plan, sc.training.seq_len, s)
    return adapt_comm(c, sc.model, plan, s, sc.training.techniques)


def _reduce_steps(
    setup: StepSetup, nbytes: float, expert: bool
) -> tuple[tuple[str, str, float], ...]:
    plan = setup.plan
    sem = zero_semantics(plan)
    if expert:
        return (("edp", sem.reduce_op, nbytes),)
    if not sem.hybrid:
        return (("dp", sem.reduce_op, nbytes),)
    return (("shard", sem.reduce_op, nbytes), ("replica", "all_reduce", nbytes / plan.shard))


def buckets_of(setup: StepSetup, s: int) -> list[Bucket]:
    """Gradient buckets of one model chunk of stage ``s`` for one reduction, merged to at
    most SIM_BUCKETS."""
    plan, c = setup.plan, stage_comm(setup, s)
    changed = techniques_of(setup.scenario.parallel).active
    out: list[Bucket] = []
    for nbytes, expert in ((c.dp_grad_bytes, False), (c.edp_grad_bytes, True)):
        if nbytes <= 0:
            continue
        per_chunk = nbytes / plan.virtual_stages
        size = max(plan.bucket_bytes, per_chunk / SIM_BUCKETS)
        for b in dp_buckets(per_chunk, size):
            steps = _reduce_steps(setup, b, expert)
            out.append(
                Bucket(*technique_steps(setup, s, b, expert, steps)) if changed else Bucket(steps)
            )
    return out


def reduces_after(setup: StepSetup, kind: str, mb: int, last_mb: int) -> bool:
    """Whether a pass releases gradient buckets: backward of every micro-batch under
    ZeRO-2/3, of the chunk's last micro-batch otherwise."""
    if kind != "B" or setup.plan.dp_cp == 1:
        return False
    return zero_semantics(setup.plan).reduce_every_microbatch or mb == last_mb


def bucket_release_units(units: int, buckets: int) -> list[int]:
    """Index of the unit after which each of ``buckets`` buckets is released.

    >>> bucket_release_units(8, 4), bucket_release_units(1, 3)
    ([1, 3, 5, 7], [0, 0, 0])
    """
    return [max(0, -(-(i + 1) * units // buckets) - 1) for i in range(buckets)]
