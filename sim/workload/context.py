"""Context parallelism (``parallel.cp``): ring attention over sequence chunks.

Each of the ``cp`` ranks of a context-parallel group holds ``s / cp`` tokens of every
sequence, as two chunks of ``s / (2 cp)`` tokens: rank ``i`` holds chunks ``i`` and
``2 cp - 1 - i``, so every rank does the same share of the causal attention work
(Megatron-Core's load-balanced context parallelism). Everything outside attention (linear
layers, norms, the loss) runs on the local tokens only, so it scales as ``1 / cp``.

Attention is a ring (Liu et al., "Ring Attention with Blockwise Transformers for
Near-Infinite Context", arXiv:2310.01889; Megatron-Core's ``context_parallel`` in
Transformer Engine's fused attention): in the forward each rank computes attention of
its queries against the K and V chunk it holds while it sends that chunk to the next
rank of the ring and receives the previous rank's, ``cp - 1`` times. Per step one rank
sends ``2 b (s / cp) kv_heads_rank head_dim`` bf16 elements (K and V); the backward
passes the K/V chunks and their gradients around the ring, twice the forward volume.
A step's transfer overlaps the attention compute of the chunk in hand; what is left is
exposed: ``max(0, transfer - attention compute per step)`` per step.

Counted attention FLOPs (Megatron's full square) per rank are ``1 / cp`` of the
unsplit layer's; the executed ones are too: the diagonal step is causal over the local
``s / cp`` tokens, and each of the ``cp - 1`` other steps computes half a
``(s / cp) x (s / cp)`` block (one of the two chunks is fully masked).

>>> from sim.workload.models import model_preset
>>> from sim.workload.plan import ParallelPlan
>>> m = model_preset("llama3-8b")  # 8 KV heads of 128
>>> ring_step_bytes(m, ParallelPlan(cp=4, global_batch=1), 131072)
134217728.0
"""

from __future__ import annotations

from dataclasses import replace

from sim.errors import ConfigError
from sim.workload.models import ModelSpec
from sim.workload.plan import ParallelPlan
from sim.workload.primitives import ACT_BYTES, Block, Op, OpContext, comm

__all__ = [
    "check_context",
    "ring_attention_core",
    "ring_bytes_per_layer",
    "ring_step_bytes",
]


def _kv_step_bytes(model: ModelSpec, micro_batch: int, seq: int, tp: int, cp: int) -> float:
    kv_rank = max(model.kv_heads // tp, 1) * model.head_dim
    return float(2 * micro_batch * (seq // cp) * kv_rank * ACT_BYTES)


def ring_step_bytes(model: ModelSpec, plan: ParallelPlan, seq: int) -> float:
    """Bytes one rank sends per forward ring step: K and V of its ``seq / cp`` tokens,
    ``2 b (s / cp) kv_heads_rank head_dim * 2`` (bf16; KV heads split by TP)."""
    return _kv_step_bytes(model, plan.micro_batch, seq, plan.tp, plan.cp)


def ring_bytes_per_layer(model: ModelSpec, plan: ParallelPlan, seq: int) -> tuple[float, float]:
    """(forward, backward) bytes one rank sends per layer per micro-batch.

    Forward ``(cp - 1)`` steps of :func:`ring_step_bytes`; backward twice that (K/V and
    their gradients). Zero without context parallelism.

    >>> from sim.workload.models import model_preset
    >>> m = model_preset("llama3-8b")
    >>> ring_bytes_per_layer(m, ParallelPlan(cp=2, global_batch=1), 8192)
    (16777216.0, 33554432.0)
    """
    fwd = (plan.cp - 1) * ring_step_bytes(model, plan, seq)
    return fwd, 2 * fwd


def check_context(plan: ParallelPlan, seq: int, flash_attention: bool) -> None:
    """Refuse a ``cp`` that cannot split ``seq`` into ``2 cp`` equal chunks, or CP without
    fused attention (ring attention runs fused kernels per chunk)."""
    if plan.cp == 1:
        return
    if seq % (2 * plan.cp):
        raise ConfigError(
            f"parallel.cp: {plan.cp} must divide training.seq_len/2 = {seq / 2:g} "
            f"(2 x cp = {2 * plan.cp} load-balanced chunks per sequence)"
        )
    if not flash_attention:
        raise ConfigError(
            f"parallel.cp: {plan.cp} needs training.flash_attention: true "
            "(ring attention runs fused attention kernels on each chunk)"
        )


def ring_attention_core(ctx: OpContext) -> list[Block]:
    """The attention core of one CP rank: the diagonal step, the ``cp - 1`` ring steps
    and the K/V ring (one ``cp_comm`` op per pass; its ``shape[0]`` is the step count).

    >>> from sim.workload.models import model_preset
    >>> ctx = OpContext(model_preset("llama3-8b"), 1, 8192, cp=4)
    >>> [o.name for o in ring_attention_core(ctx)[0][0]]
    ['attn_core', 'attn_core_ring', 'attn_cp_kv_ring']
    """
    m, b, cp, t = ctx.model, ctx.micro_batch, ctx.cp, ctx.tp
    s_local = ctx.seq // cp
    h_rank, heads_rank, d = m.hidden // t, m.heads // t, m.head_dim
    kv_rank = max(m.kv_heads // t, 1) * d
    square = 4.0 * b * s_local * s_local * h_rank  # counted: the full local square
    qkvo = ACT_BYTES * b * s_local * (2 * h_rank + 2 * kv_rank)
    diag = Op("attn_core", flops=square, bytes=qkvo, matmul=True, dtype=ctx.half,
              cls="attn_fwd", shape=(float(b), float(heads_rank), float(s_local), float(d), 1.0),
              kernel=ctx.attention_kernel)  # fmt: skip
    # cp - 1 steps, each half a non-causal local square: b (cp - 1) / 2 squares executed
    ring = replace(diag, name="attn_core_ring", flops=(cp - 1) * square,
                   bytes=(cp - 1) * qkvo, shape=(b * (cp - 1) / 2, *diag.shape[1:4], 0.0))  # fmt: skip
    step = _kv_step_bytes(m, b, ctx.seq, t, cp)
    kv = replace(comm("cp_comm", "cp", "attn_cp_kv_ring", "send_recv", step),
                 shape=(float(cp - 1),))  # fmt: skip
    fwd = [diag, ring, kv]
    bwd = [
        replace(o, name=f"{o.name}_bwd", flops=2 * o.flops, bytes=2 * o.bytes, cls="attn_bwd")
        for o in (diag, ring)
    ]
    bwd.append(replace(kv, name="attn_cp_kv_ring_bwd", comm_bytes=2 * step))
    return [(fwd, bwd)]
