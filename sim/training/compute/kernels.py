"""How long one kernel takes on one GPU: GEMMs by shape, attention, memory-bound kernels.

Each op of the workload (:class:`sim.workload.primitives.Op`) names its class
and shape; this module turns it into seconds with the GPU's catalog parameters
(:class:`sim.training.compute.params.ComputeParams`):

- **GEMM** ``(M, N, K, batch)``: ``2 M N K batch`` FLOPs at
  ``peak[dtype] * matmul_eff_max * matmul_training_factor * shape_eff / shape_eff(anchor)``
  where ``shape_eff`` is the product of wave quantization (output tiles of
  ``gemm_tile`` run in waves of ``sm_count``; the better of the two orientations), the
  main-loop ramp ``K / (K + matmul_k_half)`` and the fixed cost
  ``F / (F + matmul_half_flops)``. The anchor is the shape at which the micro-benchmark
  ceiling was measured (``mamf_shape``), so the model reproduces that measurement there.
- **Attention** (fused, flash-style) ``(b, heads, s, head_dim, causal)``: the forward
  executes ``4 b heads s^2 d`` FLOPs with ``d`` padded to a multiple of 32 (the head
  sizes FlashAttention-2 compiles; 112 runs as 128), times ``(s + 128) / 2s`` under a causal mask
  (blocks above the diagonal are skipped, 128-wide blocks on it are not); the backward
  executes 2.5 times the forward (it recomputes the scores). Rate:
  ``peak * attn_eff_max * matmul_training_factor * s/(s+attn_seq_half) *
  d/(d+attn_head_dim_half)``, times ``attn_bwd_ratio`` for the backward.
- **Memory-bound** (norms, activations, dropout, residual adds, rotary, softmax,
  cross-entropy): ``max(bytes / (hbm_Bps * mem_eff), flops / (peak[vector_dtype] *
  vector_eff))``; fused bandwidth-tuned kernels (fp8 cast-transpose, the optimizer step,
  class ``"stream"``) move bytes at ``stream_eff`` instead.

Every kernel adds ``launch_overhead_s``.

Whole layers of layer-list models (a convolution with no GEMM shape given) use
:func:`roofline_time_s` instead: FLOPs at the shape-free GEMM ceiling, bytes at
``mem_eff``, whichever is longer (an approximation: no shape, wave or im2col effects).

>>> from sim.catalog import gpu_spec
>>> from sim.training.compute.params import compute_params
>>> gpu, p = gpu_spec("H100-SXM"), compute_params("H100-SXM")
>>> m, n, k = p.mamf_shape
>>> t = gemm_time_s(m, n, k, 1, "bf16", gpu, p) - p.launch_overhead_s
>>> round(2 * m * n * k / t / 1e12 / p.matmul_training_factor, 1)  # mamf-finder's 794.5
794.5
"""

from __future__ import annotations

import math

from sim.catalog import GpuSpec
from sim.errors import ConfigError
from sim.training.compute.params import ComputeParams
from sim.workload.primitives import Op

__all__ = [
    "CAUSAL_BLOCK",
    "HEAD_DIM_STEP",
    "attention_executed_flops",
    "attention_time_s",
    "gemm_shape_eff",
    "gemm_time_s",
    "matmul_eff_max",
    "memory_time_s",
    "op_time_s",
    "roofline_time_s",
]

#: Attention tile on the diagonal that a causal kernel computes in full (FlashAttention-2).
CAUSAL_BLOCK = 128
#: Head sizes fused attention kernels are compiled for are multiples of this.
HEAD_DIM_STEP = 32


def peak_flops(gpu: GpuSpec, dtype: str) -> float:
    """Dense peak of ``gpu`` in ``dtype``; ConfigError naming what the GPU has."""
    try:
        return gpu.peak_flops[dtype]
    except KeyError:
        raise ConfigError(
            f"training.precision: {gpu.name} has no {dtype} peak; it has "
            f"{', '.join(sorted(gpu.peak_flops))}"
        ) from None


def _waves_eff(rows: float, cols: float, batch: float, tile: tuple[int, int], sms: int) -> float:
    tiles = batch * math.ceil(rows / tile[0]) * math.ceil(cols / tile[1])
    return tiles / (math.ceil(tiles / sms) * sms)


def gemm_shape_eff(m: float, n: float, k: float, batch: float, p: ComputeParams) -> float:
    """Fraction of the GEMM ceiling reached by shape ``(m, n, k)`` x ``batch`` (no units).

    >>> from sim.training.compute.params import compute_params
    >>> p = compute_params("H100-SXM")
    >>> gemm_shape_eff(8192, 8192, 8192, 1, p) > gemm_shape_eff(8192, 8192, 512, 1, p)
    True
    """
    tile, sms = p.gemm_tile, p.sm_count
    waves = max(_waves_eff(m, n, batch, tile, sms), _waves_eff(n, m, batch, tile, sms))
    flops = 2.0 * m * n * k * batch
    return waves * k / (k + p.matmul_k_half) * flops / (flops + p.matmul_half_flops)


def _anchor_eff(p: ComputeParams) -> float:
    if p.mamf_shape is None:
        return 1.0
    m, n, k = p.mamf_shape
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


def gemm_time_s(m: float, n: float, k: float, batch: float, dtype: str, gpu: GpuSpec,
                p: ComputeParams) -> float:  # fmt: skip
    """Seconds for ``batch`` GEMMs of ``(m x k) @ (k x n)`` in ``dtype`` (launch included)."""
    if m <= 0 or n <= 0 or k <= 0 or batch <= 0:
        return p.launch_overhead_s
    eff_max = matmul_eff_max(dtype, p)
    if eff_max <= 0:
        raise ConfigError(f"training.precision: {gpu.name} has no {dtype} GEMM efficiency")
    shape = gemm_shape_eff(m, n, k, batch, p) / _anchor_eff(p)
    rate = peak_flops(gpu, dtype) * eff_max * p.matmul_training_factor * min(shape, 1.0)
    return 2.0 * m * n * k * batch / rate + p.launch_overhead_s


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
                     dtype: str, gpu: GpuSpec, p: ComputeParams) -> float:  # fmt: skip
    """Seconds of a fused attention forward (or backward) kernel (launch included)."""
    eff = (
        p.attn_eff_max
        * p.matmul_training_factor
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
    eff = p.stream_eff if fused else p.mem_eff
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
        return attention_time_s(
            b, heads, s, d, bool(causal), op.cls == "attn_bwd", op.dtype, gpu, p
        )
    return memory_time_s(op.bytes, op.flops, gpu, p, fused=op.cls == "stream")


def roofline_time_s(flops: float, nbytes: float, dtype: str, gpu: GpuSpec,
                    p: ComputeParams) -> float:  # fmt: skip
    """Seconds of one whole layer given only its FLOPs and HBM bytes (launch included).

    ``flops`` run at ``peak[dtype] * matmul_eff_max * matmul_training_factor *
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
        eff = eff_max * p.matmul_training_factor * flops / (flops + p.matmul_half_flops)
        compute_s = flops / (peak_flops(gpu, dtype) * eff)
    return max(compute_s, nbytes / (gpu.hbm_Bps * p.mem_eff)) + p.launch_overhead_s
