"""Fit the compute model's efficiencies (``sim.training.compute.params.ComputeParams``).

From ``compute`` measurement files (``calibrate.compute.run_compute``):

- GEMM records → ``matmul_eff_max`` and ``matmul_half_flops`` of the curve
  ``eff(F) = eff_max · F / (F + F_half)``, i.e. predicted time
  ``(F + F_half) / (peak · eff_max)``, fitted robustly in log time (soft-L1);
- copy records → ``mem_eff``: median achieved bytes/s over the GPU's HBM bandwidth;
- launch records → ``launch_overhead_s``: median time per tiny kernel (s).

Peaks come from the topology's accelerator (``topologies/catalog/gpus.yaml``).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from calibrate.fit import sig
from calibrate.measurements import ComputeRecord, Measurements
from sim.catalog import GpuSpec
from sim.errors import CalibrationError

__all__ = ["fit_compute"]

#: Record dtype (torch spelling) → catalog peak key.
PEAK_KEY = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float8_e4m3fn": "fp8"}


def _gemm_dtype(gemms: Sequence[ComputeRecord]) -> str:
    """bf16 when measured (the training dtype), else the dtype with most records."""
    dtypes = [r.dtype for r in gemms]
    return "bfloat16" if "bfloat16" in dtypes else max(sorted(set(dtypes)), key=dtypes.count)


def _fit_matmul(
    gemms: Sequence[ComputeRecord], gpu: GpuSpec
) -> tuple[dict[str, float], dict[str, Any]]:
    dtype = _gemm_dtype(gemms)
    key = PEAK_KEY.get(dtype, dtype)
    if key not in gpu.peak_flops:
        raise CalibrationError(
            f"GEMM dtype {dtype!r}: {gpu.name} has no {key} peak; it has {', '.join(gpu.peak_flops)}"
        )
    recs = [r for r in gemms if r.dtype == dtype]
    if len(recs) < 4:
        raise CalibrationError(
            f"too few GEMM records to fit: {len(recs)} of dtype {dtype} (need at least 4)"
        )
    flops = np.array([r.flops for r in recs])
    y = np.log([r.time_s for r in recs])
    peak = gpu.peak_flops[key]

    def residuals(x: np.ndarray) -> np.ndarray:
        return np.log((flops + 10 ** x[1]) / (peak * x[0])) - y

    sol = least_squares(
        residuals, [0.5, 9.0], bounds=([1e-4, 0.0], [1.0, 16.0]), loss="soft_l1", f_scale=0.05
    )
    eff_max, half = sig(float(sol.x[0])), sig(float(10 ** sol.x[1]))
    pred = (flops + half) / (peak * eff_max)
    apes = np.abs(pred / np.exp(y) - 1) * 100
    info = {"gemm_dtype": dtype, "gemm_records": len(recs), "peak_flops": peak,
            "gemm_mape_pct": sig(float(apes.mean())), "gemm_max_ape_pct": sig(float(apes.max())),
            "at_bound": bool(eff_max >= 0.999)}  # fmt: skip
    return {"matmul_eff_max": eff_max, "matmul_half_flops": half}, info


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
    tree: dict[str, Any] = {}
    info: dict[str, Any] = {"records": len(recs)}
    gemms = [r for r in recs if r.op == "gemm"]
    if gemms:
        t, i = _fit_matmul(gemms, gpu)
        tree.update(t)
        info.update(i)
    copies = [r.achieved_Bps / gpu.hbm_Bps for r in recs if r.op == "copy" and r.bytes > 0]
    if copies:
        tree["mem_eff"] = sig(min(1.0, statistics.median(copies)))
        info["copy_records"] = len(copies)
    launches = [r.time_s for r in recs if r.op == "launch"]
    if launches:
        tree["launch_overhead_s"] = sig(statistics.median(launches))
    return tree, info
