"""Fit the compute model's parameters (``sim.training.compute.params.ComputeParams``).

From ``compute`` measurement files (``calibrate.compute.run_compute``):

- GEMM records → ``matmul_eff_max`` and ``matmul_half_flops`` of the training dtype (bf16
  where measured), fitted robustly in log time (soft-L1) through the simulator's own GEMM
  model (:func:`sim.training.compute.kernels.gemm_time_s`: wave quantization, main-loop
  ramp, fixed cost, the ceiling's anchor shape), with the GPU's catalog parameters for the
  rest, ``matmul_training_factor`` 1 (a micro-benchmark is not a training step) and the
  measured ``launch`` time per call; fp32 GEMMs (when the training dtype is another)
  → ``fp32_matmul_eff_max`` on the same curve;
- attention records (``sdpa``: torch's own kernel choice, forward and ``sdpa_bwd``) →
  ``attn_eff_max`` and ``attn_bwd_ratio``, fitted in log time through the simulator's
  attention model (:func:`sim.training.compute.kernels.attention_time_s`: the FLOPs the
  kernel executes under its causal mask, the sequence and head-size factors) with the
  catalog's ``attn_seq_half`` and ``attn_head_dim_half``; per-backend records
  (``sdpa_flash``, ``sdpa_efficient``, ``sdpa_cudnn``) are fitted the same way and
  reported in the details only;
- elementwise records (copy, add, GELU, layernorm, softmax, RMSNorm) → ``mem_eff`` and
  ``vector_eff``, fitted together in log time through the simulator's memory-bound model
  (:func:`sim.training.compute.kernels.memory_time_s`: bytes at ``mem_eff`` of the HBM
  bandwidth or nominal FLOPs at ``vector_eff`` of the vector peak, whichever is slower):
  on a GPU every one is bandwidth-bound (``vector_eff`` keeps its catalog value unless a
  record needs it), on a CPU thread GELU's erf and softmax's exp are compute-bound.
  The kernels are timed one by one, so this is the kernel-level ``mem_eff``
  (``mem_training_factor`` 1); a training step applies the catalog's factor on top, as
  it applies ``matmul_training_factor`` to the GEMM ceiling;
- launch records → ``launch_overhead_s``: median time per tiny kernel (s).

On a CPU, where one thread runs both the framework and the kernels, what eager training
adds is measured too (:mod:`calibrate.compute_overhead`) and replaces it:

- ``sm_count``: the threads torch used (``meta.details.cpu_threads``): GEMM tiles run in
  waves of that many;
- dispatch records → ``launch_overhead_s``: median time per simulated kernel of a tiny
  forward + backward through autograd;
- optimizer records → ``stream_eff``: the simulator's optimizer bytes per parameter
  (:func:`sim.training.graph.optimizer.optimizer_bytes_per_param` with fp32 gradients:
  38) over the measured AdamW time per parameter, and ``optimizer_tensor_overhead_s``:
  the rest of the time per tensor.

From a profiler trace of a training step on a GPU (:mod:`calibrate.trace_reader`):
``kernel_gap`` records (the compute stream's idle time per kernel over a step) →
``launch_overhead_s``, in place of the tiny-kernel ``launch`` time (kept in the details):
the step's own gaps are what the simulator's per-kernel overhead stands for.

On a GPU the host dispatches ahead of the kernels as long as it launches them faster than
they run: dispatch records → ``host_dispatch_s`` (the host's seconds per simulated kernel,
a bound on the step of a layer-list model: :mod:`sim.training.compute.host`), not the
per-kernel gap. The catalog's ``stream_eff`` describes fused kernels that torch's default
AdamW is not, so optimizer records are reported in the fit details only.

Peaks come from the topology's accelerator (``topologies/catalog/gpus.yaml``).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from calibrate.fit import sig
from calibrate.measurements import ComputeRecord, Measurements
from sim.catalog import GpuSpec
from sim.errors import CalibrationError, ConfigError
from sim.training.compute.kernels import attention_time_s, gemm_time_s, memory_time_s
from sim.training.compute.params import ComputeParams, compute_params
from sim.training.graph.optimizer import optimizer_bytes_per_param

__all__ = ["fit_compute"]

#: Record dtype (torch spelling) → catalog peak key.
PEAK_KEY = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float8_e4m3fn": "fp8"}
#: Framework elementwise kernels that set ``mem_eff`` and ``vector_eff``.
ELEMENTWISE = ("copy", "add", "gelu", "layernorm", "softmax", "rmsnorm")
#: Attention records: torch's own choice, and one per pinned backend (details only).
ATTENTION = ("sdpa", "sdpa_flash", "sdpa_efficient", "sdpa_cudnn")
#: Gradient bytes of the simulator's default plan (fp32 gradients).
GRAD_BYTES = 4


def _gemm_dtype(gemms: Sequence[ComputeRecord]) -> str:
    """bf16 when measured (the training dtype), else the dtype with most records."""
    dtypes = [r.dtype for r in gemms]
    return "bfloat16" if "bfloat16" in dtypes else max(sorted(set(dtypes)), key=dtypes.count)


def _peak_key(dtype: str, gpu: GpuSpec) -> str:
    key = PEAK_KEY.get(dtype, dtype)
    if key not in gpu.peak_flops:
        raise CalibrationError(
            f"GEMM dtype {dtype!r}: {gpu.name} has no {key} peak; it has {', '.join(gpu.peak_flops)}"
        )
    return key


def _shape(r: ComputeRecord) -> tuple[float, float, float]:
    if len(r.shape) != 3:
        raise CalibrationError(f"gemm record shape {r.shape}: expected (M, N, K)")
    m, n, k = r.shape
    return float(m), float(n), float(k)


def _gemm_residuals(recs: Sequence[ComputeRecord], key: str, gpu: GpuSpec, base: ComputeParams,
                    field: str) -> Any:  # fmt: skip
    """Residuals in log time of ``recs`` under ``base`` with ``field`` = x[0] (and
    ``matmul_half_flops`` = 10**x[1] when given)."""
    y = np.log([r.time_s for r in recs])
    shapes = [_shape(r) for r in recs]

    def model(x: np.ndarray) -> np.ndarray:
        values: dict[str, Any] = {field: float(x[0])}
        if len(x) > 1:
            values["matmul_half_flops"] = float(10 ** x[1])
        p = replace(base, **values)
        return np.log([gemm_time_s(m, n, k, 1, key, gpu, p) for m, n, k in shapes])

    return model, y


def _apes(pred_log: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.asarray(np.abs(np.exp(pred_log - y) - 1) * 100)


def _fit_matmul(
    gemms: Sequence[ComputeRecord], gpu: GpuSpec, base: ComputeParams
) -> tuple[dict[str, float], dict[str, Any]]:
    dtype = _gemm_dtype(gemms)
    key = _peak_key(dtype, gpu)
    recs = [r for r in gemms if r.dtype == dtype]
    if len(recs) < 4:
        raise CalibrationError(
            f"too few GEMM records to fit: {len(recs)} of dtype {dtype} (need at least 4)"
        )
    model, y = _gemm_residuals(recs, key, gpu, base, "matmul_eff_max")
    sol = least_squares(lambda x: model(x) - y, [0.5, 9.0], bounds=([1e-4, 0.0], [1.0, 16.0]),
                        loss="soft_l1", f_scale=0.05)  # fmt: skip
    eff_max, half = sig(float(sol.x[0])), sig(float(10 ** sol.x[1]))
    apes = _apes(model(np.array([eff_max, np.log10(half) if half > 0 else 0.0])), y)
    tree = {"matmul_eff_max": eff_max, "matmul_half_flops": half}
    info = {"gemm_dtype": dtype, "gemm_records": len(recs), "peak_flops": gpu.peak_flops[key],
            "gemm_mape_pct": sig(float(apes.mean())), "gemm_max_ape_pct": sig(float(apes.max())),
            "at_bound": bool(eff_max >= 0.999)}  # fmt: skip
    fp32 = [r for r in gemms if r.dtype == "float32"]
    if dtype != "float32" and len(fp32) >= 2 and "fp32" in gpu.peak_flops:
        b32 = replace(base, matmul_half_flops=half)
        m32, y32 = _gemm_residuals(fp32, "fp32", gpu, b32, "fp32_matmul_eff_max")
        s32 = least_squares(lambda x: m32(x) - y32, [0.5], bounds=([1e-4], [1.0]),
                            loss="soft_l1", f_scale=0.05)  # fmt: skip
        tree["fp32_matmul_eff_max"] = sig(float(s32.x[0]))
        a32 = _apes(m32(np.array([tree["fp32_matmul_eff_max"]])), y32)
        info |= {"fp32_gemm_records": len(fp32), "fp32_gemm_mape_pct": sig(float(a32.mean()))}
    return tree, info


def _base(gpu: GpuSpec, threads: int | None, launch_s: float) -> ComputeParams:
    """The GPU's catalog parameters (dataclass defaults without an entry) as the fits see
    a micro-benchmark: no training factor (GEMMs' nor elementwise kernels'), the measured
    launch, ``threads`` SMs."""
    try:
        p = compute_params(gpu.name)
    except ConfigError:
        p = ComputeParams(gpu=gpu.name)
    p = replace(p, matmul_training_factor=1.0, mem_training_factor=1.0, launch_overhead_s=launch_s)
    return replace(p, sm_count=threads) if threads else p


def _cpu_threads(measurements: Sequence[Measurements]) -> int | None:
    """Threads of the CPU compute runs (one value), else None."""
    seen = {m.meta.details.get("cpu_threads") for m in measurements
            if m.kind == "compute" and m.meta.details.get("device") == "cpu"}  # fmt: skip
    seen.discard(None)
    if len(seen) != 1:
        return None
    (n,) = seen
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else None


def _fit_optimizer(recs: Sequence[ComputeRecord], gpu: GpuSpec) -> dict[str, float]:
    """``stream_eff`` and ``optimizer_tensor_overhead_s`` from AdamW records (see module):
    ``time = tensors * overhead + parameters * time_per_parameter``, least squares over
    records of at least two tensor sizes."""
    opt = [r for r in recs if len(r.shape) == 2]
    if len({r.shape[1] for r in opt}) < 2:
        return {}
    a = np.array([[r.shape[0], r.shape[0] * r.shape[1]] for r in opt], dtype=float)
    t = np.array([r.time_s for r in opt])
    (overhead, per_param), *_ = np.linalg.lstsq(a, t, rcond=None)
    if not per_param > 0:
        raise CalibrationError(
            f"optimizer records: time per parameter {per_param!r} s is not > 0 ({len(opt)} records)"
        )
    stream = optimizer_bytes_per_param(GRAD_BYTES) / float(per_param) / gpu.hbm_Bps
    return {"stream_eff": sig(min(1.0, stream)),
            "optimizer_tensor_overhead_s": sig(max(0.0, float(overhead)))}  # fmt: skip


def _log_fit(model: Any, y: np.ndarray, x0: Sequence[float], low: Sequence[float],
             high: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Robust least squares of ``log model(x)`` on ``y``; the solution and its APEs (%)."""
    sol = least_squares(lambda x: model(x) - y, x0, bounds=(low, high), loss="soft_l1",
                        f_scale=0.05)  # fmt: skip
    return sol.x, _apes(model(sol.x), y)


