"""Roofline time of one compute op on one GPU.

``time = max(flops / (peak[dtype] * eff_flops), bytes / (hbm_Bps * mem_eff)) + launch``

Default efficiencies are for an H100 SXM and cite their source; a profile written by
calibration overrides them through :meth:`ComputeParams.from_dict`.

>>> from sim.catalog import GpuSpec
>>> gpu = GpuSpec("H100-SXM", {"bf16": 989e12, "fp32": 67e12}, 80 * 2**30, 3.35e12, 700,
...               "nvlink4", "pcie-gen5")
>>> from sim.training.workload.ops import Op
>>> t = op_time_s(Op("big", flops=1e15, matmul=True), gpu, ComputeParams())
>>> round(1e15 / t / 1e12)  # achieved TFLOP/s of a huge matmul
794
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields

from sim.catalog import GpuSpec
from sim.errors import ConfigError
from sim.training.workload.ops import Op
from sim.units import parse_time

__all__ = ["MATMUL_EFF_MAX", "ComputeParams", "default_compute_params", "op_time_s"]


@dataclass(frozen=True)
class ComputeParams:
    """Efficiencies of the compute roofline.

    Attributes
    ----------
    matmul_eff_max : float
        Best achievable fraction of dense peak for large matmuls. Default 0.803:
        794.5 of 989 TFLOP/s, H100 SXM bf16, mamf-finder (stas00/ml-engineering,
        ../shared/data/published/matmul-achievable-tflops-bf16.csv). A100 SXM: 0.869.
    matmul_half_flops : float
        FLOPs of a matmul that reaches half of ``matmul_eff_max``; efficiency follows the
        saturating curve ``eff_max * F / (F + F_half)``. Default 1e9 (a 800^3 GEMM):
        an assumption, to be fitted by calibration; it only matters for small ops.
    mem_eff : float
        Achievable fraction of HBM bandwidth. Default 0.866: 2.90 of 3.35 TB/s
        (STREAM-style copy on Azure ND H100 v5, ../shared/data/published/
        h100-reference-figures.csv).
    vector_eff : float
        Fraction of ``peak_flops[vector_dtype]`` reached by elementwise kernels (they are
        memory-bound; this only guards against zero-byte ops). Default 0.5, assumed.
    vector_dtype : str
        Peak used for non-matmul FLOPs (CUDA cores). Default ``"fp32"``.
    launch_overhead_s : float
        Added to every kernel, seconds. Default 4 us: a typical CUDA launch gap without
        CUDA graphs; an assumption, to be fitted by calibration.
    """

    matmul_eff_max: float = 0.803
    matmul_half_flops: float = 1e9
    mem_eff: float = 0.866
    vector_eff: float = 0.5
    vector_dtype: str = "fp32"
    launch_overhead_s: float = 4e-6

    def __post_init__(self) -> None:
        for key in ("matmul_eff_max", "mem_eff", "vector_eff"):
            value = getattr(self, key)
            if not 0 < value <= 1:
                raise ConfigError(f"compute.{key}: {value!r} must be in (0, 1]")
        if not (math.isfinite(self.matmul_half_flops) and self.matmul_half_flops >= 0):
            raise ConfigError(f"compute.matmul_half_flops: {self.matmul_half_flops!r} must be >= 0")
        if self.launch_overhead_s < 0:
            raise ConfigError(f"compute.launch_overhead_s: {self.launch_overhead_s!r} < 0")

    @classmethod
    def from_dict(cls, data: Mapping[str, object], place: str = "compute") -> ComputeParams:
        """Build from a profile section; unknown keys raise ConfigError naming them.

        >>> ComputeParams.from_dict({"mem_eff": 0.9, "launch_overhead_s": "2us"}).mem_eff
        0.9
        """
        known = {f.name for f in fields(cls)}
        values: dict[str, object] = {}
        for key, value in data.items():
            if key not in known:
                raise ConfigError(
                    f"{place}.{key}: unknown key; allowed: {', '.join(sorted(known))}"
                )
            values[key] = _coerce(key, value, place)
        return cls(**values)  # type: ignore[arg-type]

    def matmul_eff(self, flops: float) -> float:
        """Fraction of peak a matmul of ``flops`` FLOPs reaches (saturating curve)."""
        return self.matmul_eff_max * flops / (flops + self.matmul_half_flops)


def _coerce(key: str, value: object, place: str) -> object:
    if key == "vector_dtype":
        if not isinstance(value, str):
            raise ConfigError(f"{place}.{key}: expected a dtype name, got {value!r}")
        return value
    if key == "launch_overhead_s":
        return parse_time(value, f"{place}.{key}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{place}.{key}: expected a number, got {value!r}")
    return float(value)


def _peak(gpu: GpuSpec, dtype: str) -> float:
    try:
        return gpu.peak_flops[dtype]
    except KeyError:
        raise ConfigError(
            f"training.precision: {gpu.name} has no {dtype} peak; it has "
            f"{', '.join(sorted(gpu.peak_flops))}"
        ) from None


def op_time_s(op: Op, gpu: GpuSpec, params: ComputeParams) -> float:
    """Roofline time of compute ``op`` on ``gpu``, in seconds.

    Matmuls run at ``peak[op.dtype] * matmul_eff(op.flops)``; other ops at
    ``peak[vector_dtype] * vector_eff``. Memory traffic at ``hbm_Bps * mem_eff``.
    """
    if op.kind != "compute":
        raise ValueError(f"op {op.name!r} is communication ({op.kind}); the engine times it")
    if op.matmul:
        rate = _peak(gpu, op.dtype) * params.matmul_eff(op.flops) if op.flops else 1.0
    else:
        peak = gpu.peak_flops.get(params.vector_dtype) or _peak(gpu, "bf16")
        rate = peak * params.vector_eff
    compute_s = op.flops / rate if op.flops else 0.0
    memory_s = op.bytes / (gpu.hbm_Bps * params.mem_eff)
    return float(max(compute_s, memory_s) + params.launch_overhead_s)


# Best achievable dense bf16 matmul fraction of peak per GPU (mamf-finder, stas00/
# ml-engineering compute/accelerator/README.md, "Maximum Achievable Matmul FLOPS"
# table; the same figures are in ../shared/data/published/matmul-achievable-tflops-bf16.csv).
# GPUs absent from that table use the H100 SXM value (an assumption).
MATMUL_EFF_MAX = {
    "A100-SXM-80GB": 0.869,
    "A100-PCIe": 0.811,
    "H100-SXM": 0.803,
    "H200": 0.803,  # "H200 is the same" (same source)
    "B200": 0.776,
    "GB200": 0.729,
    "MI300X": 0.514,
}


def default_compute_params(
    gpu_name: str, overrides: Mapping[str, object] | None = None
) -> ComputeParams:
    """Compute parameters for ``gpu_name``: per-GPU matmul efficiency, then profile overrides.

    >>> default_compute_params("A100-SXM-80GB").matmul_eff_max
    0.869
    >>> default_compute_params("A100-SXM-80GB", {"matmul_eff_max": 0.7}).matmul_eff_max
    0.7
    """
    base: dict[str, object] = {
        "matmul_eff_max": MATMUL_EFF_MAX.get(gpu_name, ComputeParams.matmul_eff_max)
    }
    base.update(overrides or {})
    return ComputeParams.from_dict(base, "profile.compute")
