"""How long one kernel takes on one GPU: GEMMs by shape, attention, memory-bound kernels.

Each op of the workload (:class:`sim.workload.primitives.Op`) names its class
and shape; this module turns it into seconds with the GPU's catalog parameters
(:class:`sim.training.compute.params.ComputeParams`). Tensor-core kernels run at the
micro-benchmark rates times ``sustained_clock`` (the clock a long power-limited stream
sustains, relative to the benchmark's) times ``matmul_training_factor`` (a residual
fitted end to end where the clock was not measured): together the *sustain* factor.

- **GEMM** ``(M, N, K, batch)``: ``2 M N K batch`` FLOPs at
  ``peak[dtype] * matmul_eff_max * sustain * shape_eff / shape_eff(anchor)``, where
  ``shape_eff`` is the product of wave quantization (output tiles of ``gemm_tile`` run in
  waves of ``sm_count``; the better of the two orientations; a GEMM with fewer tiles than
  SMs splits K into up to ``sm_count // tiles`` slices of at least :data:`SPLIT_K_MIN`, as
  cuBLAS's split-K kernels do), the main-loop ramp ``K_slice / (K_slice +
  matmul_k_half)`` and the fixed cost ``F / (F + matmul_half_flops)``. The anchor is the
  shape at which the micro-benchmark ceiling of that dtype was measured (``mamf_shape``,
  ``fp8_mamf_shape``), so the model reproduces that measurement there. A GEMM never runs faster than its operands and
  result move through HBM at ``stream_eff`` (the roofline's memory side).
- **Attention** (fused, flash-style) ``(b, heads, s, head_dim, causal)`` of a kernel
  family (``fa2``, ``fa3``, ``cudnn``, ``triton``): the published benchmark rate of that
  family at that head dim, length and mask (:mod:`sim.training.compute.attention`), on
  the benchmarks' FLOP convention, times the sustain factor. GPUs without published
  tables, and family ``fitted``, use the parametric model: the forward executes
  ``4 b heads s^2 d`` FLOPs with ``d`` padded to a multiple of 32, times ``(s + 128) / 2s``
  under a causal mask; the backward 2.5 times the forward; rate ``peak * attn_eff_max *
  sustain * s/(s+attn_seq_half) * d/(d+attn_head_dim_half)``, times ``attn_bwd_ratio``
  for the backward.
- **Memory-bound** (norms, activations, dropout, residual adds, rotary, softmax,
  cross-entropy): ``max(bytes / (hbm_Bps * mem_eff * mem_training_factor),
  flops / (peak[vector_dtype] * vector_eff))`` (:func:`eager_mem_eff`); fused
  bandwidth-tuned kernels (fp8 cast-transpose, the optimizer step, class ``"stream"``)
  move bytes at ``stream_eff`` instead.

Every kernel adds ``launch_overhead_s``.

Whole layers of layer-list models without a convolution shape use
:func:`roofline_time_s` (FLOPs at the shape-free GEMM ceiling, bytes at :func:`eager_mem_eff`);
convolutions with a shape are timed by :mod:`sim.training.compute.conv`.

>>> from sim.catalog import gpu_spec
>>> from sim.training.compute.params import compute_params
>>> gpu, p = gpu_spec("H100-SXM"), compute_params("H100-SXM")
>>> m, n, k = p.mamf_shape
>>> t = gemm_time_s(m, n, k, 1, "bf16", gpu, p) - p.launch_overhead_s
>>> round(2 * m * n * k / t / 1e12 / sustain(p), 1)  # mamf-finder's 794.5
794.5
"""

from __future__ import annotations

import math

from sim.catalog import GpuSpec
from sim.errors import ConfigError
from sim.training.compute.attention import attention_fraction, convention_flops
from sim.training.compute.params import ComputeParams
from sim.workload.primitives import Op

