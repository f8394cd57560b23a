"""Model states of one rank (weights, gradients, optimizer states) under ZeRO, the chosen
optimizer, LoRA/QLoRA and optimizer offload.

Full-parameter training with AdamW reproduces :mod:`sim.training.memory.report`'s
description exactly. Under LoRA/QLoRA the frozen base keeps only its weights (bf16, or
NF4 for QLoRA's linear layers; sharded by ZeRO-3 like the rest) and the adapters carry
the gradients and optimizer states. Offload moves the optimizer states and the fp32
master weights to host memory (or NVMe): they leave the GPU, and are reported apart.

>>> from sim.workload.models import model_preset
>>> from sim.workload.plan import ParallelPlan
>>> from sim.workload.trainable import Techniques
>>> s = model_states(model_preset("llama2-7b"), ParallelPlan(), 0, Techniques(offload="cpu"))
>>> s.optimizer, s.offloaded == 12 * 6738415616
(0.0, True)
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.workload.comms import RankParams, end_params, layer_rank_params
from sim.workload.frameworks import DTYPE_BYTES, Semantics, overlaps_grad_reduce
from sim.workload.lora import (
    base_weight_bytes,
    layer_base_bytes,
    layer_trainable,
    trainable_params,
)
from sim.workload.models import ModelSpec
from sim.workload.plan import ParallelPlan
from sim.workload.trainable import DEFAULT, Techniques, optimizer_state_bytes
from sim.workload.zero import PARAM_BYTES, zero_semantics

__all__ = ["ModelStates", "framework_states", "model_states"]


@dataclass(frozen=True)
class ModelStates:
    """Bytes of one rank's model states: on the GPU (weights, grads, optimizer) and
    offloaded to host memory or NVMe."""

    weights: float
    grads: float
    optimizer: float
    offloaded: float = 0.0


#: Bytes of an fp32 master weight (in :func:`optimizer_state_bytes`' count).
MASTER_BYTES = 4.0


def _sharded(plan: ParallelPlan, p: RankParams, bytes_per: float, from_stage: int) -> float:
    """``p`` at ``bytes_per`` each, sharded over the shard group from ZeRO ``from_stage``."""
    if plan.zero < from_stage:
        return p.total * bytes_per
    return (p.dense / plan.shard + p.expert / plan.edp) * bytes_per


def _weights(model: ModelSpec, plan: ParallelPlan, stage: int, tech: Techniques) -> float:
    train = trainable_params(model, plan, stage, tech)
    # PyTorch FSDP's sharded flat parameter is the fp32 master weight (counted with the
    # optimizer states): no bf16 shard is kept beside it, only the gathered units.
    fsdp_flat = plan.fsdp is not None and plan.zero == 3
    weights = 0.0 if fsdp_flat else _sharded(plan, train, PARAM_BYTES, 3)
    gathered = plan.zero == 3 and plan.dp_cp > 1  # two gathered layers and the root unit
    if tech.lora:
        weights += _sharded(plan, base_weight_bytes(model, plan, stage, tech), 1.0, 3)
        if gathered:
            layer = layer_base_bytes(model, plan, tech).total
            weights += 2 * layer + 2 * layer_trainable(model, plan, tech).total * PARAM_BYTES
            weights += end_params(model, plan, stage) * PARAM_BYTES
    elif gathered:
        layer = layer_rank_params(model, plan).total
        weights += (2 * layer + end_params(model, plan, stage)) * PARAM_BYTES
    return weights


def model_states(
    model: ModelSpec, plan: ParallelPlan, stage: int, tech: Techniques = DEFAULT
) -> ModelStates:
    """Weights, gradients and optimizer states of a rank of ``stage``, bytes."""
    train = trainable_params(model, plan, stage, tech)
    grads = _sharded(plan, train, plan.grad_bytes, 2)
    if zero_semantics(plan).reduce_every_microbatch and plan.dp_cp > 1:
        # one unit's unsharded gradients and their cast to the reduction dtype
        grads += layer_trainable(model, plan, tech).total * (PARAM_BYTES + plan.grad_bytes)
    optimizer = _sharded(plan, train, optimizer_state_bytes(tech, model), 1)
    weights = _weights(model, plan, stage, tech)
    if tech.offload != "none":
        return ModelStates(weights, grads, 0.0, optimizer)
    return ModelStates(weights, grads, optimizer)


def _gathered_elements(model: ModelSpec, plan: ParallelPlan, stage: int, sem: Semantics,
                       train: RankParams) -> float:  # fmt: skip
    """ZeRO-3/FSDP: bf16 parameter elements a rank holds gathered at the peak."""
    keep_all = (plan.pp > 1 and sem.pp_gather_once) or sem.reshard_after_forward == "never"
    if keep_all or (plan.zero == 2 and sem.model_params == "fp32"):  # SHARD_GRAD_OP
        return train.total
    layer = layer_rank_params(model, plan).total
    if sem.prefetch_elements is not None:  # DeepSpeed: running layer + prefetch bucket,
        # and whatever will be reused within max_reuse_distance (half: forward + backward)
        reuse = (sem.max_reuse_elements or 0.0) / 2
        live = max(layer + sem.prefetch_elements, reuse)
        return min(train.total, live, max(sem.max_live_elements or live, layer))
    return min(train.total, sem.gathered_units * layer + end_params(model, plan, stage))


def _framework_grads(model: ModelSpec, plan: ParallelPlan, sem: Semantics,
                     train: RankParams, tech: Techniques) -> float:  # fmt: skip
    """Gradient bytes of a rank under ``sem``: the buffer, its copies and the transient
    unsharded gradients of the reduction."""
    main, red = DTYPE_BYTES[sem.main_grad_dtype], DTYPE_BYTES[sem.grad_reduce_dtype]
    # PyTorch FSDP keeps the reduced shard in the fp32 flat parameter's dtype
    shard_bytes = 4 if sem.model_params == "fp32" else main
    grads = (
        _sharded(plan, train, main, 2) if plan.zero < 2 else _sharded(plan, train, shard_bytes, 2)
    )
    if sem.grad_bucket_copy == "all":
        grads += train.total * red
    if sem.fp32_grad_copy and main != 4:
        grads += _sharded(plan, train, 4.0, 1)
    if plan.dp_cp == 1:
        return grads
    layer = layer_trainable(model, plan, tech).total
    if plan.zero >= 2 and plan.pp > 1 and sem.pp_gather_once:
        # unsharded accumulated in the reduce dtype until the last backward
        return grads + train.total * red + layer * PARAM_BYTES
    if sem.grad_bucket_copy == "bucket" and sem.grad_bucket_elements is not None:
        # DeepSpeed's contiguous reduce bucket(s), two when overlapping the backward
        copies = 2 if overlaps_grad_reduce(sem, plan.zero) else 1
        return grads + copies * min(sem.grad_bucket_elements, train.total) * main
    if plan.zero >= 2:  # one unit's unsharded bf16 gradients and their cast to red
        return grads + layer * (PARAM_BYTES + (red if red != PARAM_BYTES else 0))
    return grads


def framework_states(
    model: ModelSpec, plan: ParallelPlan, stage: int, tech: Techniques, sem: Semantics
) -> ModelStates:
    """Model states of a rank of ``stage`` as framework ``sem`` holds them, bytes.

    Weights are the bf16 copies on the GPU: the model's own parameters where it holds
    them in bf16 (sharded by ZeRO-3), plus gathered units and the autocast cache; where
    the model holds fp32 parameters (PyTorch FSDP, DDP with AMP) they are the master
    weights and count with the optimizer states, as ``optimizer_state_bytes`` does,
    except under ZeRO-1, where they stay whole on every rank (counted as weights) and
    only the moments are sharded.
    """
    train = trainable_params(model, plan, stage, tech)
    state = optimizer_state_bytes(tech, model)
    own = PARAM_BYTES if sem.model_params == "bf16" else 0.0
    if own == 0.0 and plan.zero == 1 and state >= MASTER_BYTES:
        # fp32 model parameters under ZeRO-1 (DDP with ZeroRedundancyOptimizer): the
        # parameters are the master weights and stay whole on every rank; only the
        # optimizer's moments are sharded
        optimizer = _sharded(plan, train, state - MASTER_BYTES, 1)
        weights = train.total * MASTER_BYTES
    else:
        optimizer = _sharded(plan, train, state, 1)
        weights = _sharded(plan, train, own, 3)
    if tech.lora:  # the frozen base, bf16 (NF4 for QLoRA), sharded by ZeRO-3
        weights += _sharded(plan, base_weight_bytes(model, plan, stage, tech), 1.0, 3)
    sharded = plan.dp_cp > 1 and (plan.zero == 3 or (plan.zero == 2 and own == 0.0))
    if sharded:  # the units gathered whole: a LoRA base's frozen layers are gathered too
        held = trainable_params(model, plan, stage, DEFAULT) if tech.lora else train
        weights += _gathered_elements(model, plan, stage, sem, held) * PARAM_BYTES
    if sem.autocast_cache:
        weights += train.total * PARAM_BYTES
    grads = _framework_grads(model, plan, sem, train, tech)
    if tech.offload != "none":
        return ModelStates(weights, grads, 0.0, optimizer)
    return ModelStates(weights, grads, optimizer)
