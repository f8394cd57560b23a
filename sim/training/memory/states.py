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

__all__ = ["ModelStates", "model_states"]


@dataclass(frozen=True)
class ModelStates:
    """Bytes of one rank's model states: on the GPU (weights, grads, optimizer) and
    offloaded to host memory or NVMe."""

    weights: float
    grads: float
    optimizer: float
    offloaded: float = 0.0


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
