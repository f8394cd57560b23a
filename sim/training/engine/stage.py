"""Pieces shared by the SimPy engine and the analytical timeline of a training step.

Data-parallel work is explicit collective tasks the engines issue:

- **gradient buckets** (:class:`Bucket`): one or two collectives (a reduce-scatter in the
  shard group, then an all-reduce across replica groups for hybrid sharding) released
  while a backward pass runs: in the last micro-batch's backward of each chunk (ZeRO-0/1)
  or in every micro-batch's backward (ZeRO-2/3);
- **parameter gathers** of ZeRO-3/FSDP: one all-gather per unit (layer) before it runs,
  prefetched: unit ``j + 1``'s gather starts when unit ``j``'s has finished and unit
  ``j - 1`` has run (FSDP's ``limit_all_gathers``: at most two gathered units);
- after the optimizer, ZeRO-1/2's all-gather of the updated parameters and the tied
  embedding's gradient all-reduce.
"""

from __future__ import annotations

from collections.abc import MutableSequence, Sequence
from dataclasses import dataclass, field, replace

from sim.training.compute.passes import (
    CollectiveTimer,
    OpsCost,
    PassCost,
    Unit,
    pass_cost,
    unit_cost,
)
from sim.training.engine.optimizer import optimizer_bytes_per_param, optimizer_s
from sim.training.engine.setup import StepSetup
from sim.training.engine.techniques import technique_steps
from sim.training.workload.comms import StepComm, dp_buckets, end_params, step_comm
from sim.training.workload.lora import adapt_comm, frozen_end_ops, lora_layer_ops
from sim.training.workload.ops import Op, context_for, embedding_ops, head_ops, layer_ops
from sim.training.workload.primitives import OpContext
from sim.training.workload.stages import chunk_layers
from sim.training.workload.techniques import techniques_of
from sim.training.workload.zero import PARAM_BYTES, zero_semantics

__all__ = [
    "SIM_BUCKETS",
    "Bucket",
    "PassRecord",
    "StageTimeline",
    "bucket_release_units",
    "bucket_s",
    "buckets_of",
    "chunk_costs",
    "gathered_pass",
    "op_context",
    "optimizer_bytes_per_param",
    "optimizer_s",
    "tail_gathers_s",
    "unit_gather_s",
    "with_interference",
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
    :mod:`sim.training.engine.techniques`; 0 for plain reductions).
    """

    steps: tuple[tuple[str, str, float], ...]
    local_s: float = 0.0

    @property
    def label(self) -> str:
        """Name of the bucket's work in timelines: ``dp_<first op>`` (``dp_ps`` without one)."""
        return f"dp_{self.steps[0][1]}" if self.steps else "dp_ps"


@dataclass
class PassRecord:
    """One executed pass (for traces)."""

    stage: int
    kind: str
    mb: int
    chunk: int
    start_s: float
    end_s: float


@dataclass
class StageTimeline:
    """What one pipeline stage did during the step (seconds)."""

    compute_s: float = 0.0
    tp_exposed_s: float = 0.0
    ep_s: float = 0.0
    cp_exposed_s: float = 0.0
    zero3_exposed_s: float = 0.0
    compute_end_s: float = 0.0
    dp_end_s: float = 0.0
    end_s: float = 0.0
    optimizer_s: float = 0.0
    param_gather_s: float = 0.0
    passes: list[PassRecord] = field(default_factory=list)
    comm: list[tuple[str, float, float]] = field(default_factory=list)  # (name, start, end)

    def add_pass(self, cost: PassCost, rec: PassRecord) -> None:
        """Account one pass that ran from ``rec.start_s`` to ``rec.end_s``."""
        self.compute_s += cost.compute_s
        self.tp_exposed_s += cost.tp_exposed_s
        self.ep_s += cost.ep_s
        self.cp_exposed_s += cost.cp_exposed_s
        waited = rec.end_s - rec.start_s - cost.busy_s
        if waited > 1e-9 * max(cost.busy_s, 1e-12):  # not rounding: gathers left exposed
            self.zero3_exposed_s += waited
        self.passes.append(rec)


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