def _attn_shape(r: ComputeRecord) -> tuple[float, float, float, float, bool]:
    if len(r.shape) not in (4, 5):
        raise CalibrationError(
            f"{r.op} record shape {r.shape}: expected (b, heads, s, d[, causal])"
        )
    causal = bool(r.shape[4]) if len(r.shape) == 5 else True
    b, h, s, d = (float(v) for v in r.shape[:4])
    return b, h, s, d, causal


def _attention_model(recs: Sequence[ComputeRecord], backward: bool, field: str, key: str,
                     gpu: GpuSpec, base: ComputeParams) -> Any:  # fmt: skip
    """log seconds of ``recs`` under ``base`` with ``field`` = x[0]."""
    shapes = [_attn_shape(r) for r in recs]

    def f(x: np.ndarray) -> np.ndarray:
        values: dict[str, Any] = {field: float(x[0])}
        p = replace(base, **values)
        return np.log([attention_time_s(*sh, backward, key, gpu, p) for sh in shapes])

    return f


def _fit_attention(recs: Sequence[ComputeRecord], name: str, gpu: GpuSpec,
                   base: ComputeParams) -> tuple[dict[str, float], dict[str, Any]]:  # fmt: skip
    """``attn_eff_max`` from ``name`` forward records, ``attn_bwd_ratio`` from ``name_bwd``
    (at the fitted ``attn_eff_max``); a micro-benchmark runs at ``matmul_training_factor`` 1."""
    fwd = [r for r in recs if r.op == name]
    bwd = [r for r in recs if r.op == f"{name}_bwd"]
    if not fwd:
        return {}, {}
    key = _peak_key(fwd[0].dtype, gpu)
    y = np.log([r.time_s for r in fwd])
    model = _attention_model(fwd, False, "attn_eff_max", key, gpu, base)
    (eff,), apes = _log_fit(model, y, [0.3], [1e-5], [1.0])
    tree = {"attn_eff_max": sig(float(eff))}
    info = {f"{name}_records": len(fwd), f"{name}_mape_pct": sig(float(apes.mean()))}
    if bwd:
        at = replace(base, attn_eff_max=tree["attn_eff_max"])
        model = _attention_model(bwd, True, "attn_bwd_ratio", key, gpu, at)
        (ratio,), ab = _log_fit(model, np.log([r.time_s for r in bwd]), [0.8], [1e-3], [1.0])
        tree["attn_bwd_ratio"] = sig(float(ratio))
        info[f"{name}_bwd_mape_pct"] = sig(float(ab.mean()))
    return tree, info


