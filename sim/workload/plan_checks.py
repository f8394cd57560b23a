"""Checks of a :class:`~sim.workload.plan.ParallelPlan` against a model and a
cluster: sizes, how the model splits over TP/EP and pipeline stages, the batch and the
schedule (:func:`validate_plan`; every failure a one-line ConfigError naming the keys).
"""

from __future__ import annotations

from sim.errors import ConfigError
from sim.workload.models import ModelSpec
from sim.workload.plan import (
    RECOMPUTE,
    SCHEDULE_NAMES,
    ParallelPlan,
    parse_order,
)
from sim.workload.stages import chunk_layers

__all__ = ["MAX_MICROBATCHES", "group_error", "validate_plan"]


def _check_sizes(plan: ParallelPlan) -> None:
    ints = ("tp", "cp", "pp", "dp", "ep", "micro_batch", "global_batch", "virtual_stages")
    for key in (*ints, "gpus_per_node"):
        value = getattr(plan, key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            place = "cluster GPUs per node" if key == "gpus_per_node" else f"parallel.{key}"
            raise ConfigError(f"{place}: must be an integer >= 1, got {value!r}")
    if plan.zero not in (0, 1, 2, 3):
        raise ConfigError(f"parallel.zero: {plan.zero!r} is not one of 0, 1, 2, 3")
    if plan.schedule not in SCHEDULE_NAMES:
        raise ConfigError(
            f"parallel.schedule: {plan.schedule!r} is not one of {', '.join(SCHEDULE_NAMES)}"
        )
    if plan.recompute not in RECOMPUTE:
        raise ConfigError(
            f"parallel.recompute: {plan.recompute!r} is not one of {', '.join(RECOMPUTE)}"
        )
    parse_order(plan.order)


def _check_model_split(plan: ParallelPlan, model: ModelSpec) -> None:
    tp = plan.tp
    if model.heads % tp:
        raise ConfigError(f"parallel.tp: {tp} must divide model.heads={model.heads}")
    if model.kv_heads % tp and tp % model.kv_heads:
        raise ConfigError(
            f"parallel.tp: {tp} must divide model.kv_heads={model.kv_heads} or be a multiple "
            "of it (KV heads replicated)"
        )
    if model.ffn_hidden % tp:
        raise ConfigError(f"parallel.tp: {tp} must divide model.ffn_hidden={model.ffn_hidden}")
    chunk_layers(plan, model)  # raises ConfigError when the layers cannot be placed
    if plan.ep > 1 and not model.moe:
        raise ConfigError(f"parallel.ep: {plan.ep} needs an MoE model (model.experts > 1)")
    if model.experts % plan.ep:
        raise ConfigError(f"parallel.ep: {plan.ep} must divide model.experts={model.experts}")


#: Most micro-batches per step per replica: the pipeline is simulated micro-batch by
#: micro-batch (4,096 take ~8 s on the flow network, linear in the count); real jobs use
#: tens to a few thousand (Megatron-LM's GPT-3 175B: 1536 / (1 x 8) = 192).
MAX_MICROBATCHES = 16_384


def _check_batch(plan: ParallelPlan) -> None:
    per_step = plan.micro_batch * plan.dp
    if plan.global_batch % per_step:
        raise ConfigError(
            f"training.global_batch: {plan.global_batch} must be a multiple of "
            f"parallel.micro_batch x parallel.dp = {plan.micro_batch} x {plan.dp} = {per_step}"
        )
    if plan.num_microbatches > MAX_MICROBATCHES:
        raise ConfigError(
            f"training.global_batch: {plan.global_batch} / (micro_batch {plan.micro_batch} x "
            f"dp {plan.dp}) = {plan.num_microbatches:,} micro-batches; at most "
            f"{MAX_MICROBATCHES:,} (raise parallel.micro_batch)"
        )
    if plan.dp % plan.ep:
        raise ConfigError(f"parallel.ep: {plan.ep} must divide parallel.dp={plan.dp}")
    if plan.sp and plan.tp == 1:
        raise ConfigError("parallel.sp: sequence parallelism needs parallel.tp > 1 (got tp=1)")
    if plan.shard_size is not None and (plan.shard_size < 1 or plan.dp_cp % plan.shard_size):
        where = f"parallel.dp={plan.dp}" if plan.cp == 1 else f"dp x cp = {plan.dp_cp}"
        raise ConfigError(f"parallel.shard_size: {plan.shard_size} must divide {where}")
    if plan.cp > 1 and plan.ep > 1:
        raise ConfigError(
            f"parallel.cp: {plan.cp} with parallel.ep={plan.ep} is not modelled; "
            "use cp=1 for MoE expert parallelism"
        )
    if plan.shard_size is not None and plan.shard_size < plan.dp_cp and plan.zero == 0:
        raise ConfigError("parallel.shard_size: needs parallel.zero >= 1 (a sharding strategy)")
    if plan.grad_bytes not in (2, 4):
        raise ConfigError(f"training.grad_dtype: {plan.grad_bytes} bytes; allowed: fp32, bf16")


def group_error(p: int, m: int, n: int) -> str | None:
    """Why Megatron-Core refuses ``n`` contiguous micro-batches per model chunk (its
    ``microbatch_group_size_per_vp_stage``) for ``p`` stages and ``m`` micro-batches, or
    None where it runs them: ``p <= n <= m``, and the last group (``m % n`` micro-batches
    when not 0) of at least ``p`` (``megatron/core/pipeline_parallel/schedules.py``,
    ``forward_backward_pipelining_with_interleaving``: fewer leave dependency bubbles).

    >>> group_error(4, 12, 4) is None, group_error(4, 10, 6) is None
    (True, True)
    >>> group_error(4, 10, 4)
    'the last group has 2 micro-batches (10 % 4), fewer than the 4 stages'
    """
    if not p <= n <= m:
        return f"{n} is outside [pp, micro-batches] = [{p}, {m}]"
    last = m % n
    if 0 < last < p:
        return f"the last group has {last} micro-batches ({m} % {n}), fewer than the {p} stages"
    return None


def _check_schedule(plan: ParallelPlan) -> None:
    v, m = plan.virtual_stages, plan.num_microbatches
    if v > 1 and plan.schedule != "interleaved":
        raise ConfigError(
            f"parallel.virtual_stages: {v} needs parallel.schedule=interleaved "
            f"(got {plan.schedule!r})"
        )
    if v > 1 and plan.pp == 1:
        raise ConfigError(f"parallel.virtual_stages: {v} needs parallel.pp > 1 (got pp=1)")
    if plan.schedule == "interleaved" and v < 2:
        raise ConfigError(
            "parallel.schedule=interleaved needs parallel.virtual_stages >= 2 (got 1): with one "
            "model chunk per stage the schedule is 1f1b, as Megatron runs it without "
            "--num-layers-per-virtual-pipeline-stage"
        )
    _check_groups(plan, m)


def _check_groups(plan: ParallelPlan, m: int) -> None:
    """The interleaved schedule's micro-batch groups (``microbatch_group_size``, default
    ``pp``) for ``m`` micro-batches, as :func:`group_error` allows them."""
    n = plan.microbatch_group_size
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ConfigError(f"parallel.microbatch_group_size: {n!r}; allowed: an integer >= 1")
    if n is not None and plan.schedule != "interleaved":
        raise ConfigError(
            f"parallel.microbatch_group_size: {n} needs parallel.schedule=interleaved "
            f"(got {plan.schedule!r})"
        )
    if plan.schedule == "interleaved" and n is None and m % plan.pp:
        raise ConfigError(
            f"parallel.schedule: interleaved needs micro-batches ({m} = global_batch / "
            f"(micro_batch x dp)) to be a multiple of parallel.pp={plan.pp}, or "
            "parallel.microbatch_group_size set (Megatron-Core's micro-batch groups)"
        )
    why = group_error(plan.pp, m, n) if plan.schedule == "interleaved" and n is not None else None
    if why is not None:
        raise ConfigError(
            f"parallel.microbatch_group_size: {why} (micro-batches = global_batch / "
            "(micro_batch x dp); Megatron-Core refuses it)"
        )


def validate_plan(plan: ParallelPlan, model: ModelSpec, num_gpus: int) -> ParallelPlan:
    """Check ``plan`` against ``model`` and a cluster of ``num_gpus`` GPUs.

    Returns the plan unchanged; raises ConfigError naming the offending keys and values.

    >>> from sim.workload.models import model_preset
    >>> validate_plan(ParallelPlan(tp=8, global_batch=4), model_preset("llama2-7b"), 8).tp
    8
    """
    _check_sizes(plan)
    if plan.num_gpus != num_gpus and plan.cp == 1:
        raise ConfigError(
            f"parallel.tp x parallel.pp x parallel.dp = {plan.tp} x {plan.pp} x {plan.dp} = "
            f"{plan.num_gpus}, but the cluster has {num_gpus} GPUs"
        )
    if plan.num_gpus != num_gpus:
        raise ConfigError(
            f"parallel.tp x cp x pp x dp = {plan.tp} x {plan.cp} x {plan.pp} x {plan.dp} = "
            f"{plan.num_gpus}, but the cluster has {num_gpus} GPUs"
        )
    _check_model_split(plan, model)
    _check_batch(plan)
    _check_schedule(plan)
    return plan
