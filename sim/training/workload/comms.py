"""Parameters held per rank and the communication volumes outside the layer ops.

The per-layer TP and EP collectives live in :mod:`.ops`'s op lists. This module gives
what happens between pipeline stages (activations and their gradients), across
data-parallel replicas (gradients, ZeRO parameter gathers) and between the two copies of
tied embeddings.

Gradients are reduced in bf16 (``GRAD_BYTES = 2``, PyTorch DDP/FSDP with a bf16
``reduce_dtype``); Megatron-LM's default ``accumulate_allreduce_grads_in_fp32`` doubles
the DP volume (pass ``grad_bytes=4``).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.training.workload.models import ModelSpec, attention_params, expert_params, norm_params
from sim.training.workload.ops import ACT_BYTES
from sim.training.workload.plan import ParallelPlan

__all__ = [
    "GRAD_BYTES",
    "PARAM_BYTES",
    "RankParams",
    "StepComm",
    "dp_buckets",
    "layer_rank_params",
    "rank_params",
    "step_comm",
]

PARAM_BYTES = 2  # bf16 weights
GRAD_BYTES = 2  # bf16 gradients


@dataclass(frozen=True)
class RankParams:
    """Parameters one rank holds before any ZeRO sharding.

    Attributes
    ----------
    dense : float
        Parameters replicated over the ``dp`` group (attention, norms, router, embeddings).
    expert : float
        Expert parameters, replicated over the ``edp`` (= dp / ep) group only.
    """

    dense: float
    expert: float

    @property
    def total(self) -> float:
        """``dense + expert``."""
        return self.dense + self.expert


def layer_rank_params(model: ModelSpec, plan: ParallelPlan) -> RankParams:
    """One layer's parameters on one rank: matmuls split by tp, experts by ep and tp.

    KV projections are replicated when ``tp > kv_heads``; norms and router are replicated.
    """
    m, t = model, plan.tp
    kv_rep = max(t // m.kv_heads, 1)  # each rank keeps at least one KV head
    attn = attention_params(m) / t + (kv_rep - 1) * 2 * m.hidden * m.kv_dim / t
    router = m.hidden * m.experts if m.moe else 0
    dense = attn + 2 * norm_params(m) + router
    experts = m.experts // plan.ep * expert_params(m) / t
    if not m.moe:
        return RankParams(dense + experts, 0.0)
    return RankParams(dense, experts)


def rank_params(model: ModelSpec, plan: ParallelPlan, stage: int) -> RankParams:
    """Parameters on a rank of pipeline ``stage`` (embedding on the first, head on the last).

    With tied embeddings and ``pp > 1`` the last stage keeps its own copy of the word
    embedding, as Megatron-LM does.

    >>> from sim.training.workload.models import model_preset, param_count
    >>> m = model_preset("llama2-7b")
    >>> rank_params(m, ParallelPlan(), 0).total == param_count(m)
    True
    """
    m, t = model, plan.tp
    layer = layer_rank_params(m, plan)
    n = m.layers // plan.pp
    dense, expert = n * layer.dense, n * layer.expert
    word = m.vocab * m.hidden / t
    if stage == 0:
        dense += word + (m.max_seq * m.hidden if m.position == "learned" else 0)
    if stage == plan.pp - 1:
        tied_here = m.tied_embeddings and plan.pp == 1
        dense += norm_params(m) + (0 if tied_here else word)
    return RankParams(dense, expert)


@dataclass(frozen=True)
class StepComm:
    """Communication of one rank outside the layer ops (sizes in bytes, nccl-tests style).

    Attributes
    ----------
    pp_send_bytes : float
        ``send_recv`` per micro-batch per chunk boundary, forward (activation) and again
        backward (its gradient): ``b s h`` bf16, ``/ tp`` with SP.
    dp_grad_op : str or None
        ``all_reduce`` (ZeRO 0), ``reduce_scatter`` (ZeRO 1-3), None when ``dp == 1``.
    dp_grad_bytes : float
        Dense gradients reduced over ``dp`` once per step.
    dp_param_gather_bytes : float
        ZeRO 1/2: ``all_gather`` of updated bf16 parameters after the optimizer step.
    edp_grad_bytes, edp_param_gather_bytes : float
        The same for expert parameters over the ``edp`` group.
    zero3_layer_gather_bytes : float
        ZeRO-3: ``all_gather`` of one layer's parameters over ``dp``, before its forward
        and again before its backward, every micro-batch (prefetched one layer ahead).
    tied_embedding_bytes : float
        ``all_reduce`` of the word-embedding gradient between first and last stage.
    """

    pp_send_bytes: float
    dp_grad_op: str | None
    dp_grad_bytes: float
    dp_param_gather_bytes: float
    edp_grad_bytes: float
    edp_param_gather_bytes: float
    zero3_layer_gather_bytes: float
    tied_embedding_bytes: float


def _reduce_plan(size: int, zero: int, params: float, grad_bytes: int) -> tuple[float, float]:
    """(gradient bytes, parameter all-gather bytes) of one group of ``size`` ranks."""
    if size == 1:
        return 0.0, 0.0
    gather = params * PARAM_BYTES if zero in (1, 2) else 0.0
    return params * grad_bytes, gather


def step_comm(model: ModelSpec, plan: ParallelPlan, seq: int, stage: int = 0,
              grad_bytes: int = GRAD_BYTES) -> StepComm:  # fmt: skip
    """Volumes of ``stage``'s ranks per step and per micro-batch.

    >>> from sim.training.workload.models import model_preset
    >>> c = step_comm(model_preset("llama2-70b"), ParallelPlan(tp=8, pp=4, dp=8, sp=True), 4096)
    >>> c.pp_send_bytes == 2 * 4096 * 8192 / 8
    True
    """
    params = rank_params(model, plan, stage)
    act = ACT_BYTES * plan.micro_batch * seq * model.hidden
    pp_send = act / plan.tp if plan.sp else act
    dp_grad, dp_gather = _reduce_plan(plan.dp, plan.zero, params.dense, grad_bytes)
    edp_grad, edp_gather = _reduce_plan(plan.edp, plan.zero, params.expert, grad_bytes)
    layer = layer_rank_params(model, plan)
    z3 = layer.total * PARAM_BYTES if plan.zero == 3 and plan.dp > 1 else 0.0
    tied = model.tied_embeddings and plan.pp > 1 and stage in (0, plan.pp - 1)
    return StepComm(
        pp_send_bytes=pp_send if plan.pp > 1 else 0.0,
        dp_grad_op=None if plan.dp == 1 else ("all_reduce" if plan.zero == 0 else "reduce_scatter"),
        dp_grad_bytes=dp_grad,
        dp_param_gather_bytes=dp_gather,
        edp_grad_bytes=edp_grad,
        edp_param_gather_bytes=edp_gather,
        zero3_layer_gather_bytes=z3,
        tied_embedding_bytes=model.vocab * model.hidden / plan.tp * grad_bytes if tied else 0.0,
    )


def dp_buckets(total_bytes: float, bucket_bytes: float) -> list[float]:
    """Split a gradient buffer into DDP buckets of ``bucket_bytes`` (last one smaller).

    >>> dp_buckets(60.0, 25.0)
    [25.0, 25.0, 10.0]
    """
    if total_bytes <= 0:
        return []
    full, rest = divmod(total_bytes, bucket_bytes)
    return [float(bucket_bytes)] * int(full) + ([float(rest)] if rest else [])
