"""Fit the compute model's parameters (``sim.training.compute.params.ComputeParams``).

From ``compute`` measurement files (``calibrate.compute.run_compute``):

- GEMM records → ``matmul_eff_max`` and ``matmul_half_flops`` of the training dtype (bf16
  where measured), fitted robustly in log time (soft-L1) through the simulator's own GEMM
  model (:func:`sim.training.compute.kernels.gemm_time_s`: wave quantization, main-loop
  ramp, fixed cost, the ceiling's anchor shape), with the GPU's catalog parameters for the
  rest, ``matmul_training_factor`` 1 (a micro-benchmark is not a training step) and the
  measured ``launch`` time per call; fp32 GEMMs (when the training dtype is another)
  → ``fp32_matmul_eff_max`` on the same curve;
- elementwise records (copy, add, GELU, layernorm) → ``mem_eff``: median achieved
  bytes/s over the GPU's HBM bandwidth;
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

On a GPU the host dispatches ahead of the kernels, and the catalog's ``stream_eff``
describes fused kernels that torch's default AdamW is not, so those records are reported
in the fit details only.

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
from sim.training.compute.kernels import gemm_time_s
from sim.training.compute.params import ComputeParams, compute_params
from sim.training.graph.optimizer import optimizer_bytes_per_param

__all__ = ["fit_compute"]

#: Record dtype (torch spelling) → catalog peak key.
PEAK_KEY = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float8_e4m3fn": "fp8"}
#: Framework elementwise kernels whose bandwidth sets ``mem_eff``.
ELEMENTWISE = ("copy", "add", "gelu", "layernorm")
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
    """The GPU's catalog parameters (dataclass defaults without an entry) as the GEMM fit
    sees a micro-benchmark: no training factor, the measured launch, ``threads`` SMs."""
    try:
        p = compute_params(gpu.name)
    except ConfigError:
        p = ComputeParams(gpu=gpu.name)
    p = replace(p, matmul_training_factor=1.0, launch_overhead_s=launch_s)
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
    mem = [r.achieved_Bps / gpu.hbm_Bps for r in recs if r.op in ELEMENTWISE and r.bytes > 0]
    if mem:
        tree["mem_eff"] = sig(min(1.0, statistics.median(mem)))
        info["mem_records"] = len(mem)
    if launches:
        tree["launch_overhead_s"] = sig(launch)
    dispatch = [r.time_s / r.shape[0] for r in recs if r.op == "dispatch" and r.shape]
    optimizer = _fit_optimizer([r for r in recs if r.op == "optimizer"], gpu)
    if dispatch:
        info["dispatch_per_kernel_s"] = sig(statistics.median(dispatch))
    if cpu and dispatch:
        tree["launch_overhead_s"] = info["dispatch_per_kernel_s"]
    if cpu:
        tree.update(optimizer)
    elif optimizer:
        info["optimizer_not_applied"] = optimizer
    return tree, info
