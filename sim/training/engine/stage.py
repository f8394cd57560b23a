"""Pieces shared by the SimPy engine and the analytical timeline of a training step."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from sim.training.compute.passes import CollectiveTimer, PassCost, pass_cost
from sim.training.engine.setup import StepSetup
from sim.training.workload.comms import RankParams, StepComm, dp_buckets, step_comm
from sim.training.workload.ops import Op, OpContext, chunk_ops

__all__ = [
    "OPTIMIZER_BYTES_PER_PARAM",
    "SIM_BUCKETS",
    "Bucket",
    "PassRecord",
    "StageTimeline",
    "buckets_of",
    "chunk_costs",
    "optimizer_s",
    "tail_gathers_s",
]

# Gradient buckets simulated per model chunk at most: DDP's buckets (parallel.bucket_bytes)
# are merged up to this count. Overlap granularity is coarsened; total bytes are exact.
SIM_BUCKETS = 4
# Mixed-precision Adam step per parameter: read bf16 grad (2) and fp32 master, m, v (12),
# write fp32 master, m, v (12) and the bf16 weight (2).
OPTIMIZER_BYTES_PER_PARAM = 28

Bucket = tuple[str, float, bool]  # (collective op, bytes, expert parameters?)


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
    zero3_exposed_s: float = 0.0
    compute_end_s: float = 0.0
    dp_end_s: float = 0.0
    end_s: float = 0.0
    optimizer_s: float = 0.0
    param_gather_s: float = 0.0
    passes: list[PassRecord] = field(default_factory=list)
    comm: list[tuple[str, float, float]] = field(default_factory=list)  # (name, start, end)


def stage_comm(setup: StepSetup, s: int) -> StepComm:
    """Communication volumes of stage ``s`` (bytes)."""
    sc = setup.scenario
    return step_comm(sc.model, setup.plan, sc.training.seq_len, s)


def buckets_of(setup: StepSetup, s: int) -> list[Bucket]:
    """Gradient buckets of one model chunk of stage ``s``, merged to at most SIM_BUCKETS."""
    plan, c = setup.plan, stage_comm(setup, s)
    op = "all_reduce" if plan.zero == 0 else "reduce_scatter"
    out: list[Bucket] = []
    for nbytes, expert in ((c.dp_grad_bytes, False), (c.edp_grad_bytes, True)):
        if nbytes <= 0:
            continue
        per_chunk = nbytes / plan.virtual_stages
        size = max(plan.bucket_bytes, per_chunk / SIM_BUCKETS)
        out += [(op, b, expert) for b in dp_buckets(per_chunk, size)]
    return out


def optimizer_s(setup: StepSetup, timer: CollectiveTimer, rp: RankParams) -> float:
    """Adam step time of one rank: memory-bound over its (ZeRO-sharded) parameters."""
    plan = setup.plan
    shard = plan.dp if plan.zero >= 1 else 1
    nbytes = (rp.dense + rp.expert) / shard * OPTIMIZER_BYTES_PER_PARAM
    return nbytes / (timer.topology.gpu.hbm_Bps * setup.compute.mem_eff)


def tail_gathers_s(setup: StepSetup, timer: CollectiveTimer, s: int) -> float:
    """After the optimizer: ZeRO-1/2 parameter all-gathers and the tied-embedding sync."""
    c, stage = stage_comm(setup, s), setup.stages[s]
    t = timer.time_s(stage.dp[0], "all_gather", c.dp_param_gather_bytes)
    t += timer.time_s(stage.edp[0], "all_gather", c.edp_param_gather_bytes)
    if c.tied_embedding_bytes > 0:
        pair = (setup.stages[0].gpus[0], setup.stages[-1].gpus[0])
        t += timer.time_s(pair, "all_reduce", c.tied_embedding_bytes)
    return t


def chunk_costs(setup: StepSetup, timer: CollectiveTimer) -> dict[tuple[int, str], PassCost]:
    """PassCost of F and B for every virtual stage (costed once per distinct chunk shape)."""
    sc, plan = setup.scenario, setup.plan
    ctx = OpContext.from_plan(
        sc.model, plan, sc.training.seq_len, sc.training.precision, sc.training.flash_attention
    )
    nvs = plan.pp * plan.virtual_stages
    layers = sc.model.layers // nvs
    op_cache: dict[Op, float] = {}
    shapes: dict[tuple[bool, bool, int], tuple[PassCost, PassCost]] = {}
    out: dict[tuple[int, str], PassCost] = {}
    for vs in range(nvs):
        s = vs % plan.pp
        key = (vs == 0, vs == nvs - 1, s)
        if key not in shapes:
            ops = chunk_ops(ctx, layers, key[0], key[1])
            st = setup.stages[s]
            grp = {"tp": st.tp, "ep": st.ep}
            z3 = stage_comm(setup, s).zero3_layer_gather_bytes
            gather = layers * timer.time_s(st.dp[0], "all_gather", z3) if z3 > 0 else 0.0
            fwd = pass_cost(ops.fwd, setup.compute, timer.topology, timer, grp, op_cache)
            bwd = pass_cost(ops.bwd, setup.compute, timer.topology, timer, grp, op_cache)
            shapes[key] = (replace(fwd, prefetch_s=gather), replace(bwd, prefetch_s=gather))
        out[(vs, "F")], out[(vs, "B")] = shapes[key]
    return out
