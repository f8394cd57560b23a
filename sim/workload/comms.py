"""Parameters held per rank and the communication volumes outside the layer ops.

The per-layer TP and EP collectives live in :mod:`.ops`'s op lists. This module gives
what happens between pipeline stages (activations and their gradients), across
data-parallel replicas (gradient reductions and ZeRO parameter gathers, with the timing
of :mod:`.zero`) and between the two copies of tied embeddings.

Gradients are reduced in ``plan.grad_bytes`` per element (fp32 main gradients by
default, as Megatron-LM accumulates and reduces them; ``training.grad_dtype: bf16``
halves the volume); parameters are gathered in bf16.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.kept import Kept
from sim.workload.models import ModelSpec, attention_params, expert_params, norm_params
from sim.workload.plan import ParallelPlan
from sim.workload.primitives import ACT_BYTES
from sim.workload.stages import stage_layers
from sim.workload.zero import PARAM_BYTES, zero_semantics

__all__ = [
    "PARAM_BYTES",
    "RankParams",
    "StepComm",
    "dp_buckets",
    "layer_rank_params",
    "rank_params",
    "step_comm",
]


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


def end_params(model: ModelSpec, plan: ParallelPlan, stage: int) -> float:
    """Embedding (first stage) and head (last stage) parameters on one rank of ``stage``.

    With tied embeddings and ``pp > 1`` the last stage keeps its own copy of the word
    embedding, as Megatron-LM does.
    """
    m, t = model, plan.tp
    word = m.vocab * m.hidden / t
    out = 0.0
    if stage == 0:
        out += word + (m.max_seq * m.hidden if m.position == "learned" else 0)
    if stage == plan.pp - 1:
        tied_here = m.tied_embeddings and plan.pp == 1
        out += norm_params(m) + (0 if tied_here else word)
    return out


def rank_params(model: ModelSpec, plan: ParallelPlan, stage: int) -> RankParams:
    """Parameters on a rank of pipeline ``stage`` (its layers, embedding and head).

    >>> from sim.workload.models import model_preset, param_count
    >>> m = model_preset("llama2-7b")
    >>> rank_params(m, ParallelPlan(), 0).total == param_count(m)
    True
    """

    def make() -> RankParams:
        layer = layer_rank_params(model, plan)
        n = stage_layers(plan, model)[stage]
        return RankParams(n * layer.dense + end_params(model, plan, stage), n * layer.expert)

    return _RANK_PARAMS.get((*_rank_keys(plan), stage), (model,), make)


#: rank_params by (model id, :func:`_rank_keys`, stage), the model kept beside its answer:
#: a planner asks the same for every micro-batch size, recompute and schedule it checks.
_RANK_PARAMS: Kept[RankParams] = Kept(limit=4096)


def _rank_keys(plan: ParallelPlan) -> tuple[object, ...]:
    """Every plan field :func:`rank_params` reads: TP and EP (:func:`layer_rank_params`),
    PP (:func:`end_params`) and the layer placement (:func:`~sim.workload.stages.stage_layers`)."""
    return (
        plan.tp, plan.ep, plan.pp, plan.virtual_stages, plan.layer_split,
        plan.first_stage_layers, plan.last_stage_layers, plan.embedding_as_layer,
        plan.loss_as_layer,
    )  # fmt: skip


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
        Dense gradients of the stage reduced over ``dp * cp`` (or the shard group) each time
        they are reduced: once per step (ZeRO 0/1) or per micro-batch (ZeRO 2/3).
    dp_param_gather_bytes : float
        Once per step after the optimizer (ZeRO 1/2): ``all_gather`` of the stage's
        updated bf16 parameters.
    edp_grad_bytes, edp_param_gather_bytes : float
        The same for expert parameters over the ``edp`` group.
    layer_gather_bytes, layer_expert_gather_bytes : float
        ZeRO-3/FSDP: ``all_gather`` of one layer's dense (expert) parameters before its
        forward (and backward), every micro-batch.
    tied_embedding_bytes : float
        ``all_reduce`` of the word-embedding gradient between first and last stage.
    """

    pp_send_bytes: float
    dp_grad_op: str | None
    dp_grad_bytes: float
    dp_param_gather_bytes: float
    edp_grad_bytes: float
    edp_param_gather_bytes: float
    layer_gather_bytes: float
    layer_expert_gather_bytes: float
    tied_embedding_bytes: float


def step_comm(model: ModelSpec, plan: ParallelPlan, seq: int, stage: int = 0) -> StepComm:
    """Volumes of ``stage``'s ranks per reduction, per gather and per micro-batch.

    >>> from sim.workload.models import model_preset
    >>> c = step_comm(model_preset("llama2-70b"), ParallelPlan(tp=8, pp=4, dp=8, sp=True), 4096)
    >>> c.pp_send_bytes == 2 * 4096 * 8192 / 8
    True
    """
    params = rank_params(model, plan, stage)
    sem, g = zero_semantics(plan), plan.grad_bytes
    act = ACT_BYTES * plan.micro_batch * (seq // plan.cp) * model.hidden  # local tokens
    pp_send = act / plan.tp if plan.sp else act
    has_dp, has_edp = plan.dp_cp > 1, plan.edp > 1  # CP ranks reduce gradients too
    layer = layer_rank_params(model, plan)
    per_layer = sem.gather_forward or sem.gather_backward
    tied = model.tied_embeddings and plan.pp > 1 and stage in (0, plan.pp - 1)
    return StepComm(
        pp_send_bytes=pp_send if plan.pp > 1 else 0.0,
        dp_grad_op=sem.reduce_op if has_dp else None,
        dp_grad_bytes=params.dense * g if has_dp else 0.0,
        dp_param_gather_bytes=params.dense * PARAM_BYTES
        if has_dp and sem.gather_after_step
        else 0.0,
        edp_grad_bytes=params.expert * g if has_edp else 0.0,
        edp_param_gather_bytes=(
            params.expert * PARAM_BYTES if has_edp and sem.gather_after_step else 0.0
        ),
        layer_gather_bytes=layer.dense * PARAM_BYTES if has_dp and per_layer else 0.0,
        layer_expert_gather_bytes=layer.expert * PARAM_BYTES if has_edp and per_layer else 0.0,
        tied_embedding_bytes=model.vocab * model.hidden / plan.tp * g if tied else 0.0,
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
