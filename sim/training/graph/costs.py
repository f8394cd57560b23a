"""The cost inputs of a step's compute tasks: every pass (forward or backward of one model
chunk for one micro-batch) as its units' seconds, FLOPs and parameter-gather bytes.

A pass is made of units (the embedding, each layer, the head: FSDP's wrapping units), so
that the graph can gather each unit's parameters just before it runs (ZeRO-3/FSDP: the
root unit, embedding and head, stays gathered through the backward) and release gradient
buckets as the backward produces them. Compute beside data-parallel collectives is slowed
by ``comm_interference`` per second of overlap (:func:`with_interference`), the collectives
timed in closed form on the stage's groups.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from sim.kept import Kept
from sim.training.compute.passes import (
    CollectiveTimer,
    OpsCost,
    PassCost,
    TPOverlap,
    Unit,
    pass_cost,
    unit_cost,
)
from sim.training.graph.buckets import Bucket, buckets_of, stage_comm
from sim.training.setup import StepSetup
from sim.workload.comms import end_params, layer_rank_params
from sim.workload.lora import frozen_end_ops, lora_layer_ops
from sim.workload.ops import Op, context_for, embedding_ops, head_ops, layer_ops
from sim.workload.primitives import OpContext
from sim.workload.stages import chunk_layers
from sim.workload.zero import PARAM_BYTES, gathers_once, zero_semantics

UnitCosts = dict[str, tuple[OpsCost, OpsCost]]

__all__ = [
    "FSDP_FLAT_GRAD_BYTES",
    "bucket_s",
    "chunk_costs",
    "layer_tensor_shares",
    "op_context",
    "param_units",
    "tp_overlap",
    "unit_gather_s",
    "with_interference",
]


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


#: PyTorch FSDP writes each unit's gradients into its flat gradient: a zero-filled buffer
#: (2 bytes per parameter) and a copy of every gradient into it (read 2, write 2).
FSDP_FLAT_GRAD_BYTES = 6


def grad_accum_bytes(setup: StepSetup) -> float:
    """HBM bytes per parameter, averaged over the step's micro-batches, of the separate
    pass that adds each micro-batch's fresh weight gradients into the gradient buffer.

    Without ``training.grad_accum_fusion`` a weight-gradient GEMM writes a new gradient
    tensor and the framework adds it into the buffer it accumulates in: PyTorch autograd's
    ``AccumulateGrad`` (``grad += new``: DDP under ``no_sync``, DeepSpeed ZeRO-1,
    Megatron-LM's ``--DDP-impl torch``) or Megatron-LM's local DDP hook
    (``param.main_grad.add_(param.grad.data)``, megatron/model/distributed.py,
    NVIDIA/Megatron-LM@aed2f75e, 2021). The first micro-batch's gradient becomes the
    buffer, so the pass runs for ``m - 1`` of ``m`` micro-batches, reading the new
    gradient (the parameters' dtype) and reading and writing the buffer
    (``plan.grad_bytes``). It applies where gradients are kept whole across micro-batches
    (ZeRO 0 and 1; FSDP2 gathering once under pipeline parallelism); a sharded
    accumulation (ZeRO-2/3, FSDP: 1/d of the parameters after each reduce-scatter) and the
    embedding's and head's gradients are not counted. With the fusion (Megatron-LM's
    ``--gradient-accumulation-fusion``, on by default, and Transformer Engine's
    ``fuse_wgrad_accumulation``) the GEMM accumulates into the buffer itself: 0.

    >>> from sim.scenario.load import load_scenario
    >>> from sim.training.setup import prepare_step
    >>> grad_accum_bytes(prepare_step(load_scenario("gpt2-1gpu")))  # DDP: fp32, 8 micro-batches
    10.5
    """
    sc, plan = setup.scenario, setup.plan
    m, fw = plan.num_microbatches, sc.framework
    if sc.training.grad_accum_fusion or m < 2:
        return 0.0
    if zero_semantics(plan).reduce_every_microbatch and not gathers_once(plan, fw):
        return 0.0  # accumulated in the shard after each reduce-scatter: not counted
    fresh = 4 if fw is not None and fw.model_params == "fp32" else 2
    return (fresh + 2 * plan.grad_bytes) * (m - 1) / m


def op_context(setup: StepSetup) -> OpContext:
    """The op-building context of the scenario (model, plan, precision, kernels)."""
    sc, plan = setup.scenario, setup.plan
    sem = zero_semantics(plan)
    # gradients cast to an fp32 reduction dtype per layer backward (FSDP / ZeRO-2+)
    cast = 2 + plan.grad_bytes if sem.reduce_every_microbatch and plan.grad_bytes > 2 else 0
    if plan.fsdp is not None and plan.zero >= 2 and plan.dp_cp > 1:
        cast += FSDP_FLAT_GRAD_BYTES
    fw = sc.framework  # a framework that keeps the gathered input does not re-gather it
    # Megatron's async column-parallel backward, where nothing else overlaps TP traffic
    async_bwd = fw is not None and fw.tp_async_backward and not plan.overlap_tp
    return context_for(sc.model, plan, sc.training.seq_len, sc.training.precision,
                       sc.training.flash_attention, cast, sc.training.cross_entropy,
                       sc.training.fused_kernels, sc.training.attention_kernel,
                       grad_accum_bytes(setup),
                       fw is None or not fw.tp_saves_gathered_input, async_bwd,
                       fw.selective_recompute if fw is not None else "attention",
                       fw is not None and fw.recompute_early_stop)  # fmt: skip


#: (forward, backward) costs of a stage's units, kept across steps: key -> (the compute
#: parameters, GPU and timer they were costed with, held so their ids stay theirs; costs;
#: the op-time memo as costing the stage left it).
_UNITS: Kept[tuple[UnitCosts, dict[Op, float]]] = Kept(limit=256)


def _unit_costs(
    setup: StepSetup, timer: CollectiveTimer, s: int, cache: dict[Op, float]
) -> UnitCosts:
    """(forward, backward) cost of one embedding, layer and head unit of stage ``s``, kept
    across steps: a sweep or a plan search that changes only the batch, the schedule or the
    data-parallel settings costs them once.

    The key holds everything :func:`_costed_units` reads: op context, techniques, compute
    parameters, GPU, collective timer, and the TP/EP groups, CP ring and GPU model of stages
    ``0..s``, because ``cache`` (the op-time memo of one step, filled in stage order) hands
    stage ``s`` the times the earlier stages measured. A kept entry restores the memo as
    costing the stage left it, so a step costs the same whatever ran before it."""
    ctx, tech = op_context(setup), setup.scenario.training.techniques
    compute, gpu = setup.compute_at(s), setup.gpu_at(s)
    stages = tuple(
        (st.tp, st.ep, st.cp_ring, setup.gpu_at(i).name)
        for i, st in enumerate(setup.stages[: s + 1])
    )

    def make() -> tuple[UnitCosts, dict[Op, float]]:
        return _costed_units(setup, timer, s, cache, ctx), dict(cache)

    units, memo = _UNITS.get((ctx, tech, stages), (compute, gpu, timer), make)
    cache.update(memo)  # kept: the memo as costing the stage left it (just made: the same)
    return units


def _costed_units(
    setup: StepSetup, timer: CollectiveTimer, s: int, cache: dict[Op, float], ctx: OpContext
) -> UnitCosts:
    """The work of :func:`_unit_costs` (``ctx``: :func:`op_context` of ``setup``)."""
    st, tech = setup.stages[s], setup.scenario.training.techniques
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
    units: dict[int, UnitCosts] = {}
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


def layer_tensor_shares(
    setup: StepSetup, timer: CollectiveTimer, s: int = 0
) -> tuple[float, float]:
    """(GEMMs', fused attention's) shares of one layer's kernel time, forward and
    backward, on stage ``s`` (no units; 0 for a layer without kernels)."""
    f, b = _unit_costs(setup, timer, s, {})["layer"]
    total = f.compute_s + b.compute_s
    if total <= 0:
        return 0.0, 0.0
    return (f.gemm_s + b.gemm_s) / total, (f.attn_s + b.attn_s) / total


def param_units(setup: StepSetup, vs: int) -> list[tuple[float, float]]:
    """(dense, expert) parameter bytes of each unit of virtual stage ``vs`` in pass order
    (the embedding and head with the first and last chunk), at all-gather size: what a
    distributed optimizer gathers before the unit's first forward of a step."""
    plan, model = setup.plan, setup.scenario.model
    nvs = plan.pp * plan.virtual_stages
    s, n = vs % plan.pp, chunk_layers(plan, model)[vs]
    layer = layer_rank_params(model, plan)
    ends = end_params(model, plan, s) * PARAM_BYTES
    out = [(ends, 0.0)] if vs == 0 else []
    out += [(layer.dense * PARAM_BYTES, layer.expert * PARAM_BYTES)] * n
    if vs == nvs - 1:
        out.append((ends if vs != 0 else 0.0, 0.0))
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
    u: UnitCosts,
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
    overlap = tp_overlap(setup)
    return pass_cost(fwd_parts, overlap), pass_cost(bwd_parts, overlap)


def tp_overlap(setup: StepSetup) -> TPOverlap | None:
    """How the step's TP communication overlaps its GEMMs: not at all without
    ``parallel.overlap_tp``; else with the framework's measured hidden fraction and GEMM
    slowdown (:mod:`sim.workload.frameworks`), or Transformer Engine's (the defaults of
    :class:`TPOverlap`) when the scenario names no framework."""
    if not setup.plan.overlap_tp:
        return None
    sem = setup.scenario.framework
    if sem is None:
        return TPOverlap()
    return TPOverlap(sem.tp_overlap_hidden, sem.tp_overlap_slowdown)
