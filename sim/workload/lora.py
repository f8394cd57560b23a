"""What LoRA/QLoRA change in a rank's work: trainable and frozen parameters, the op lists
(no base weight gradients, adapter GEMMs, NF4 dequantisation) and the data-parallel
volumes (adapter gradients only). See :mod:`.techniques` for the settings and sources.

Approximations (stated in results' notes): adapters split over tensor parallelism like
their base matrix (Megatron would replicate one of the two factors); the adapter output
add and dropout are left out; activations are counted as in full fine-tuning (an upper
bound: frozen linears need not save their inputs).

>>> from sim.workload.models import model_preset
>>> from sim.workload.plan import ParallelPlan
>>> from sim.workload.trainable import Techniques
>>> trainable_params(model_preset("llama2-7b"), ParallelPlan(), 0, Techniques(finetune="lora"))
RankParams(dense=16777216.0, expert=0.0)
"""

from __future__ import annotations

from dataclasses import replace

from sim.workload.comms import RankParams, StepComm, layer_rank_params, rank_params
from sim.workload.models import ModelSpec, layer_params
from sim.workload.ops import LayerOps
from sim.workload.plan import ParallelPlan
from sim.workload.primitives import Op, OpContext, linear
from sim.workload.stages import stage_layers
from sim.workload.trainable import (
    NF4_BYTES,
    Techniques,
    adapter_shapes,
    base_linear_params,
    lora_layer_params,
)
from sim.workload.zero import PARAM_BYTES

__all__ = [
    "BASE_LINEARS",
    "adapt_comm",
    "base_weight_bytes",
    "frozen_end_ops",
    "layer_base_bytes",
    "layer_trainable",
    "lora_layer_ops",
    "trainable_params",
]

#: The layer's linear ops (base weights QLoRA quantises and LoRA freezes).
BASE_LINEARS = ("qkv", "attn_out", "mlp_up", "mlp_down", "router", "expert_up", "expert_down")
#: Which base op each adapter target sits beside, and whether that op is column-parallel.
_ATTACH = {"q": ("qkv", True), "k": ("qkv", True), "v": ("qkv", True), "o": ("attn_out", False),
           "gate": ("mlp_up", True), "up": ("mlp_up", True), "down": ("mlp_down", False)}  # fmt: skip


def layer_trainable(model: ModelSpec, plan: ParallelPlan, tech: Techniques) -> RankParams:
    """Trainable parameters of one layer on one rank (adapters split by ``tp``)."""
    if not tech.lora:
        return layer_rank_params(model, plan)
    return RankParams(lora_layer_params(model, tech) / plan.tp, 0.0)


def trainable_params(
    model: ModelSpec, plan: ParallelPlan, stage: int, tech: Techniques
) -> RankParams:
    """Trainable parameters on a rank of ``stage``: all of them, or its layers' adapters."""
    if not tech.lora:
        return rank_params(model, plan, stage)
    n = stage_layers(plan, model)[stage]
    return RankParams(n * layer_trainable(model, plan, tech).dense, 0.0)


def _quant_fraction(model: ModelSpec, tech: Techniques) -> float:
    return base_linear_params(model) / layer_params(model) if tech.finetune == "qlora" else 0.0


def layer_base_bytes(model: ModelSpec, plan: ParallelPlan, tech: Techniques) -> RankParams:
    """Bytes of one layer's frozen base weights on one rank, (dense, expert): bf16, or
    NF4 + constants for QLoRA's linear weights (norms and biases stay bf16)."""
    q = _quant_fraction(model, tech)
    per = q * NF4_BYTES + (1 - q) * PARAM_BYTES
    layer = layer_rank_params(model, plan)
    return RankParams(layer.dense * per, layer.expert * per)


def base_weight_bytes(
    model: ModelSpec, plan: ParallelPlan, stage: int, tech: Techniques
) -> RankParams:
    """Bytes of the frozen base on a rank of ``stage`` before ZeRO-3 sharding, (dense,
    expert); the embedding and head stay bf16 (QLoRA does not quantise them)."""
    n = stage_layers(plan, model)[stage]
    layer = layer_base_bytes(model, plan, tech)
    ends = rank_params(model, plan, stage).dense - n * layer_rank_params(model, plan).dense
    return RankParams(n * layer.dense + ends * PARAM_BYTES, n * layer.expert)


