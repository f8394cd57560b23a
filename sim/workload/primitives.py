"""The kernels a layer is made of: GEMMs by shape, fused attention, memory-bound kernels,
fp8 casts and TP/EP collectives, each with its forward and backward.

Everything is per micro-batch per rank. Byte counts are HBM traffic, read plus written,
in bytes per element of the tensor the kernel walks (bf16/fp16 activations: 2 bytes):

============================  ==========  ==========  ===================================
kernel                        forward     backward    what is read and written
============================  ==========  ==========  ===================================
LayerNorm / RMSNorm           4           6           x -> y; dy, x -> dx
residual add                  6           6           a, b -> y; dy, dbranch -> dx
  + dropout (p > 0)           +1          +5          mask written; dy, mask -> dbranch
GeLU (per FFN element)        4           6           x -> y; dy, x -> dx
SwiGLU (per output element)   6           10          gate, up -> y; dy, gate, up -> both
rotary (per q and k element)  4           4           in place
softmax, unfused (per s^2)    4           6           scores -> probs; dy, probs -> dx
attention dropout (per s^2)   5           5           probs -> out + mask
cross-entropy (per logit)     14          22          bf16 -> fp32, log-softmax, NLL
fp8 cast (+ transpose)        4           4           bf16 -> fp8 twice (row, column)
============================  ==========  ==========  ===================================

Counted FLOPs follow Megatron-LM's convention (``2 M N K`` per GEMM, the full ``s x s``
attention square, backward = 2 x forward); the compute model times what kernels execute
(:mod:`sim.training.compute.kernels`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.workload.models import ModelSpec

__all__ = [
    "ACT_BYTES",
    "ATTENTION_KERNELS",
    "CONV_STACKS",
    "Block",
    "Op",
    "OpContext",
    "attention_core",
    "comm",
    "elementwise",
    "linear",
]

ACT_BYTES = 2  # bf16/fp16 activations and gradients on the wire and in HBM
#: Fused-attention kernel families (``training.attention_kernel``; timed by
#: :mod:`sim.training.compute.attention`), plus ``fitted``: the parametric model of the
#: compute entry (``attn_eff_max``) whatever the kernel.
ATTENTION_KERNELS = ("fa2", "fa3", "cudnn", "triton", "fa_triton", "fitted")
#: Framework stacks that run a CNN's convolutions (``training.conv_stack``; their factors:
#: :mod:`sim.training.compute.conv_stacks`), the first the default.
CONV_STACKS = ("pytorch", "tensorflow", "xla")
#: Cross-entropy HBM bytes per logit element (forward, backward): eager fp32 (cast, log-
#: softmax, NLL and their backward) or one fused kernel over bf16 logits, in place.
CE_BYTES = {"fp32": (14, 22), "fused": (2, 4)}
FP8_CAST_BYTES = 4  # read bf16 (2), write fp8 row-major and transposed (1 + 1)
#: A sequence-parallel fp8 operand is cast on this rank's shard before its all-gather
#: (read bf16 2, write fp8 1) and transposed for the other GEMM once gathered (read fp8 1,
#: write 1): Transformer Engine ``grad_output_preprocess`` ("cast, transpose for
#: efficient gather"), torchao ``Float8ColwiseParallel``/``Float8RowwiseParallel``.
FP8_SHARD_CAST_BYTES, FP8_TRANSPOSE_BYTES = 3, 2


@dataclass(frozen=True)
class Op:
    """One kernel or collective of one rank for one micro-batch.

    Attributes
    ----------
    name : str
        E.g. ``"qkv"``, ``"mlp_down_wgrad"``, ``"recompute_attn_core"``, ``"attn_rs"``.
    kind : str
        ``"compute"``, ``"tp_comm"``, ``"ep_comm"`` or ``"cp_comm"`` (the ring attention's
        K/V transfers, ``shape[0]`` steps of ``comm_bytes`` each).
    flops : float
        FLOPs counted for this op (Megatron's convention; see the module docstring).
    bytes : float
        HBM bytes read plus written.
    comm_op : str or None
        Collective name from :data:`sim.collectives.schedule.OPS` for communication ops.
    comm_bytes : float
        Collective size in bytes (nccl-tests convention).
    group : str or None
        Group the collective runs in: ``"tp"`` or ``"ep"``.
    matmul : bool
        Tensor-core work counted towards MFU/HFU (GEMMs and attention).
    dtype : str
        Precision of the math: key into ``GpuSpec.peak_flops``.
    recompute : bool
        Part of activation recomputation (hardware FLOPs only).
    cls : str
        How the compute model times it: ``"gemm"``, ``"attn_fwd"``, ``"attn_bwd"``,
        ``"memory"`` (framework elementwise kernel) or ``"stream"`` (fused,
        bandwidth-tuned kernel).
    shape : tuple of float
        ``gemm``: ``(M, N, K, batch)``; attention: ``(b, heads, s, head_dim, causal)``.
    kernel : str
        Fused attention: the kernel family that runs it (``training.attention_kernel``);
        empty for every other op.
    beside : int
        A collective launched asynchronously beside a GEMM of the same unit: ``-1`` the
        nearest GEMM before it in the op list, ``1`` the nearest after it; 0 (every other
        op): on the critical path (:func:`sim.training.compute.passes.unit_cost`).
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
    cls: str = "memory"
    shape: tuple[float, ...] = ()
    kernel: str = ""
    beside: int = 0


@dataclass(frozen=True)
class OpContext:
    """What shapes one rank's ops: model, micro-batch, sequence and the split.

    ``precision`` is the dtype of the linear layers (``bf16``, ``fp16`` or ``fp8``); the
    attention core and the logits run in bf16 (fp16 under fp16). ``flash_attention``
    fuses scores, softmax and context in one kernel that never writes the ``s x s``
    scores to HBM. ``grad_cast_bytes`` > 0 adds, per layer backward, a cast of the
    layer's gradients to the reduction dtype (FSDP/ZeRO-2+ with fp32 reduction), in bytes
    per parameter. ``cross_entropy`` is the loss kernel (a key of :data:`CE_BYTES`).
    ``cp``: context-parallel ranks each holding ``seq / cp`` tokens of every sequence
    (:mod:`sim.workload.context`).
    ``fused_kernels``: the layer's norms, activations, residual adds (with dropout),
    rotary and softmax are fused bandwidth-tuned kernels (Megatron-LM, Transformer
    Engine) rather than eager framework kernels. ``attention_kernel``: the fused attention
    kernel family (:data:`ATTENTION_KERNELS`).
    ``grad_accum_bytes`` > 0 adds, per layer backward, the separate pass that adds the
    fresh weight gradients into the gradient buffer, in bytes per parameter averaged over
    the step's micro-batches (:func:`sim.training.graph.costs.grad_accum_bytes`).
    ``tp_regather``: under sequence parallelism a column-parallel layer's input is
    gathered again in backward for its weight gradient (Megatron-LM, Transformer Engine
    keep only the shard); False where the gathered input is kept instead (PyTorch
    DTensor's ``ColwiseParallel``, torchtitan).
    ``tp_async_backward``: a column-parallel layer's backward collectives run beside its
    GEMMs (the framework's ``tp_async_backward`` where TP communication is not otherwise
    overlapped): they are marked with :attr:`Op.beside`.
    ``selective``: what ``recompute="selective"`` recomputes: ``attention`` (Megatron: the
    attention core) or ``op`` (torchtitan's per-op SAC; :func:`sim.workload.ops.layer_ops`).
    ``early_stop``: the recompute stops once the backward's saved tensors are back, so a
    block's trailing ops (its last matmul and what follows it) are not re-run (PyTorch's
    non-reentrant checkpoint; the framework's ``recompute_early_stop``).
    """

    model: ModelSpec
    micro_batch: int
    seq: int
    tp: int = 1
    sp: bool = False
    recompute: str = "none"
    precision: str = "bf16"
    flash_attention: bool = True
    grad_cast_bytes: float = 0.0
    cross_entropy: str = "fp32"
    fused_kernels: bool = False
    cp: int = 1
    attention_kernel: str = "fitted"
    grad_accum_bytes: float = 0.0
    tp_regather: bool = True
    tp_async_backward: bool = False
    selective: str = "attention"
    early_stop: bool = False

    @property
    def tokens(self) -> int:
        """Tokens of one micro-batch on this rank, ``b * s / cp`` (context parallelism
        splits every sequence)."""
        return self.micro_batch * (self.seq // self.cp)

    @property
    def fp8_gathers(self) -> bool:
        """Sequence-parallel all-gathers feeding fp8 linear layers move fp8 (1 byte per
        element), each operand cast on its shard first (Transformer Engine with
        ``sequence_parallel``; torchao's float8 tensor-parallel styles)."""
        return self.precision == "fp8" and self.sp and self.tp > 1

    @property
    def local_tokens(self) -> float:
        """Tokens whose activations this rank holds between blocks (``b s / t`` with SP)."""
        return self.tokens / self.tp if self.sp else float(self.tokens)

    @property
    def half(self) -> str:
        """Dtype of the non-linear-layer math: ``fp16`` under fp16, else ``bf16``."""
        return "fp16" if self.precision == "fp16" else "bf16"


#: A forward element and what its backward does, before the backward list is reversed.
Block = tuple[list[Op], list[Op]]


def _gemm(name: str, m: float, n: float, k: float, dtype: str, batch: float = 1) -> Op:
    el = 1 if dtype == "fp8" else ACT_BYTES
    nbytes = batch * (el * (m * k + k * n) + ACT_BYTES * m * n)
    return Op(name, flops=2.0 * m * n * k * batch, bytes=nbytes, matmul=True, dtype=dtype,
              cls="gemm", shape=(m, n, k, batch))  # fmt: skip


def _cast(name: str, elements: float, nbytes: float = FP8_CAST_BYTES) -> Op:
    return Op(name, flops=elements, bytes=nbytes * elements, cls="stream")


def _operand_casts(ctx: OpContext, name: str, elements: float, gathered: bool) -> list[Op]:
    """The fp8 cast (and transpose) of one GEMM operand of ``elements`` values: one fused
    cast-transpose, or, for an operand that arrives by a sequence-parallel all-gather
    (``gathered``), a cast of this rank's shard and a transpose of the gathered fp8."""
    if not gathered:
        return [_cast(name, elements)]
    shard = elements / ctx.tp
    return [_cast(name, shard, FP8_SHARD_CAST_BYTES),
            _cast(f"{name}_transpose", elements, FP8_TRANSPOSE_BYTES)]  # fmt: skip


def linear(ctx: OpContext, name: str, k: int | float, n: float, dtype: str | None = None,
           tokens: float | None = None, gathered_x: bool = False,
           gathered_dy: bool = False) -> Block:  # fmt: skip
    """A linear layer: ``tokens x k`` input times a ``k x n`` per-rank weight.

    Backward is two GEMMs of the forward's size: the input gradient ``(M, K, N)`` and
    the weight gradient ``(K, N, M)``. Under fp8 (Transformer Engine's recipe) the
    input, the weight and the output gradient are cast (with transposes) first; an input
    (``gathered_x``) or output gradient (``gathered_dy``) that a sequence-parallel
    all-gather brings is cast on the shard before the gather, in fp8 on the wire
    (:data:`FP8_SHARD_CAST_BYTES`).
    """
    m = float(ctx.tokens if tokens is None else tokens)
    dt = dtype or ctx.precision
    fwd = [_gemm(name, m, n, k, dt)]
    bwd = [_gemm(f"{name}_dgrad", m, k, n, dt), _gemm(f"{name}_wgrad", k, n, m, dt)]
    if dt == "fp8":
        x = _operand_casts(ctx, f"{name}_cast_x", m * k, gathered_x)
        fwd = [*x, _cast(f"{name}_cast_w", k * n), *fwd]
        bwd = [*_operand_casts(ctx, f"{name}_cast_dy", m * n, gathered_dy), *bwd]
    return fwd, bwd


def elementwise(name: str, elements: float, fwd_bytes: float, bwd_bytes: float,
                flops_per: float = 1.0, fused: bool = False) -> Block:  # fmt: skip
    """A memory-bound kernel over ``elements`` values, with its backward kernel.

    ``fused``: a bandwidth-tuned fused kernel (class ``stream``), as Megatron-LM's fused
    LayerNorm, bias-GeLU, bias-dropout-add and scaled-masked-softmax kernels are.
    """
    cls = "stream" if fused else "memory"
    fwd = Op(name, flops=flops_per * elements, bytes=fwd_bytes * elements, cls=cls)
    bwd = replace(fwd, name=f"{name}_bwd", flops=2 * fwd.flops, bytes=bwd_bytes * elements)
    return [fwd], [bwd] if bwd_bytes else []


def comm(kind: str, group: str, name: str, op: str, nbytes: float) -> Op:
    """A collective of ``nbytes`` (nccl-tests size) in the rank's ``group``."""
    return Op(name, kind=kind, comm_op=op, comm_bytes=nbytes, group=group)


def attention_core(ctx: OpContext) -> list[Block]:
    """Scores, softmax and context: one fused kernel, or GEMMs and softmax kernels.

    Counted FLOPs are the full square, ``4 b s^2 h / t`` forward; a fused kernel
    executes less under the causal mask (see :mod:`sim.training.compute.kernels`).
    """
    m, b, s, t = ctx.model, ctx.micro_batch, ctx.seq, ctx.tp
    h_rank, heads_rank, d = m.hidden // t, m.heads // t, m.head_dim
    kv_rank = max(m.kv_heads // t, 1) * d
    counted = 4.0 * b * s * s * h_rank
    qkvo = ACT_BYTES * b * s * (2 * h_rank + 2 * kv_rank)
    shape = (float(b), float(heads_rank), float(s), float(d), 1.0)
    if ctx.flash_attention:
        fwd = Op("attn_core", flops=counted, bytes=qkvo, matmul=True, dtype=ctx.half,
                 cls="attn_fwd", shape=shape, kernel=ctx.attention_kernel)  # fmt: skip
        bwd = replace(fwd, name="attn_core_bwd", flops=2 * counted, bytes=2 * qkvo,
                      cls="attn_bwd")  # fmt: skip
        return [([fwd], [bwd])]
    batch, probs = float(b * heads_rank), float(b * heads_rank * s * s)
    scores = ([_gemm("attn_scores", s, s, d, ctx.half, batch)],
              [_gemm("attn_scores_dgrad_q", s, d, s, ctx.half, batch),
               _gemm("attn_scores_dgrad_k", s, d, s, ctx.half, batch)])  # fmt: skip
    context = ([_gemm("attn_context", s, d, s, ctx.half, batch)],
               [_gemm("attn_context_dgrad_p", s, s, d, ctx.half, batch),
                _gemm("attn_context_dgrad_v", s, d, s, ctx.half, batch)])  # fmt: skip
    fused = ctx.fused_kernels
    blocks = [scores, elementwise("attn_softmax", probs, 4, 6, flops_per=5, fused=fused)]
    if m.dropout > 0:
        blocks.append(elementwise("attn_dropout", probs, 5, 5, fused=fused))
    return [*blocks, context]