def gathered_pass(
    start_s: float,
    units: Sequence[Unit],
    gather_s: Sequence[float],
    windows: MutableSequence[tuple[float, float]] | None = None,
) -> tuple[float, list[float]]:
    """End time of a pass whose units wait for their parameter gathers, and each unit's end.

    Unit ``j``'s gather (``gather_s[j]`` seconds) starts when gather ``j - 1`` has ended
    and unit ``j - 2`` has run (at most two gathered units, FSDP's ``limit_all_gathers``);
    unit ``j`` runs when its gather has ended and unit ``j - 1`` has run. ``windows``, when
    given, receives the (start, end) of each gather (traces, the NIC stream of ZeRO-3).

    >>> from sim.training.compute.passes import Unit
    >>> gathered_pass(0.0, [Unit(1.0)] * 3, [0.5] * 3)  # gathers hidden after the first
    (3.5, [1.5, 2.5, 3.5])
    >>> gathered_pass(0.0, [Unit(1.0)] * 3, [2.0] * 3)[0]  # gather-bound
    7.0
    >>> w: list[tuple[float, float]] = []
    >>> _ = gathered_pass(0.0, [Unit(1.0)] * 3, [0.5] * 3, w)
    >>> w
    [(0.0, 0.5), (0.5, 1.0), (1.5, 2.0)]
    """
    ends: list[float] = []
    gathered = start_s
    for j, unit in enumerate(units):
        begin = max(gathered, ends[j - 2] if j >= 2 else start_s)
        gathered = begin + gather_s[j]
        if windows is not None:
            windows.append((begin, gathered))
        ends.append(max(ends[-1] if ends else start_s, gathered) + unit.busy_s)
    return (ends[-1] if ends else start_s), ends


def _groups(setup: StepSetup, s: int, kind: str, all_stages: bool) -> tuple[tuple[str, ...], ...]:
    """The ``kind`` groups of every TP rank of stage ``s``, or of every stage."""
    if not all_stages:
        return setup.stages[s].group(kind)
    return tuple(g for st in setup.stages for g in st.group(kind))


def unit_gather_s(setup: StepSetup, timer: CollectiveTimer, s: int, unit: Unit,
                  all_stages: bool = False) -> float:  # fmt: skip
    """Seconds of a unit's parameter all-gathers, every TP rank's group at once
    (:meth:`CollectiveTimer.concurrent_time_s`); ``all_stages``: every pipeline stage
    gathering a unit of this size at the same time too (ZeRO-3 in steady state)."""
    return timer.concurrent_time_s(
        _groups(setup, s, "shard", all_stages), "all_gather", unit.gather_bytes
    ) + timer.concurrent_time_s(
        _groups(setup, s, "edp", all_stages), "all_gather", unit.expert_gather_bytes
    )


def bucket_s(setup: StepSetup, timer: CollectiveTimer, s: int, bucket: Bucket,
             all_stages: bool = False) -> float:  # fmt: skip
    """Seconds of a gradient bucket's collectives, every TP rank's group at once (and
    every stage's, with ``all_stages``)."""
    return bucket.local_s + sum(
        timer.concurrent_time_s(_groups(setup, s, kind, all_stages), op, nbytes)
        for kind, op, nbytes in bucket.steps
    )