def adapt_comm(c: StepComm, model: ModelSpec, plan: ParallelPlan, stage: int,
               tech: Techniques) -> StepComm:  # fmt: skip
    """``c`` with only the adapters' gradients reduced and gathered after the step; ZeRO-3
    gathers the frozen base (in its stored dtype) with the adapters; frozen embeddings
    need no tied-gradient sync."""
    if not tech.lora:
        return c
    train = trainable_params(model, plan, stage, tech).dense
    layer_train = layer_trainable(model, plan, tech).dense * PARAM_BYTES
    base = layer_base_bytes(model, plan, tech)
    return replace(
        c,
        dp_grad_bytes=train * plan.grad_bytes if c.dp_grad_bytes else 0.0,
        dp_param_gather_bytes=train * PARAM_BYTES if c.dp_param_gather_bytes else 0.0,
        edp_grad_bytes=0.0,
        edp_param_gather_bytes=0.0,
        layer_gather_bytes=base.dense + layer_train if c.layer_gather_bytes else 0.0,
        layer_expert_gather_bytes=base.expert if c.layer_expert_gather_bytes else 0.0,
        tied_embedding_bytes=0.0,
    )


def _dequant(op: Op) -> Op:
    """NF4 -> bf16 dequantisation of the weight a GEMM reads (memory-bound: read 4-bit
    weights and constants, write bf16)."""
    _, n, k, batch = op.shape
    elements = n * k * batch
    return Op(f"{op.name}_dequant", flops=elements, bytes=elements * (NF4_BYTES + PARAM_BYTES),
              recompute=op.recompute)  # fmt: skip


def _base_name(name: str) -> str:
    return name.removeprefix("recompute_").removesuffix("_dgrad")


def _adapters(ctx: OpContext, tech: Techniques) -> tuple[list[Op], list[Op]]:
    """Forward and backward GEMMs of the layer's adapters (bf16, ``ctx.half``)."""
    m, t, r = ctx.model, ctx.tp, tech.lora_rank
    kv_rank = max(m.kv_heads // t, 1) * m.head_dim
    fwd: list[Op] = []
    bwd: list[Op] = []
    for name, d_in, d_out in adapter_shapes(m, tech.lora_targets):
        column = _ATTACH[name][1]
        if name in ("k", "v"):
            d_out = kv_rank
        elif column:
            d_out = d_out // t
        else:
            d_in = d_in // t
        for part, (k, n) in (("a", (d_in, r)), ("b", (r, d_out))):
            f, b = linear(ctx, f"lora_{name}_{part}", k, n, dtype=ctx.half)
            fwd += f
            bwd += b
    return fwd, bwd


def lora_layer_ops(ops: LayerOps, ctx: OpContext, tech: Techniques) -> LayerOps:
    """One layer's ops under LoRA/QLoRA: base weight-gradient GEMMs dropped, adapter GEMMs
    added (recomputed too under full recompute), QLoRA's dequantisation before every
    GEMM that reads a base weight, the per-layer gradient cast and accumulation resized to
    the adapters (the frozen base has no gradients)."""
    if not tech.lora:
        return ops
    qlora = tech.finetune == "qlora"
    a_fwd, a_bwd = _adapters(ctx, tech)
    ratio = lora_layer_params(ctx.model, tech) / layer_params(ctx.model)

    def keep(seq: tuple[Op, ...]) -> list[Op]:
        out: list[Op] = []
        for op in seq:
            if op.name.endswith("_wgrad") and op.name.removesuffix("_wgrad") in BASE_LINEARS:
                continue
            if op.name in ("grad_cast", "grad_accumulate"):
                op = replace(op, flops=op.flops * ratio, bytes=op.bytes * ratio)
            if qlora and op.cls == "gemm" and _base_name(op.name) in BASE_LINEARS:
                out.append(_dequant(op))
            out.append(op)
        return out

    recompute = [replace(o, name=f"recompute_{o.name}", recompute=True) for o in a_fwd]
    fwd = keep(ops.fwd) + a_fwd
    bwd = keep(ops.bwd) + a_bwd
    if ctx.recompute == "full":
        bwd = recompute + bwd
    return LayerOps(tuple(fwd), tuple(bwd))


def frozen_end_ops(ops: LayerOps, tech: Techniques) -> LayerOps:
    """Embedding or head ops with a frozen embedding table and output projection: no
    weight gradient (``logits_wgrad``, the embedding's gradient accumulation)."""
    if not tech.lora:
        return ops
    drop = ("logits_wgrad", "embedding_bwd")
    return LayerOps(ops.fwd, tuple(o for o in ops.bwd if o.name not in drop))
