"""Per-rank ops of a transformer: kernels with shapes, and the TP/EP communication they imply.

Everything is per micro-batch per rank under tensor parallelism ``t`` (and sequence
parallelism); the kernels themselves are built in :mod:`.primitives`. Counting
conventions (Megatron-LM's, so MFU/HFU compare with its papers):

- A matmul of ``(M x K) @ (K x N)`` is ``2 M K N`` FLOPs. Only tensor-core work
  (``Op.matmul``: GEMMs and attention) counts towards model/hardware FLOPs; norms,
  softmax, activations, dropout, residual adds, rotary, casts and the cross-entropy carry
  bytes (they are memory-bound) and a nominal FLOP count that is never summed.
- Attention scores and context count the **full** ``s x s`` square: ``4 b s^2 h``
  forward, although a causal mask makes half of it useless (a fused kernel skips it; the
  compute model times that). This is the count behind Megatron's
  ``96 B s l h^2 (1 + s/6h + V/16lh)``.
- Backward = 2 x forward FLOPs for every matmul (input and weight gradients).
- Recompute adds the recomputed forward, flagged ``Op.recompute``: ``full`` replays the
  whole layer forward (its TP communication included), ``selective`` only the attention
  core (Korthikanti et al. 2022), or, under torchtitan's per-op SAC
  (``OpContext.selective == "op"``), everything but the attention core, the
  reduce-scatters and every odd matmul (:func:`_op_sac_recompute`). Where the framework's
  recompute stops early (``OpContext.early_stop``: PyTorch's non-reentrant checkpoint) the
  block's last matmul and what follows it are not re-run. Model FLOPs exclude it, hardware
  FLOPs include it.
- Embedding lookups are 0 FLOPs; the logits projection is ``2 b s h V`` in bf16 (also
  under fp8, as Transformer Engine recipes keep it) and is never recomputed.

Communication sizes follow nccl-tests' "size" (:mod:`sim.collectives.schedule`): the whole
buffer, in bytes, of bf16 activations (2 bytes per element).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.workload.context import ring_attention_core
from sim.workload.models import ModelSpec, layer_params
from sim.workload.plan import ParallelPlan
from sim.workload.primitives import (
    ACT_BYTES,
    CE_BYTES,
    Block,
    Op,
    OpContext,
    _gemm,
    attention_core,
    comm,
    elementwise,
    linear,
)

__all__ = [
    "ACT_BYTES",
    "LayerOps",
    "Op",
    "OpContext",
    "chunk_ops",
    "context_for",
    "embedding_ops",
    "head_ops",
    "layer_ops",
    "tokens_per_expert",
]


@dataclass(frozen=True)
class LayerOps:
    """Forward and backward op lists, in execution order (backward includes recompute)."""

    fwd: tuple[Op, ...]
    bwd: tuple[Op, ...]

    @property
    def model_flops(self) -> float:
        """Matmul FLOPs without recomputation (fwd + bwd)."""
        return sum(o.flops for o in self.fwd + self.bwd if o.matmul and not o.recompute)

    @property
    def hardware_flops(self) -> float:
        """Matmul FLOPs including recomputation (fwd + bwd)."""
        return sum(o.flops for o in self.fwd + self.bwd if o.matmul)


def context_for(model: ModelSpec, plan: ParallelPlan, seq: int, precision: str = "bf16",
                flash_attention: bool = True, grad_cast_bytes: float = 0.0,
                cross_entropy: str = "fp32", fused_kernels: bool = False,
                attention_kernel: str = "fitted", grad_accum_bytes: float = 0.0,
                tp_regather: bool = True, tp_async_backward: bool = False,
                selective: str = "attention", early_stop: bool = False) -> OpContext:  # fmt: skip
    """The :class:`OpContext` of ``plan`` (TP, SP, micro-batch, recompute, kernels).

    >>> from sim.workload.models import model_preset
    >>> context_for(model_preset("llama2-7b"), ParallelPlan(tp=2, global_batch=2), 4096).tp
    2
    """
    return OpContext(model, plan.micro_batch, seq, plan.tp, plan.sp, plan.recompute,
                     precision, flash_attention, grad_cast_bytes, cross_entropy,
                     fused_kernels, plan.cp, attention_kernel, grad_accum_bytes,
                     tp_regather, tp_async_backward, selective, early_stop)  # fmt: skip


def _core(ctx: OpContext) -> list[Block]:
    """The attention core: one kernel (or GEMMs and softmax), or ring attention under CP."""
    return ring_attention_core(ctx) if ctx.cp > 1 else attention_core(ctx)


def _tp_full(ctx: OpContext, fp8: bool = False) -> float:
    """Bytes of one gathered activation: bf16, or fp8 where ``fp8`` (see
    :attr:`OpContext.fp8_gathers`)."""
    return (1 if fp8 else ACT_BYTES) * ctx.tokens * ctx.model.hidden


def _tp_enter(ctx: OpContext, name: str, fp8: bool = False, column: bool = True) -> Block:
    """Megatron's ``f`` before a column-parallel layer: SP all-gather (of fp8 values when
    ``fp8``) / bwd all-reduce or reduce-scatter of the bf16 input gradient, which runs
    beside the layer's weight-gradient GEMM (the GEMM before it in the backward list)
    under ``ctx.tp_async_backward``; ``column``: the next block is that layer (not a MoE
    router)."""
    if ctx.tp == 1:
        return [], []
    full = _tp_full(ctx)
    beside = -1 if ctx.tp_async_backward and column else 0
    if ctx.sp:
        return [comm("tp_comm", "tp", f"{name}_ag", "all_gather", _tp_full(ctx, fp8))], [
            replace(comm("tp_comm", "tp", f"{name}_ag_bwd", "reduce_scatter", full), beside=beside)
        ]
    return [], [replace(comm("tp_comm", "tp", f"{name}_ar_bwd", "all_reduce", full), beside=beside)]


def _tp_exit(ctx: OpContext, name: str, fp8: bool = False) -> Block:
    """Megatron's ``g`` after a row-parallel layer: all-reduce, or SP reduce-scatter (its
    backward all-gathers the output gradient, in fp8 when ``fp8``)."""
    if ctx.tp == 1:
        return [], []
    full = _tp_full(ctx)
    if ctx.sp:
        return [comm("tp_comm", "tp", f"{name}_rs", "reduce_scatter", full)], [
            comm("tp_comm", "tp", f"{name}_rs_bwd", "all_gather", _tp_full(ctx, fp8))
        ]
    return [comm("tp_comm", "tp", f"{name}_ar", "all_reduce", full)], []


def _regather(ctx: OpContext, name: str, block: Block, fp8: bool = False) -> Block:
    """Under SP the column-parallel input is re-gathered in backward for the weight grad
    (the kept fp8 shard when ``fp8``), unless the framework keeps the gathered input
    (``ctx.tp_regather`` False); under ``ctx.tp_async_backward`` it runs beside the
    input-gradient GEMM (the GEMM after it in the backward list)."""
    if not (ctx.sp and ctx.tp > 1 and ctx.tp_regather):
        return block
    gather = comm("tp_comm", "tp", f"{name}_regather", "all_gather", _tp_full(ctx, fp8))
    gather = replace(gather, beside=1 if ctx.tp_async_backward else 0)
    return block[0], [gather, *block[1]]


def _norm(ctx: OpContext, name: str) -> Block:
    elements = ctx.local_tokens * ctx.model.hidden
    return elementwise(name, elements, 4, 6, flops_per=5, fused=ctx.fused_kernels)


def _residual(ctx: OpContext, name: str) -> Block:
    """Residual add, with the branch's dropout fused in (Megatron's bias-dropout-add)."""
    drop = ctx.model.dropout > 0
    fwd, bwd = (7, 11) if drop else (6, 6)
    return elementwise(name, ctx.local_tokens * ctx.model.hidden, fwd, bwd, fused=ctx.fused_kernels)


def _attention(ctx: OpContext) -> list[Block]:
    m, t, g = ctx.model, ctx.tp, ctx.fp8_gathers
    kv_rank = max(m.kv_heads // t, 1) * m.head_dim
    qkv = linear(ctx, "qkv", m.hidden, m.hidden // t + 2 * kv_rank, gathered_x=g)
    blocks = [
        _norm(ctx, "attn_norm"),
        _tp_enter(ctx, "attn", g),
        _regather(ctx, "qkv", qkv, g),
    ]
    if m.position == "rope":
        rope = ctx.tokens * (m.hidden // t + kv_rank)
        blocks.append(elementwise("rotary", rope, 4, 4, fused=ctx.fused_kernels))
    return [
        *blocks,
        *_core(ctx),
        linear(ctx, "attn_out", m.hidden // t, m.hidden, gathered_dy=g),
        _tp_exit(ctx, "attn", g),
        _residual(ctx, "attn_residual"),
    ]


def _mlp_body(
    ctx: OpContext, tokens: float, prefix: str = "mlp", gathered: bool = False
) -> list[Block]:
    """Up projection, activation, down projection; ``gathered``: the input and the output
    gradient arrive by fp8 sequence-parallel all-gathers."""
    m, t = ctx.model, ctx.tp
    f_rank = m.ffn_hidden // t
    up = 2 * f_rank if m.gated_mlp else f_rank
    up_proj = linear(ctx, f"{prefix}_up", m.hidden, up, tokens=tokens, gathered_x=gathered)
    act = (
        elementwise(f"{prefix}_swiglu", tokens * f_rank, 6, 10, 8, ctx.fused_kernels)
        if m.gated_mlp
        else elementwise(f"{prefix}_gelu", tokens * f_rank, 4, 6, 8, ctx.fused_kernels)
    )
    return [
        _regather(ctx, f"{prefix}_up", up_proj, gathered),
        act,
        linear(ctx, f"{prefix}_down", f_rank, m.hidden, tokens=tokens, gathered_dy=gathered),
    ]


def tokens_per_expert(ctx: OpContext, ep: int) -> float:
    """Tokens each local expert processes per micro-batch, with perfect balance.

    The ``ep`` ranks of a group send ``b s top_k`` token copies each, spread over
    ``experts`` experts: ``b s top_k ep / experts``.
    """
    m = ctx.model
    return ctx.tokens * m.top_k * ep / m.experts


def _moe(ctx: OpContext) -> list[Block]:
    """Router, dispatch all-to-all, local experts (``b s top_k`` tokens), combine."""
    m = ctx.model
    routed = ctx.tokens * m.top_k
    # each rank exchanges its routed token copies within its EP group
    a2a = ACT_BYTES * routed * m.hidden
    dispatch = comm("ep_comm", "ep", "moe_dispatch", "all_to_all", a2a)
    combine = comm("ep_comm", "ep", "moe_combine", "all_to_all", a2a)
    return [
        linear(ctx, "router", m.hidden, m.experts, dtype=ctx.half),
        ([dispatch], [replace(dispatch, name="moe_dispatch_bwd")]),
        *_mlp_body(ctx, routed, prefix="expert"),
        ([combine], [replace(combine, name="moe_combine_bwd")]),
    ]


def _mlp(ctx: OpContext) -> list[Block]:
    # a dense MLP's gathers feed fp8 GEMMs; a MoE layer's feed the bf16 router
    g = ctx.fp8_gathers and not ctx.model.moe
    body = _moe(ctx) if ctx.model.moe else _mlp_body(ctx, ctx.tokens, gathered=g)
    return [
        _norm(ctx, "mlp_norm"),
        _tp_enter(ctx, "mlp", g, column=not ctx.model.moe),
        *body,
        _tp_exit(ctx, "mlp", g),
        _residual(ctx, "mlp_residual"),
    ]


def _torch_mms(ctx: OpContext, op: Op) -> list[Op]:
    """``op`` (a GEMM of the op list) as the ``aten.mm`` calls torchtitan's Llama makes,
    in call order: the fused QKV projection is ``wq``, ``wk``, ``wv``; a gated MLP's
    up projection is ``w1`` then ``w3``; any other GEMM is one call."""
    m, n, k, batch = op.shape
    cols: tuple[float, ...]
    if op.name == "qkv":
        kv = max(ctx.model.kv_heads // ctx.tp, 1) * ctx.model.head_dim
        cols = (n - 2 * kv, kv, kv)
    elif op.name.endswith("_up") and ctx.model.gated_mlp:
        cols = (n / 2, n / 2)
    else:
        return [op]
    return [_gemm(f"{op.name}_{i}", m, c, k, op.dtype, batch) for i, c in enumerate(cols)]


def _op_sac_recompute(ctx: OpContext, fwd: list[Op]) -> list[Op]:
    """What torchtitan's per-op selective activation checkpointing runs again in the
    backward of one block: the whole forward but the ops whose outputs it saves.

    ``torchtitan/distributed/activation_checkpoint.py`` (``_save_list``, ``_custom_policy``
    at 9dec370a and b5bcd76c) saves the outputs of ``aten.mm`` (but every second one in
    call order), of SDPA's flash and memory-efficient kernels, of reduce-scatters and of
    ``aten.max`` (fp8 amax); everything else is PREFER_RECOMPUTE, so the recompute pass
    re-runs the norms, rotary, activations, residual adds, casts and all-gathers, and
    the even-numbered matmuls (``wk``, ``wo``, ``w3`` of a Llama block).
    """
    core = {o for f, _ in _core(ctx) for o in f}
    out: list[Op] = []
    mm = 0
    for op in fwd:
        if op in core or op.comm_op == "reduce_scatter":
            continue
        if op.cls != "gemm" or op.kind != "compute":
            out.append(op)
            continue
        for call in _torch_mms(ctx, op):
            mm += 1
            if mm % 2 == 0:
                out.append(call)
    return out


def _until_last_needed(fwd: list[Op], redo: list[Op]) -> list[Op]:
    """``redo`` without the block's trailing ops, which an early-stopping recompute never
    reaches: the last matmul of the forward and everything after it (its reduce-scatter,
    the residual add) produce nothing the backward saved (a matmul's backward needs its
    inputs, an add's nothing). The casts before that matmul stay: they make its inputs."""
    last = max((i for i, o in enumerate(fwd) if o.cls == "gemm" and o.kind == "compute"),
               default=len(fwd))  # fmt: skip
    tail = set(fwd[last:])
    return [o for o in redo if o not in tail]


def _as_recompute(ops: list[Op]) -> list[Op]:
    return [replace(o, name=f"recompute_{o.name}", recompute=True) for o in ops]


def _assemble(blocks: list[Block], recompute: list[Op]) -> LayerOps:
    fwd = [o for f, _ in blocks for o in f]
    bwd = [o for _, b in reversed(blocks) for o in b]
    return LayerOps(tuple(fwd), tuple(recompute + bwd))


def layer_ops(ctx: OpContext) -> LayerOps:
    """Ops of one transformer layer for one micro-batch on one rank.

    >>> from sim.workload.models import megatron_gpt
    >>> ctx = OpContext(megatron_gpt(1024, 2, heads=16), micro_batch=1, seq=512)
    >>> ops = layer_ops(ctx)
    >>> ops.model_flops == 3 * (24 * 512 * 1024**2 + 4 * 512**2 * 1024)
    True
    """
    blocks = _attention(ctx) + _mlp(ctx)
    fwd = [o for f, _ in blocks for o in f]
    if ctx.recompute == "full":
        redo = list(fwd)
    elif ctx.recompute == "selective" and ctx.selective == "op":
        redo = _op_sac_recompute(ctx, fwd)
    elif ctx.recompute == "selective":
        redo = [o for f, _ in _core(ctx) for o in f]
    else:
        redo = []
    if ctx.early_stop:
        redo = _until_last_needed(fwd, redo)
    layer = _assemble(blocks, _as_recompute(redo))
    params = layer_params(ctx.model) / ctx.tp
    if ctx.grad_cast_bytes > 0:  # the layer's gradients cast to the reduction dtype
        cast = Op("grad_cast", flops=params, bytes=params * ctx.grad_cast_bytes)
        layer = LayerOps(layer.fwd, (*layer.bwd, cast))
    if ctx.grad_accum_bytes > 0:  # fresh weight gradients added into the gradient buffer:
        # one contiguous add per parameter, a bandwidth-bound kernel (stream_eff)
        accum = Op("grad_accumulate", flops=params, bytes=params * ctx.grad_accum_bytes,
                   cls="stream")  # fmt: skip
        layer = LayerOps(layer.fwd, (*layer.bwd, accum))
    return layer


def embedding_ops(ctx: OpContext) -> LayerOps:
    """First-stage ops: vocab-parallel embedding lookup (+ positions), TP reduction."""
    m = ctx.model
    elements = ctx.tokens * m.hidden
    # lookup writes rows; its backward accumulates rows into the fp32 weight gradient
    blocks: list[Block] = [elementwise("embedding", elements, 4, 10, flops_per=0)]
    if m.position == "learned":
        blocks.append(elementwise("position_add", elements, 6, 10))
    if m.dropout > 0:
        blocks.append(elementwise("embedding_dropout", elements, 5, 5))
    if ctx.tp > 1:  # each rank holds V/t rows; partial embeddings are summed over TP
        op = "reduce_scatter" if ctx.sp else "all_reduce"
        fwd = comm("tp_comm", "tp", f"embedding_{op}", op, ACT_BYTES * elements)
        back = "all_gather" if ctx.sp else None
        bwd = [replace(fwd, name=f"embedding_{back}_bwd", comm_op=back)] if back else []
        blocks.append(([fwd], bwd))
    return _assemble(blocks, [])


def head_ops(ctx: OpContext) -> LayerOps:
    """Last-stage ops: final norm, vocab-parallel logits, cross-entropy over the vocabulary."""
    m = ctx.model
    v_rank = m.vocab // ctx.tp if m.vocab % ctx.tp == 0 else m.vocab / ctx.tp
    logits = ctx.tokens * v_rank
    blocks = [
        _norm(ctx, "final_norm"),
        _tp_enter(ctx, "logits"),
        _regather(ctx, "logits", linear(ctx, "logits", m.hidden, v_rank, dtype=ctx.half)),
        elementwise("cross_entropy", logits, *CE_BYTES[ctx.cross_entropy], flops_per=5),
    ]
    if ctx.tp > 1:  # max, sum of exponentials and target logit, fp32, across TP
        stats = comm("tp_comm", "tp", "cross_entropy_ar", "all_reduce", 3 * 4 * ctx.tokens)
        blocks.append(([stats], []))
    return _assemble(blocks, [])


def chunk_ops(ctx: OpContext, layers: int, first: bool, last: bool) -> LayerOps:
    """All ops of one pipeline chunk: embedding if ``first``, ``layers`` layers, head if ``last``.

    >>> from sim.workload.models import model_preset
    >>> ctx = OpContext(model_preset("gpt2-124m"), micro_batch=1, seq=1024)
    >>> len(chunk_ops(ctx, 2, True, False).fwd) == len(embedding_ops(ctx).fwd) + 2 * len(
    ...     layer_ops(ctx).fwd)
    True
    """
    layer = layer_ops(ctx)
    fwd, bwd = list(layer.fwd * layers), list(layer.bwd * layers)
    if first:
        emb = embedding_ops(ctx)
        fwd, bwd = list(emb.fwd) + fwd, bwd + list(emb.bwd)
    if last:
        head = head_ops(ctx)
        fwd, bwd = fwd + list(head.fwd), list(head.bwd) + bwd
    return LayerOps(tuple(fwd), tuple(bwd))