__all__ = [
    "CAUSAL_BLOCK",
    "ELEMENT_BYTES",
    "HEAD_DIM_STEP",
    "SPLIT_K_MIN",
    "attention_executed_flops",
    "attention_time_s",
    "eager_mem_eff",
    "gemm_compute_s",
    "gemm_io_bytes",
    "gemm_shape_eff",
    "gemm_time_s",
    "matmul_eff_max",
    "memory_time_s",
    "op_time_s",
    "roofline_time_s",
    "sustain",
]

#: Attention tile on the diagonal that a causal kernel computes in full (FlashAttention-2).
CAUSAL_BLOCK = 128
#: Head sizes fused attention kernels are compiled for are multiples of this.
HEAD_DIM_STEP = 32
#: Smallest K slice a split-K GEMM gives one CTA (assumption: 4 main-loop tiles of 128).
SPLIT_K_MIN = 512
#: Bytes per element of GEMM operands by dtype (the result is written in 2 bytes, 4 in fp32).
ELEMENT_BYTES = {"fp8": 1, "bf16": 2, "fp16": 2, "fp32": 4, "tf32": 4}


def sustain(p: ComputeParams) -> float:
    """Fraction of the micro-benchmark rate tensor-core kernels sustain in training:
    ``sustained_clock * matmul_training_factor`` (no units)."""
    return p.sustained_clock * p.matmul_training_factor


def eager_mem_eff(p: ComputeParams) -> float:
    """Fraction of HBM bandwidth eager framework elementwise kernels reach in a training
    step: ``mem_eff * mem_training_factor`` (no units).

    >>> from sim.training.compute.params import compute_params
    >>> p = compute_params("H100-SXM")
    >>> eager_mem_eff(p) == p.mem_eff * p.mem_training_factor
    True
    """
    return p.mem_eff * p.mem_training_factor


def peak_flops(gpu: GpuSpec, dtype: str) -> float:
    """Dense peak of ``gpu`` in ``dtype``; ConfigError naming what the GPU has."""
    try:
        return gpu.peak_flops[dtype]
    except KeyError:
        raise ConfigError(
            f"training.precision: {gpu.name} has no {dtype} peak; it has "
            f"{', '.join(sorted(gpu.peak_flops))}"
        ) from None