def with_interference(cost: PassCost, gathers_s: Sequence[float], reduce_s: float,
                      kappa: float) -> PassCost:  # fmt: skip
    """``cost`` with its compute slowed by the data-parallel collectives running beside it.

    Unit ``j`` overlaps the gather of unit ``j + 1``; a backward that reduces its
    gradients every micro-batch overlaps ``reduce_s`` seconds of reductions, spread over
    its units by their length. Each overlapped second costs ``kappa`` seconds of compute
    (``comm_interference``).

    >>> from sim.training.compute.passes import PassCost, Unit
    >>> c = PassCost(2.0, 0.0, 0.0, 0.0, 0.0, {}, (Unit(1.0, 1.0), Unit(1.0, 1.0)))
    >>> with_interference(c, [0.5, 0.5], 0.0, 0.2).busy_s
    2.1
    """
    units = cost.units
    if kappa <= 0 or not units:
        return cost
    extra = [0.0] * len(units)
    for j in range(len(units) - 1):
        extra[j] += kappa * min(units[j].busy_s, gathers_s[j + 1])
    total = sum(u.busy_s for u in units)
    if reduce_s > 0 and total > 0:
        for j, u in enumerate(units):
            extra[j] += kappa * min(reduce_s, total) * u.busy_s / total
    new_units = tuple(
        Unit(u.busy_s + x, u.gather_bytes, u.expert_gather_bytes)
        for u, x in zip(units, extra, strict=True)
    )
    return replace(cost, compute_s=cost.compute_s + sum(extra), units=new_units)


def tail_gathers_s(setup: StepSetup, timer: CollectiveTimer, s: int) -> float:
    """After the optimizer: ZeRO-1/2 parameter all-gathers (every TP rank's group at once)
    and the tied-embedding sync."""
    c, stage = stage_comm(setup, s), setup.stages[s]
    t = timer.concurrent_time_s(stage.shard, "all_gather", c.dp_param_gather_bytes)
    t += timer.concurrent_time_s(stage.edp, "all_gather", c.edp_param_gather_bytes)
    if c.tied_embedding_bytes > 0:
        pair = (setup.stages[0].gpus[0], setup.stages[-1].gpus[0])
        t += timer.time_s(pair, "all_reduce", c.tied_embedding_bytes)
    return t


#: PyTorch FSDP writes each unit's gradients into its flat gradient: a zero-filled buffer
#: (2 bytes per parameter) and a copy of every gradient into it (read 2, write 2).
FSDP_FLAT_GRAD_BYTES = 6


def op_context(setup: StepSetup) -> OpContext:
    """The op-building context of the scenario (model, plan, precision, kernels)."""
    sc, plan = setup.scenario, setup.plan
    sem = zero_semantics(plan)
    # gradients cast to an fp32 reduction dtype per layer backward (FSDP / ZeRO-2+)
    cast = 2 + plan.grad_bytes if sem.reduce_every_microbatch and plan.grad_bytes > 2 else 0
    if plan.fsdp is not None and plan.zero >= 2 and plan.dp_cp > 1:
        cast += FSDP_FLAT_GRAD_BYTES
    return context_for(sc.model, plan, sc.training.seq_len, sc.training.precision,
                       sc.training.flash_attention, cast, sc.training.cross_entropy,
                       sc.training.fused_kernels, sc.training.attention_kernel)  # fmt: skip


def _unit_costs(
    setup: StepSetup, timer: CollectiveTimer, s: int, cache: dict[Op, float]
) -> dict[str, tuple[OpsCost, OpsCost]]:
    """(forward, backward) cost of one embedding, layer and head unit of stage ``s``."""
    ctx, st, tech = op_context(setup), setup.stages[s], setup.scenario.training.techniques
    grp = {"tp": st.tp, "ep": st.ep}
    out = {}
    for name, ops in (
        ("emb", frozen_end_ops(embedding_ops(ctx), tech)),
        ("layer", lora_layer_ops(layer_ops(ctx), ctx, tech)),
        ("head", frozen_end_ops(head_ops(ctx), tech)),
    ):
        out[name] = tuple(
            unit_cost(
                part,
                setup.compute_at(s),
                timer.topology,
                timer,
                grp,
                cache,
                st.cp_ring,
                setup.gpu_at(s),
            )
            for part in (ops.fwd, ops.bwd)
        )
    return out  # type: ignore[return-value]


