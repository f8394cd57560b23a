"""Per-rank ops of a transformer: FLOPs, HBM bytes and the TP/EP communication they imply.

Everything is per micro-batch per rank under tensor parallelism ``t`` (and sequence
parallelism). Counting conventions (Megatron-LM's, so MFU/HFU compare with its papers):

- A matmul of ``(M x K) @ (K x N)`` is ``2 M K N`` FLOPs. Only matmuls (``Op.matmul``)
  count towards model/hardware FLOPs; norms, softmax, activations and residual adds
  carry bytes (they are memory-bound) and a nominal FLOP count that is never summed.
- Attention scores and context count the **full** ``s x s`` square: ``4 b s^2 h``
  forward, although a causal mask makes half of it useless. This is the count behind
  Megatron's ``96 B s l h^2 (1 + s/6h + V/16lh)``.
- Backward = 2 x forward FLOPs for every matmul (input and weight gradients).
- Recompute adds the recomputed forward, flagged ``Op.recompute``: ``full`` replays the
  whole layer forward (its TP communication included), ``selective`` only the attention
  core (Korthikanti et al. 2022). Model FLOPs exclude it, hardware FLOPs include it.
- Embedding lookups are 0 FLOPs; the logits projection is ``2 b s h V`` and is never
  recomputed.

Communication sizes follow nccl-tests' "size" (:mod:`sim.collectives.schedule`): the whole
buffer, in bytes, of bf16 activations (2 bytes per element).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.training.workload.models import ModelSpec
from sim.training.workload.plan import ParallelPlan

__all__ = [
    "ACT_BYTES",
    "LayerOps",
    "Op",
    "OpContext",
    "chunk_ops",
    "embedding_ops",
    "head_ops",
    "layer_ops",
    "tokens_per_expert",
]

ACT_BYTES = 2  # bf16 activations and gradients on the wire and in HBM


@dataclass(frozen=True)
class Op:
    """One kernel or collective of one rank for one micro-batch.

    Attributes
    ----------
    name : str
        E.g. ``"qkv"``, ``"mlp_down_bwd"``, ``"recompute_attn_core"``, ``"attn_rs"``.
    kind : str
        ``"compute"``, ``"tp_comm"`` or ``"ep_comm"``.
    flops : float
        FLOPs this rank executes (0 for communication).
    bytes : float
        HBM bytes read plus written by this rank (0 for communication).
    comm_op : str or None
        Collective name from :data:`sim.collectives.schedule.OPS` for communication ops.
    comm_bytes : float
        Collective size in bytes (nccl-tests convention).
    group : str or None
        Group the collective runs in: ``"tp"`` or ``"ep"`` (see :func:`plan.groups`).
    matmul : bool
        A tensor-core matmul (counts towards MFU/HFU); else an elementwise/reduction op.
    dtype : str
        Precision of the math: key into ``GpuSpec.peak_flops``.
    recompute : bool
        Part of activation recomputation (hardware FLOPs only).
    """

    name: str
    kind: str = "compute"
    flops: float = 0.0
    bytes: float = 0.0
    comm_op: str | None = None
    comm_bytes: float = 0.0
    group: str | None = None
    matmul: bool = False
    dtype: str = "bf16"
    recompute: bool = False


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


@dataclass(frozen=True)
class OpContext:
    """What shapes one rank's ops: model, micro-batch, sequence and the split.

    ``precision`` is the dtype of the linear layers (``bf16`` or ``fp8``); the attention
    core always runs in bf16. ``flash_attention`` fuses scores, softmax and context in one
    kernel that never writes the ``s x s`` scores to HBM.
    """

    model: ModelSpec
    micro_batch: int
    seq: int
    tp: int = 1
    sp: bool = False
    recompute: str = "none"
    precision: str = "bf16"
    flash_attention: bool = True

    @classmethod
    def from_plan(cls, model: ModelSpec, plan: ParallelPlan, seq: int,
                  precision: str = "bf16", flash_attention: bool = True) -> OpContext:  # fmt: skip
        """Context for ``plan`` (TP, SP, micro-batch, recompute)."""
        return cls(model, plan.micro_batch, seq, plan.tp, plan.sp, plan.recompute,
                   precision, flash_attention)  # fmt: skip

    @property
    def tokens(self) -> int:
        """Tokens of one micro-batch, ``b * s``."""
        return self.micro_batch * self.seq

    @property
    def local_tokens(self) -> float:
        """Tokens whose activations this rank holds between blocks (``b s / t`` with SP)."""
        return self.tokens / self.tp if self.sp else float(self.tokens)


# A forward element and what its backward does, before the backward list is reversed.
_Block = tuple[list[Op], list[Op]]


def _mm(ctx: OpContext, name: str, k: int, n: float, dtype: str | None = None,
        tokens: float | None = None) -> _Block:  # fmt: skip
    """A linear layer: ``tokens x k`` input times ``k x n`` per-rank weight."""
    m = ctx.tokens if tokens is None else tokens
    dt = dtype or ctx.precision
    el = 1 if dt == "fp8" else ACT_BYTES
    flops = 2 * m * k * n
    nbytes = el * (m * k + k * n) + ACT_BYTES * m * n
    fwd = Op(name, flops=flops, bytes=nbytes, matmul=True, dtype=dt)
    # dgrad and wgrad: two matmuls of the same size, each reading two operands.
    bwd = replace(fwd, name=f"{name}_bwd", flops=2 * flops, bytes=2 * nbytes)
    return [fwd], [bwd]


def _ew(name: str, elements: float, reads: int = 1, writes: int = 1, flops_per: int = 1) -> _Block:
    """An elementwise op over ``elements`` bf16 values (memory-bound)."""
    nbytes = ACT_BYTES * elements * (reads + writes)
    fwd = Op(name, flops=flops_per * elements, bytes=nbytes)
    bwd = replace(fwd, name=f"{name}_bwd", flops=2 * fwd.flops, bytes=2 * nbytes)
    return [fwd], [bwd]


def _comm(kind: str, group: str, name: str, op: str, nbytes: float) -> Op:
    return Op(name, kind=kind, comm_op=op, comm_bytes=nbytes, group=group)


def _tp_enter(ctx: OpContext, name: str) -> _Block:
    """Megatron's ``f`` before a column-parallel layer: SP all-gather / bwd all-reduce."""
    if ctx.tp == 1:
        return [], []
    full = ACT_BYTES * ctx.tokens * ctx.model.hidden
    if ctx.sp:
        return [_comm("tp_comm", "tp", f"{name}_ag", "all_gather", full)], [
            _comm("tp_comm", "tp", f"{name}_ag_bwd", "reduce_scatter", full)
        ]
    return [], [_comm("tp_comm", "tp", f"{name}_ar_bwd", "all_reduce", full)]