def _split_k(tiles: float, k: float, sms: int) -> int:
    """K slices of a GEMM with fewer output tiles than SMs (split-K), else 1."""
    if tiles >= sms:
        return 1
    return max(1, min(int(sms // tiles), int(k // SPLIT_K_MIN)))


def _waves_eff(rows: float, cols: float, batch: float, tile: tuple[int, int], sms: int,
               k: float) -> tuple[float, float]:  # fmt: skip
    """(fraction of the SM slots the tiles fill, K of one slice)."""
    tiles = batch * math.ceil(rows / tile[0]) * math.ceil(cols / tile[1])
    split = _split_k(tiles, k, sms)
    tiles *= split
    return tiles / (math.ceil(tiles / sms) * sms), k / split


def gemm_shape_eff(m: float, n: float, k: float, batch: float, p: ComputeParams) -> float:
    """Fraction of the GEMM ceiling reached by shape ``(m, n, k)`` x ``batch`` (no units).

    >>> from sim.training.compute.params import compute_params
    >>> p = compute_params("H100-SXM")
    >>> gemm_shape_eff(8192, 8192, 8192, 1, p) > gemm_shape_eff(8192, 8192, 512, 1, p)
    True
    """
    tile, sms = p.gemm_tile, p.sm_count
    waves, k_slice = max(
        _waves_eff(m, n, batch, tile, sms, k), _waves_eff(n, m, batch, tile, sms, k)
    )
    flops = 2.0 * m * n * k * batch
    return waves * k_slice / (k_slice + p.matmul_k_half) * flops / (flops + p.matmul_half_flops)


def _anchor_eff(p: ComputeParams, dtype: str) -> float:
    anchor = (p.fp8_mamf_shape or p.mamf_shape) if dtype == "fp8" else p.mamf_shape
    if anchor is None:
        return 1.0
    m, n, k = anchor
    return gemm_shape_eff(m, n, k, 1, p)


def matmul_eff_max(dtype: str, p: ComputeParams) -> float:
    """The GEMM ceiling (fraction of ``peak[dtype]``) of ``dtype``: ``fp8_matmul_eff_max``
    for fp8, ``fp32_matmul_eff_max`` for fp32 where measured (> 0), else ``matmul_eff_max``.

    >>> from sim.training.compute.params import compute_params
    >>> p = compute_params("H100-SXM")
    >>> matmul_eff_max("fp32", p) == p.matmul_eff_max
    True
    """
    if dtype == "fp8":
        return p.fp8_matmul_eff_max
    if dtype == "fp32" and p.fp32_matmul_eff_max > 0:
        return p.fp32_matmul_eff_max
    return p.matmul_eff_max


def gemm_io_bytes(m: float, n: float, k: float, batch: float, dtype: str) -> float:
    """HBM bytes a GEMM moves at least: both operands read once, the result written once.

    >>> gemm_io_bytes(2, 3, 4, 1, "bf16") == 2 * (2 * 4 + 4 * 3 + 2 * 3)
    True
    """
    el = ELEMENT_BYTES.get(dtype, 2)
    out = 4 if el == 4 else 2
    return batch * (el * (m * k + k * n) + out * m * n)


def gemm_time_s(m: float, n: float, k: float, batch: float, dtype: str, gpu: GpuSpec,
                p: ComputeParams, eff: float = 1.0) -> float:  # fmt: skip
    """Seconds for ``batch`` GEMMs of ``(m x k) @ (k x n)`` in ``dtype`` (launch included).

    ``eff`` scales the compute rate (a convolution's implicit GEMM: ``conv_eff``).
    """
    if m <= 0 or n <= 0 or k <= 0 or batch <= 0:
        return p.launch_overhead_s
    memory = gemm_io_bytes(m, n, k, batch, dtype) / (gpu.hbm_Bps * p.stream_eff)
    return max(gemm_compute_s(m, n, k, batch, dtype, gpu, p, eff), memory) + p.launch_overhead_s


def gemm_compute_s(m: float, n: float, k: float, batch: float, dtype: str, gpu: GpuSpec,
                   p: ComputeParams, eff: float = 1.0) -> float:  # fmt: skip
    """Seconds the tensor cores spend on ``batch`` GEMMs of ``(m x k) @ (k x n)`` (the
    roofline's compute side: no memory bound, no launch)."""
    eff_max = matmul_eff_max(dtype, p)
    if eff_max <= 0:
        raise ConfigError(f"training.precision: {gpu.name} has no {dtype} GEMM efficiency")
    shape = gemm_shape_eff(m, n, k, batch, p) / _anchor_eff(p, dtype)
    rate = peak_flops(gpu, dtype) * eff_max * sustain(p) * min(shape, 1.0) * eff
    return 2.0 * m * n * k * batch / rate


def attention_executed_flops(b: float, heads: float, s: float, d: float, causal: bool,
                             backward: bool) -> float:  # fmt: skip
    """FLOPs a fused attention kernel executes (not the counted ``4 b a s^2 d``).

    >>> attention_executed_flops(1, 1, 1024, 128, False, False) == 4 * 1024**2 * 128
    True
    >>> attention_executed_flops(1, 1, 1024, 128, True, True) / (4 * 1024**2 * 128)
    1.40625
    >>> attention_executed_flops(1, 1, 1024, 112, False, False) / (4 * 1024**2 * 112)
    1.1428571428571428
    """
    fwd = 4.0 * b * heads * s * s * (-(-d // HEAD_DIM_STEP) * HEAD_DIM_STEP)
    if causal:
        fwd *= min(1.0, (s + CAUSAL_BLOCK) / (2.0 * s))
    return fwd * (2.5 if backward else 1.0)


def attention_time_s(b: float, heads: float, s: float, d: float, causal: bool, backward: bool,
                     dtype: str, gpu: GpuSpec, p: ComputeParams,
                     kernel: str = "fitted") -> float:  # fmt: skip
    """Seconds of a fused attention forward (or backward) kernel (launch included).

    ``kernel``: the family (:data:`sim.training.compute.attention.FAMILIES`); timed from
    its published benchmarks where the GPU has a table (``attention_table``), else (and
    for ``fitted``) by the parametric model.
    """
    if kernel != "fitted" and p.attention_table is not None:
        d_run = -(-d // HEAD_DIM_STEP) * HEAD_DIM_STEP
        frac = attention_fraction(p.attention_table, kernel, d_run, s, causal, backward)
        if frac is not None:
            flops = convention_flops(b, heads, s, d_run, causal, backward)
            return flops / (peak_flops(gpu, dtype) * frac * sustain(p)) + p.launch_overhead_s
    eff = (
        p.attn_eff_max
        * sustain(p)
        * s / (s + p.attn_seq_half)
        * d / (d + p.attn_head_dim_half)
        * (p.attn_bwd_ratio if backward else 1.0)
        * (1.0 if _power_of_two(d) else p.attn_odd_head_dim_eff)
    )  # fmt: skip
    flops = attention_executed_flops(b, heads, s, d, causal, backward)
    return flops / (peak_flops(gpu, dtype) * eff) + p.launch_overhead_s


def _power_of_two(d: float) -> bool:
    n = int(d)
    return n == d and n > 0 and n & (n - 1) == 0


def memory_time_s(nbytes: float, flops: float, gpu: GpuSpec, p: ComputeParams,
                  fused: bool = False) -> float:  # fmt: skip
    """Seconds of a memory-bound kernel moving ``nbytes`` of HBM traffic (launch included).

    ``fused``: a bandwidth-tuned kernel (``stream_eff``) rather than a framework
    elementwise kernel (``mem_eff``).
    """
    vector = gpu.peak_flops.get(p.vector_dtype) or peak_flops(gpu, "bf16")
    eff = p.stream_eff if fused else eager_mem_eff(p)
    return max(nbytes / (gpu.hbm_Bps * eff), flops / (vector * p.vector_eff)) + (
        p.launch_overhead_s
    )


def op_time_s(op: Op, gpu: GpuSpec, p: ComputeParams) -> float:
    """Seconds compute ``op`` takes on ``gpu`` with parameters ``p``.

    Raises ValueError for a communication op (the engine times those).
    """
    if op.kind != "compute":
        raise ValueError(f"op {op.name!r} is communication ({op.kind}); the engine times it")
    if op.cls == "gemm":
        m, n, k, batch = op.shape
        return gemm_time_s(m, n, k, batch, op.dtype, gpu, p)
    if op.cls in ("attn_fwd", "attn_bwd"):
        b, heads, s, d, causal = op.shape
        return attention_time_s(b, heads, s, d, bool(causal), op.cls == "attn_bwd", op.dtype,
                                gpu, p, op.kernel or "fitted")  # fmt: skip
    return memory_time_s(op.bytes, op.flops, gpu, p, fused=op.cls == "stream")


def roofline_time_s(flops: float, nbytes: float, dtype: str, gpu: GpuSpec,
                    p: ComputeParams) -> float:  # fmt: skip
    """Seconds of one whole layer given only its FLOPs and HBM bytes (launch included).

    ``flops`` run at ``peak[dtype] * matmul_eff_max * sustain *
    F / (F + matmul_half_flops)`` (the GEMM ceiling, no shape); ``nbytes`` move at
    ``hbm_Bps * mem_eff``; the longer of the two counts.

    >>> from sim.catalog import gpu_spec
    >>> from sim.training.compute.params import compute_params
    >>> gpu, p = gpu_spec("H100-SXM"), compute_params("H100-SXM")
    >>> roofline_time_s(0, 0, "bf16", gpu, p) == p.launch_overhead_s
    True
    """
    eff_max = matmul_eff_max(dtype, p)
    compute_s = 0.0
    if flops > 0:
        eff = eff_max * sustain(p) * flops / (flops + p.matmul_half_flops)
        compute_s = flops / (peak_flops(gpu, dtype) * eff)
    return max(compute_s, nbytes / (gpu.hbm_Bps * eager_mem_eff(p))) + p.launch_overhead_s