def chunk_costs(setup: StepSetup, timer: CollectiveTimer) -> dict[tuple[int, str], PassCost]:
    """PassCost of F and B for every virtual stage (costed once per distinct chunk shape)."""
    plan = setup.plan
    nvs = plan.pp * plan.virtual_stages
    layers = chunk_layers(plan, setup.scenario.model)
    sem = zero_semantics(plan)
    caches: dict[str, dict[Op, float]] = {}  # per GPU model: op times differ between them
    units: dict[int, dict[str, tuple[OpsCost, OpsCost]]] = {}
    shapes: dict[tuple[bool, bool, int, int], tuple[PassCost, PassCost]] = {}
    out: dict[tuple[int, str], PassCost] = {}
    for vs in range(nvs):
        s = vs % plan.pp
        key = (vs == 0, vs == nvs - 1, s, layers[vs])
        if key not in shapes:
            if s not in units:
                cache = caches.setdefault(setup.gpu_at(s).name, {})
                units[s] = _unit_costs(setup, timer, s, cache)
            f, b = _chunk_passes(setup, units[s], key, sem.gather_forward, sem.gather_backward)
            shapes[key] = _interfered(setup, timer, s, f, b)
        out[(vs, "F")], out[(vs, "B")] = shapes[key]
    return out


def _interfered(
    setup: StepSetup, timer: CollectiveTimer, s: int, fwd: PassCost, bwd: PassCost
) -> tuple[PassCost, PassCost]:
    """Both passes slowed by the gathers and per-micro-batch reductions beside them."""
    kappa = setup.compute_at(s).comm_interference
    if kappa <= 0 or setup.plan.dp_cp == 1:
        return fwd, bwd
    reduce = 0.0
    if zero_semantics(setup.plan).reduce_every_microbatch:
        reduce = sum(bucket_s(setup, timer, s, b) for b in buckets_of(setup, s))
    out = []
    for cost, red in ((fwd, 0.0), (bwd, reduce)):
        gathers = [unit_gather_s(setup, timer, s, u) for u in cost.units] if cost.gathers else []
        out.append(with_interference(cost, gathers or [0.0] * len(cost.units), red, kappa))
    return out[0], out[1]


def _chunk_passes(
    setup: StepSetup,
    u: dict[str, tuple[OpsCost, OpsCost]],
    key: tuple[bool, bool, int, int],
    gather_f: bool,
    gather_b: bool,
) -> tuple[PassCost, PassCost]:
    first, last, s, n = key
    plan, c = setup.plan, stage_comm(setup, s)
    ends = end_params(setup.scenario.model, plan, s) * PARAM_BYTES if c.layer_gather_bytes else 0.0
    emb_bytes = ends if first else 0.0  # the root unit: embedding and head together
    head_bytes = ends if last and not first else 0.0
    layer = Unit(0.0, c.layer_gather_bytes, c.layer_expert_gather_bytes)
    fwd_parts: list[tuple[OpsCost, int, Unit]] = []
    bwd_parts: list[tuple[OpsCost, int, Unit]] = []
    for idx, gather in ((0, gather_f), (1, gather_b)):
        parts = []
        root = gather and idx == 0  # FSDP keeps the root unit gathered through backward
        if first:
            parts.append((u["emb"][idx], 1, Unit(0.0, emb_bytes if root else 0.0)))
        parts.append((u["layer"][idx], n, layer if gather else Unit(0.0)))
        if last:
            parts.append((u["head"][idx], 1, Unit(0.0, head_bytes if root else 0.0)))
        (fwd_parts if idx == 0 else bwd_parts).extend(parts)
    bwd_parts.reverse()
    return pass_cost(fwd_parts, plan.overlap_tp), pass_cost(bwd_parts, plan.overlap_tp)