def _tp_exit(ctx: OpContext, name: str) -> _Block:
    """Megatron's ``g`` after a row-parallel layer: all-reduce, or SP reduce-scatter."""
    if ctx.tp == 1:
        return [], []
    full = ACT_BYTES * ctx.tokens * ctx.model.hidden
    if ctx.sp:
        return [_comm("tp_comm", "tp", f"{name}_rs", "reduce_scatter", full)], [
            _comm("tp_comm", "tp", f"{name}_rs_bwd", "all_gather", full)
        ]
    return [_comm("tp_comm", "tp", f"{name}_ar", "all_reduce", full)], []


def _regather(ctx: OpContext, name: str, block: _Block) -> _Block:
    """Under SP the column-parallel input is re-gathered in backward for the weight grad."""
    if not (ctx.sp and ctx.tp > 1):
        return block
    full = ACT_BYTES * ctx.tokens * ctx.model.hidden
    gather = _comm("tp_comm", "tp", f"{name}_regather", "all_gather", full)
    return block[0], [gather, *block[1]]


def _norm(ctx: OpContext, name: str) -> _Block:
    return _ew(name, ctx.local_tokens * ctx.model.hidden, flops_per=5)


def _attention_core(ctx: OpContext) -> list[_Block]:
    """Scores and context (the quadratic term), GQA-aware bytes."""
    m, b, s, t = ctx.model, ctx.micro_batch, ctx.seq, ctx.tp
    h_rank, heads_rank = m.hidden // t, m.heads // t
    kv_rank = max(m.kv_heads // t, 1) * m.head_dim
    half = 2 * b * s * s * h_rank  # FLOPs of scores (= of context), full s x s
    qkvo = ACT_BYTES * b * s * (2 * h_rank + 2 * kv_rank)
    if ctx.flash_attention:
        fwd = Op("attn_core", flops=2 * half, bytes=qkvo, matmul=True)
        return [([fwd], [replace(fwd, name="attn_core_bwd", flops=4 * half, bytes=2 * qkvo)])]
    probs = ACT_BYTES * b * heads_rank * s * s
    scores = Op("attn_scores", flops=half, bytes=qkvo / 2 + probs, matmul=True)
    context = Op("attn_context", flops=half, bytes=qkvo / 2 + probs, matmul=True)
    # softmax reads scores, writes probabilities and a dropout mask
    softmax = Op("attn_softmax", flops=5 * b * heads_rank * s * s, bytes=2.5 * probs)
    return [
        ([o], [replace(o, name=f"{o.name}_bwd", flops=2 * o.flops, bytes=2 * o.bytes)])
        for o in (scores, softmax, context)
    ]


def _attention(ctx: OpContext) -> list[_Block]:
    m, t = ctx.model, ctx.tp
    kv_rank = max(m.kv_heads // t, 1) * m.head_dim
    return [
        _norm(ctx, "attn_norm"),
        _tp_enter(ctx, "attn"),
        _regather(ctx, "qkv", _mm(ctx, "qkv", m.hidden, m.hidden // t + 2 * kv_rank)),
        *_attention_core(ctx),
        _mm(ctx, "attn_out", m.hidden // t, m.hidden),
        _tp_exit(ctx, "attn"),
        _ew("attn_residual", ctx.local_tokens * m.hidden, reads=2, writes=1),
    ]


def _mlp_body(ctx: OpContext, tokens: float, prefix: str = "mlp") -> list[_Block]:
    m, t = ctx.model, ctx.tp
    f_rank = m.ffn_hidden // t
    up = 2 * f_rank if m.gated_mlp else f_rank
    act = _ew(f"{prefix}_act", tokens * f_rank, reads=2 if m.gated_mlp else 1, flops_per=8)
    return [
        _regather(ctx, f"{prefix}_up", _mm(ctx, f"{prefix}_up", m.hidden, up, tokens=tokens)),
        act,
        _mm(ctx, f"{prefix}_down", f_rank, m.hidden, tokens=tokens),
    ]


def tokens_per_expert(ctx: OpContext, ep: int) -> float:
    """Tokens each local expert processes per micro-batch, with perfect balance.

    The ``ep`` ranks of a group send ``b s top_k`` token copies each, spread over
    ``experts`` experts: ``b s top_k ep / experts``.
    """
    m = ctx.model
    return ctx.tokens * m.top_k * ep / m.experts


def _moe(ctx: OpContext) -> list[_Block]:
    """Router, dispatch all-to-all, local experts (``b s top_k`` tokens), combine."""
    m = ctx.model
    routed = ctx.tokens * m.top_k
    # each rank exchanges its routed token copies within its EP group
    a2a = ACT_BYTES * routed * m.hidden
    dispatch = _comm("ep_comm", "ep", "moe_dispatch", "all_to_all", a2a)
    combine = _comm("ep_comm", "ep", "moe_combine", "all_to_all", a2a)
    return [
        _mm(ctx, "router", m.hidden, m.experts, dtype="bf16"),
        ([dispatch], [replace(dispatch, name="moe_dispatch_bwd")]),
        *_mlp_body(ctx, routed, prefix="expert"),
        ([combine], [replace(combine, name="moe_combine_bwd")]),
    ]


def _mlp(ctx: OpContext) -> list[_Block]:
    body = _moe(ctx) if ctx.model.moe else _mlp_body(ctx, ctx.tokens)
    return [
        _norm(ctx, "mlp_norm"),
        _tp_enter(ctx, "mlp"),
        *body,
        _tp_exit(ctx, "mlp"),
        _ew("mlp_residual", ctx.local_tokens * ctx.model.hidden, reads=2, writes=1),
    ]


def _as_recompute(ops: list[Op]) -> list[Op]:
    return [replace(o, name=f"recompute_{o.name}", recompute=True) for o in ops]


def _assemble(blocks: list[_Block], recompute: list[Op]) -> LayerOps:
    fwd = [o for f, _ in blocks for o in f]
    bwd = [o for _, b in reversed(blocks) for o in b]
    return LayerOps(tuple(fwd), tuple(recompute + bwd))


def layer_ops(ctx: OpContext) -> LayerOps:
    """Ops of one transformer layer for one micro-batch on one rank.

    >>> from sim.training.workload.models import megatron_gpt
    >>> ctx = OpContext(megatron_gpt(1024, 2, heads=16), micro_batch=1, seq=512)
    >>> ops = layer_ops(ctx)
    >>> ops.model_flops == 3 * (24 * 512 * 1024**2 + 4 * 512**2 * 1024)
    True
    """
    blocks = _attention(ctx) + _mlp(ctx)
    fwd = [o for f, _ in blocks for o in f]
    if ctx.recompute == "full":
        recompute = _as_recompute(fwd)
    elif ctx.recompute == "selective":
        core = [o for f, _ in _attention_core(ctx) for o in f]
        recompute = _as_recompute(core)
    else:
        recompute = []
    return _assemble(blocks, recompute)


def embedding_ops(ctx: OpContext) -> LayerOps:
    """First-stage ops: vocab-parallel embedding lookup (+ positions), TP reduction."""
    m = ctx.model
    elements = ctx.tokens * m.hidden
    blocks: list[_Block] = [_ew("embedding", elements, reads=1, writes=1, flops_per=0)]
    if m.position == "learned":
        blocks.append(_ew("position_add", elements, reads=2, writes=1))
    if ctx.tp > 1:  # each rank holds V/t rows; partial embeddings are summed over TP
        op = "reduce_scatter" if ctx.sp else "all_reduce"
        fwd = _comm("tp_comm", "tp", f"embedding_{op}", op, ACT_BYTES * elements)
        back = "all_gather" if ctx.sp else None
        bwd = [replace(fwd, name=f"embedding_{back}_bwd", comm_op=back)] if back else []
        blocks.append(([fwd], bwd))
    return _assemble(blocks, [])


def head_ops(ctx: OpContext) -> LayerOps:
    """Last-stage ops: final norm, vocab-parallel logits, cross-entropy (fp32 statistics)."""
    m = ctx.model
    v_rank = m.vocab // ctx.tp if m.vocab % ctx.tp == 0 else m.vocab / ctx.tp
    blocks = [
        _norm(ctx, "final_norm"),
        _tp_enter(ctx, "logits"),
        _regather(ctx, "logits", _mm(ctx, "logits", m.hidden, v_rank, dtype="bf16")),
        _ew("cross_entropy", ctx.tokens * v_rank, reads=2, writes=1, flops_per=5),
    ]
    if ctx.tp > 1:  # max, sum of exponentials and target logit, fp32, across TP
        stats = _comm("tp_comm", "tp", "cross_entropy_ar", "all_reduce", 3 * 4 * ctx.tokens)
        blocks.append(([stats], []))
    return _assemble(blocks, [])


def chunk_ops(ctx: OpContext, layers: int, first: bool, last: bool) -> LayerOps:
    """All ops of one pipeline chunk: embedding if ``first``, ``layers`` layers, head if ``last``.

    >>> from sim.training.workload.models import model_preset
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