def _fit_elementwise(recs: Sequence[ComputeRecord], gpu: GpuSpec,
                     base: ComputeParams) -> tuple[dict[str, float], dict[str, Any]]:  # fmt: skip
    """``mem_eff`` and ``vector_eff`` through the memory-bound model (module docstring)."""
    mem = [r for r in recs if r.op in ELEMENTWISE and r.bytes > 0]
    if not mem:
        return {}, {}
    y = np.log([r.time_s for r in mem])

    def model(x: np.ndarray) -> np.ndarray:
        p = replace(base, mem_eff=float(x[0]), vector_eff=float(x[1]))
        return np.log([memory_time_s(r.bytes, r.flops, gpu, p) for r in mem])

    # start: bandwidth as the fastest bandwidth-bound record gives it, FLOP rate as the
    # slowest one with FLOPs does (a start where no record is compute-bound would leave
    # vector_eff without a gradient)
    vector = gpu.peak_flops.get(base.vector_dtype) or max(gpu.peak_flops.values())
    bw = max(min(1.0, r.achieved_Bps / gpu.hbm_Bps) for r in mem)
    rates = [r.achieved_flops_per_s / vector for r in mem if r.flops > 0]
    x0 = [max(bw, 1e-4), min(max(min(rates, default=base.vector_eff), 1e-5), 1.0)]
    (mem_eff, vector_eff), apes = _log_fit(model, y, x0, [1e-4, 1e-5], [1.0, 1.0])
    tree = {"mem_eff": sig(float(mem_eff)), "vector_eff": sig(float(vector_eff))}
    return tree, {"mem_records": len(mem), "mem_mape_pct": sig(float(apes.mean()))}


def fit_compute(
    measurements: Sequence[Measurements], gpu: GpuSpec
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The profile's ``compute:`` section and its fit report from compute measurements.

    Parameters
    ----------
    measurements : sequence of Measurements
        Files of kind ``compute`` (others are ignored).
    gpu : GpuSpec
        The accelerator they ran on (its peak FLOP/s and HBM bandwidth).

    Returns
    -------
    (dict, dict)
        Keys of ``ComputeParams`` that the records determine, and fit details.

    Raises
    ------
    CalibrationError
        Fewer than 4 GEMM records of one dtype, a dtype without a peak, non-positive times.
    """
    recs = [r for m in measurements if m.kind == "compute" for r in m.computes]
    for r in recs:
        if not r.time_s > 0:
            raise CalibrationError(
                f"compute record {r.op} {r.shape}: time {r.time_s!r} s must be > 0"
            )
    cpu = bool(recs) and all(r.device == "cpu" for r in recs)
    threads = _cpu_threads(measurements) if cpu else None
    launches = [r.time_s for r in recs if r.op == "launch"]
    launch = statistics.median(launches) if launches else 0.0
    tree: dict[str, Any] = {"sm_count": threads} if threads else {}
    info: dict[str, Any] = {"records": len(recs)}
    gemms = [r for r in recs if r.op == "gemm"]
    if gemms:
        t, i = _fit_matmul(gemms, gpu, _base(gpu, threads, launch))
        tree.update(t)
        info.update(i)
    base = _base(gpu, threads, launch)
    t, i = _fit_elementwise(recs, gpu, base)
    tree.update(t)
    info.update(i)
    for name in ATTENTION:
        t, i = _fit_attention(recs, name, gpu, base)
        info.update(i)
        if name == "sdpa":
            tree.update(t)
        elif t:
            info[f"{name}_fit"] = t
    if launches:
        tree["launch_overhead_s"] = sig(launch)
    dispatch = [r.time_s / r.shape[0] for r in recs if r.op == "dispatch" and r.shape]
    optimizer = _fit_optimizer([r for r in recs if r.op == "optimizer"], gpu)
    if dispatch:
        info["dispatch_per_kernel_s"] = sig(statistics.median(dispatch))
    if cpu and dispatch:
        tree["launch_overhead_s"] = info["dispatch_per_kernel_s"]
    elif dispatch:
        tree["host_dispatch_s"] = info["dispatch_per_kernel_s"]
    gaps = [r.time_s for r in recs if r.op == "kernel_gap"]
    if gaps and not cpu:  # a GPU trace: the compute stream's idle time per kernel in a step
        info["tiny_kernel_launch_s"] = tree.get("launch_overhead_s")
        tree["launch_overhead_s"] = sig(statistics.median(gaps))
    if cpu:
        tree.update(optimizer)
    elif optimizer:
        info["optimizer_not_applied"] = optimizer
    return tree, info
