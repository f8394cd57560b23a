"""Compute-model parameters per GPU type, read from ``topologies/catalog/compute.yaml``.

Every GPU in the hardware catalog has its own entry there, each value with its source.
Values that were not fitted to measurements of that GPU are *estimates*: the entry says
``estimate: true`` and ``basis:`` says what they were derived from, and every result
computed with them carries that note (:attr:`ComputeParams.notes`). A GPU without an
entry is an error, never a silent copy of another GPU's parameters.

A profile's ``compute:`` section (written by calibration) overrides single keys.

>>> p = compute_params("H100-SXM")
>>> p.sm_count, p.gemm_tile
(132, (128, 256))
>>> compute_params("H100-SXM", {"mem_eff": 0.8}).mem_eff
0.8
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict

from sim.catalog import _entry
from sim.errors import ConfigError, TopologyError
from sim.files import load_shipped_yaml
from sim.kept import Kept
from sim.training.compute.power import PowerModel
from sim.units import parse_time

__all__ = ["ComputeParams", "compute_entry_names", "compute_params", "tunable_keys"]

_FRACTIONS = (
    "matmul_eff_max", "fp8_matmul_eff_max", "matmul_training_factor", "attn_eff_max",
    "attn_bwd_ratio", "mem_eff", "mem_training_factor", "vector_eff", "comm_interference",
    "stream_eff", "attn_odd_head_dim_eff", "sustained_clock", "conv_eff",
)  # fmt: skip
_MAY_BE_ZERO = ("fp8_matmul_eff_max", "comm_interference", "fp32_matmul_eff_max")
_TIMES = ("launch_overhead_s", "optimizer_tensor_overhead_s", "host_dispatch_s")
#: The power-limit clock model (:mod:`sim.training.compute.power`); ``power_cap_w`` 0: off.
_POWER = (
    "power_cap_w",
    "power_gemm_w",
    "power_exponent",
    "power_other_w",
    "power_idle_w",
    "power_gemm_fp8_w",
)
_TUNABLE = (
    *_FRACTIONS, "fp32_matmul_eff_max", "matmul_half_flops", "matmul_k_half", "attn_seq_half",
    "attn_head_dim_half", *_TIMES, "sm_count", *_POWER,
)  # fmt: skip


@dataclass(frozen=True)
class ComputeParams:
    """Per-GPU parameters of the per-operation compute model (SI units).

    Attributes
    ----------
    gpu : str
        Catalog GPU name the parameters belong to.
    sm_count : int
        Streaming multiprocessors (compute units): GEMM tiles run in waves of this many.
        On a CPU host, the threads the framework uses (``calibrate fit`` of a CPU compute
        file sets it from the run's thread count).
    gemm_tile : tuple of int
        Output tile (rows, columns) of the GEMM kernels assumed for wave quantization.
    mamf_shape : tuple of int or None
        (M, N, K) at which ``matmul_eff_max`` was measured: the GEMM model reproduces
        that measurement exactly there (None: the curve's ceiling is ``matmul_eff_max``).
    fp8_mamf_shape : tuple of int or None
        The same for ``fp8_matmul_eff_max`` (None: ``mamf_shape``).
    sustained_clock : float
        Clock a long, power-limited stream of tensor-core kernels sustains in training,
        relative to the clock of the short micro-benchmarks the GEMM ceiling
        (``matmul_eff_max``) and the attention tables were measured at (mamf-finder times
        150 GEMMs; the FlashAttention benchmarks a few kernels). Applies to GEMMs,
        convolutions and attention. 1: not measured (the end-to-end factor
        ``matmul_training_factor`` then carries it).
    attention_table : str or None
        Key of ``topologies/catalog/attention.yaml`` whose published kernel benchmarks
        time this GPU's fused attention (a GPU of the same die: H200 uses H100 SXM's);
        None: no published table, the parametric model (``attn_eff_max``) times it.
    conv_eff : float
        Fraction of the GEMM ceiling cuDNN's tensor-core implicit-GEMM convolutions with
        several filter taps reach on the same (M, N, K) (forward, data and weight gradients
        of the CNN presets, fp16/bf16); 1x1 filters run as plain GEMMs, at the GEMM rate,
        and fp32 convolutions (CUDA cores) at the GEMM rate too.
    conv_tile : tuple of int or None
        (output channels, input channels per filter tap) that the tensor-core implicit-GEMM
        convolution kernels work in: channel counts are padded to whole multiples
        (:func:`sim.training.compute.conv.channel_padding`); None: no padding.
    matmul_eff_max : float
        Best dense-GEMM fraction of the bf16/fp16 peak in a micro-benchmark
        (mamf-finder's "maximum achievable matmul FLOPS" where published).
    fp8_matmul_eff_max : float
        The same for fp8 GEMMs (fraction of the fp8 peak); 0 where the GPU has no fp8.
    fp32_matmul_eff_max : float
        The same for fp32 GEMMs (fraction of the fp32 peak): layer-list models trained in
        fp32, and fp32 jobs in ``calibrate``'s step model. 0 (the default): not measured,
        fp32 GEMMs use ``matmul_eff_max``.
    matmul_half_flops : float
        Fixed cost of one GEMM, as FLOPs at full rate (prologue, epilogue, tail).
    matmul_k_half : float
        Inner dimension at which a GEMM's main loop reaches half its rate: the rate
        scales with ``K / (K + matmul_k_half)``.
    matmul_training_factor : float
        Residual fraction of the micro-benchmark rate sustained inside a training step
        beyond ``sustained_clock`` (fitted on end-to-end tables where the clock was not
        measured; concurrent NCCL kernels and cache interference); applies to GEMMs,
        convolutions and attention kernels.
    attn_eff_max : float
        Parametric attention model (GPUs without an ``attention_table``): fused attention
        forward rate, as a fraction of the bf16 peak, on the FLOPs it executes.
    attn_bwd_ratio : float
        Attention backward rate relative to the forward rate.
    attn_seq_half, attn_head_dim_half : float
        Sequence length and head size at which attention reaches half its rate; the rate
        scales with ``s / (s + attn_seq_half) * d / (d + attn_head_dim_half)``.
    attn_odd_head_dim_eff : float
        Rate factor of attention kernels for a head size that is not a power of two
        (Triton's flash attention pads it and takes a masked path).
    mem_eff : float
        Fraction of HBM bandwidth that framework elementwise kernels reach (norms,
        activations, residual adds, rotary, softmax, cross-entropy, casts to the reduction
        dtype), as eager kernels timed one by one reach it (``calibrate compute``'s
        elementwise records): the kernel-level value, where one was measured.
    mem_training_factor : float
        Residual fraction of ``mem_eff`` those kernels keep inside a training step
        (fitted on end-to-end tables: the framework's copies and layout changes the op
        list does not show, autograd's accumulations, small tensors); eager elementwise
        kernels in a step move their bytes at ``mem_eff * mem_training_factor``
        (:func:`sim.training.compute.kernels.eager_mem_eff`). The memory-side twin of
        ``matmul_training_factor``: a profile measured kernel by kernel sets ``mem_eff``
        and keeps the catalog's factor. 1 where no kernel-level value separates the two
        (``mem_eff`` is then the fitted training-level value itself).
    stream_eff : float
        Fraction of HBM bandwidth that fused, bandwidth-tuned kernels reach (fp8
        cast-transpose, the multi-tensor optimizer step): a STREAM-style copy.
    vector_eff : float
        Fraction of ``peak_flops[vector_dtype]`` elementwise kernels reach (a floor that
        only matters for arithmetic-heavy elementwise ops).
    vector_dtype : str
        Peak used for non-tensor-core FLOPs.
    launch_overhead_s : float
        Idle time per kernel (launch and tail), seconds. In eager frameworks on a CPU
        this is the per-operator dispatch through autograd (``calibrate compute``'s
        ``dispatch`` records).
    optimizer_tensor_overhead_s : float
        Seconds the optimizer step spends per parameter tensor beyond its bytes: an eager
        per-tensor (for-loop) optimizer launches a handful of kernels for every tensor.
        0 (the default): a multi-tensor fused optimizer, whose launches are negligible.
    host_dispatch_s : float
        Host (CPU) seconds an eager framework spends per kernel it launches (Python, the
        dispatcher, autograd; ``calibrate compute``'s ``dispatch`` records per simulated
        kernel): the GPU cannot finish a layer before the host has launched its kernels
        (:mod:`sim.training.compute.host`; layer-list models: transformer steps do not
        apply it yet). 0 (the default): the host keeps ahead (graph-mode frameworks, CUDA
        graphs, or not measured).
    power_cap_w, power_gemm_w, power_exponent, power_other_w, power_idle_w : float
        The power-limit clock (:mod:`sim.training.compute.power`): the board's limit,
        tensor-core kernels' (GEMMs', attention's) draw at full clock, how that draw goes
        with their rate, a step's other kernels' draw and idle draw (W; the exponent has
        no units). Where ``power_cap_w`` is
        set, a step's ``sustained_clock`` is the rate its GEMMs keep under the limit, from
        how the step divides its time (:func:`sim.training.step.run_step`). 0 (the default):
        off, ``sustained_clock`` as set.
    power_gemm_fp8_w : float
        fp8 GEMMs' draw at full clock (W), for steps in fp8 (their attention draws
        ``power_gemm_w``); 0 (the default): ``power_gemm_w``. Same exponent.
    comm_interference : float
        Slowdown of compute while a data-parallel collective (a ZeRO gather or a
        per-micro-batch gradient reduction) runs beside it: NCCL kernels take SMs and HBM
        bandwidth. Compute overlapped with ``x`` seconds of such a collective takes
        ``comm_interference * x`` seconds longer.
    estimate : bool
        True when the values were not fitted to measurements of this GPU.
    basis : str
        What the values rest on (a fit, or what an estimate was derived from).
    validation : dict
        Errors of these parameters against published data (empty if never validated).
    sources : dict
        Field name -> where its value comes from.
    """

    gpu: str = "custom"
    sm_count: int = 132
    gemm_tile: tuple[int, int] = (128, 256)
    mamf_shape: tuple[int, int, int] | None = None
    fp8_mamf_shape: tuple[int, int, int] | None = None
    sustained_clock: float = 1.0
    attention_table: str | None = None
    conv_eff: float = 1.0
    conv_tile: tuple[int, int] | None = None
    matmul_eff_max: float = 0.803
    fp8_matmul_eff_max: float = 0.709
    matmul_half_flops: float = 1e9
    matmul_k_half: float = 128.0
    matmul_training_factor: float = 1.0
    attn_eff_max: float = 0.5
    attn_bwd_ratio: float = 0.8
    attn_seq_half: float = 256.0
    attn_head_dim_half: float = 32.0
    attn_odd_head_dim_eff: float = 1.0
    mem_eff: float = 0.866
    mem_training_factor: float = 1.0
    stream_eff: float = 0.866
    vector_eff: float = 0.5
    vector_dtype: str = "fp32"
    launch_overhead_s: float = 4e-6
    optimizer_tensor_overhead_s: float = 0.0
    host_dispatch_s: float = 0.0
    fp32_matmul_eff_max: float = 0.0
    comm_interference: float = 0.0
    power_cap_w: float = 0.0
    power_gemm_w: float = 0.0
    power_exponent: float = 2.0
    power_other_w: float = 0.0
    power_idle_w: float = 0.0
    power_gemm_fp8_w: float = 0.0
    estimate: bool = True
    basis: str = "dataclass defaults (no catalog entry)"
    validation: Mapping[str, Any] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for key in _FRACTIONS:
            value = getattr(self, key)
            low_ok = value >= 0 if key in _MAY_BE_ZERO else value > 0
            if not (low_ok and value <= 1):
                raise ConfigError(f"compute.{key}: {value!r} must be in (0, 1]")
        for key in ("matmul_half_flops", "matmul_k_half", "attn_seq_half", "attn_head_dim_half"):
            value = getattr(self, key)
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"compute.{key}: {value!r} must be a number >= 0")
        for key in _TIMES:
            if not getattr(self, key) >= 0:
                raise ConfigError(f"compute.{key}: {getattr(self, key)!r} < 0")
        if self.sm_count < 1 or min(self.gemm_tile + (self.conv_tile or (1,))) < 1:
            raise ConfigError(
                f"compute: sm_count, gemm_tile and conv_tile must be >= 1 (GPU {self.gpu})"
            )
        self._check_power()

    def _check_power(self) -> None:
        if self.power_cap_w < 0:
            raise ConfigError(f"compute.power_cap_w: {self.power_cap_w!r} < 0 (0: no power model)")
        if self.power_cap_w == 0:
            return
        for key in ("power_gemm_w", "power_other_w", "power_idle_w"):
            if not getattr(self, key) > 0:
                raise ConfigError(
                    f"compute.{key}: {getattr(self, key)!r} must be > 0 where power_cap_w is set"
                )
        if not self.power_exponent >= 1:
            raise ConfigError(f"compute.power_exponent: {self.power_exponent!r} must be >= 1")
        if self.power_gemm_fp8_w < 0:
            raise ConfigError(f"compute.power_gemm_fp8_w: {self.power_gemm_fp8_w!r} < 0 "
                              "(0: fp8 GEMMs draw power_gemm_w)")  # fmt: skip

    @property
    def power_model(self) -> PowerModel | None:
        """The power-limit clock model, or None where ``power_cap_w`` is 0 (off)."""
        return self.step_power_model(0.0)

    def step_power_model(self, fp8_share: float) -> PowerModel | None:
        """:attr:`power_model` for a step whose tensor-core time at full clock is
        ``fp8_share`` fp8 GEMMs: their draw ``power_gemm_fp8_w`` (where set) blended with
        ``power_gemm_w`` (bf16 GEMMs, attention) by time."""
        if self.power_cap_w == 0:
            return None
        gemm_w = self.power_gemm_w
        if fp8_share > 0 and self.power_gemm_fp8_w > 0:
            gemm_w = fp8_share * self.power_gemm_fp8_w + (1.0 - fp8_share) * gemm_w
        return PowerModel(self.power_cap_w, gemm_w, self.power_exponent,
                          self.power_other_w, self.power_idle_w)  # fmt: skip

    @property
    def notes(self) -> list[str]:
        """Lines a result must carry: says loudly when the parameters are estimates."""
        if not self.estimate:
            return []
        return [
            f"compute parameters for {self.gpu} are ESTIMATES, not fitted to measurements "
            f"of this GPU: {self.basis}"
        ]

    @property
    def summary(self) -> dict[str, Any]:
        """JSON-ready description: GPU, estimate flag, basis, validation."""
        return {
            "gpu": self.gpu,
            "estimate": self.estimate,
            "basis": self.basis,
            "validation": dict(self.validation),
        }

    def overridden(self, data: Mapping[str, object], place: str = "compute") -> ComputeParams:
        """A copy with keys of ``data`` (a profile's ``compute:`` section) replaced.

        Unknown keys raise ConfigError naming them. Overridden values are measured, so
        the basis says so.

        >>> compute_params("H100-SXM").overridden({"launch_overhead_s": "2us"}).launch_overhead_s
        2e-06
        """
        values: dict[str, Any] = {}
        for key, value in data.items():
            if key not in _TUNABLE and key != "vector_dtype":
                raise ConfigError(
                    f"{place}.{key}: unknown key; allowed: {', '.join(sorted(_TUNABLE))}, "
                    "vector_dtype"
                )
            values[key] = _coerce(key, value, place)
        if not values:
            return self
        basis = f"{self.basis}; {', '.join(sorted(values))} from {place}"
        return replace(self, basis=basis, **values)


def _coerce(key: str, value: object, place: str) -> object:
    if key == "vector_dtype":
        if not isinstance(value, str):
            raise ConfigError(f"{place}.{key}: expected a dtype name, got {value!r}")
        return value
    if key in _TIMES:
        return parse_time(value, f"{place}.{key}")
    if key == "sm_count":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{place}.{key}: expected an integer >= 1, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{place}.{key}: expected a number, got {value!r}")
    return float(value)


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sm_count: int
    gemm_tile: tuple[int, int]
    mamf_shape: tuple[int, int, int] | None = None
    fp8_mamf_shape: tuple[int, int, int] | None = None
    sustained_clock: float | None = None
    attention_table: str | None = None
    conv_eff: float | None = None
    conv_tile: tuple[int, int] | None = None
    matmul_eff_max: float
    fp8_matmul_eff_max: float
    matmul_half_flops: float
    matmul_k_half: float
    matmul_training_factor: float
    attn_eff_max: float
    attn_bwd_ratio: float
    attn_seq_half: float
    attn_head_dim_half: float
    attn_odd_head_dim_eff: float
    mem_eff: float
    mem_training_factor: float | None = None
    stream_eff: float
    vector_eff: float
    vector_dtype: str
    launch_overhead: str
    optimizer_tensor_overhead: str | None = None
    fp32_matmul_eff_max: float | None = None
    comm_interference: float
    power_cap_w: float | None = None
    power_gemm_w: float | None = None
    power_exponent: float | None = None
    power_other_w: float | None = None
    power_idle_w: float | None = None
    power_gemm_fp8_w: float | None = None
    estimate: bool
    basis: str
    validation: dict[str, Any] = {}
    sources: dict[str, str]


#: Sources of the opt-in keys an entry leaves out (their defaults turn them off).
_OFF_SOURCES = {
    "fp32_matmul_eff_max": "not measured: fp32 GEMMs use matmul_eff_max",
    "optimizer_tensor_overhead_s": "not measured: 0, a fused multi-tensor optimizer",
    "host_dispatch_s": "a host property, not the GPU's: 0, the host keeps ahead of the GPU "
    "(a profile sets the value its host measured)",
    "sustained_clock": "not measured: 1, the micro-benchmark clock (matmul_training_factor "
    "carries the difference where it was fitted)",
    "conv_eff": "not measured: 1, convolutions at the GEMM ceiling",
    **{
        key: "not measured: no power-limit clock model (sustained_clock applies as set)"
        for key in _POWER
    },
    "mem_training_factor": "not split: 1, mem_eff is the fitted training-level value (no "
    "kernel-level measurement of this GPU's elementwise kernels separates them)",
}
_UNSOURCED = frozenset(
    {
        "estimate",
        "basis",
        "validation",
        "sources",
        "vector_dtype",
        "mamf_shape",
        "fp8_mamf_shape",
        "attention_table",
    }
)
_INHERIT = "inherit"  # {from: GPU, keys: [...]}: values taken from another entry


def _resolved(raw: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Entries with ``inherit`` replaced by the named entry's values and sources.

    An entry may take some values from another (``inherit: {from: H100-SXM, keys:
    [...]}``); it must then be an estimate, and its sources name where they came from.
    """
    out: dict[str, dict[str, Any]] = {}
    for name, body in raw.items():
        if not isinstance(body, dict):
            raise TopologyError(f"catalog compute.yaml: {name}: expected a mapping of fields")
        spec = body.get(_INHERIT)
        if spec is None:
            out[str(name)] = body
            continue
        base = raw.get(str(spec.get("from"))) if isinstance(spec, dict) else None
        keys = spec.get("keys", []) if isinstance(spec, dict) else []
        if not isinstance(base, dict) or _INHERIT in base or not isinstance(keys, list):
            raise TopologyError(
                f"catalog compute.yaml: {name}.inherit: needs from: <an entry without inherit> "
                "and keys: [...]"
            )
        if body.get("estimate") is not True:
            raise TopologyError(f"catalog compute.yaml: {name}: inherits values, so estimate: true")
        merged = {k: v for k, v in body.items() if k != _INHERIT}
        sources = dict(merged.get("sources") or {})
        for key in keys:
            if key in merged or key not in base:
                raise TopologyError(f"catalog compute.yaml: {name}.inherit: bad key {key!r}")
            merged[key] = base[key]
            sources[key] = f"estimate: {spec['from']}'s value ({base['sources'].get(key, '')})"
        merged["sources"] = sources
        out[str(name)] = merged
    return out


@cache
def _entries() -> dict[str, ComputeParams]:
    text = resources.files("topologies.catalog").joinpath("compute.yaml").read_text("utf-8")
    raw = load_shipped_yaml(text, "catalog compute.yaml")
    if not isinstance(raw, dict):
        raise TopologyError("catalog compute.yaml: expected a mapping of GPU names to entries")
    out = {}
    for name, body in _resolved(raw).items():
        e = _entry(_Entry, name, body, "compute.yaml", _UNSOURCED)
        values = e.model_dump(exclude={"launch_overhead", "gemm_tile", "conv_tile", "mamf_shape",
                                       "fp8_mamf_shape", "optimizer_tensor_overhead"})  # fmt: skip
        values = {k: v for k, v in values.items() if v is not None}
        if e.optimizer_tensor_overhead is not None:
            values["optimizer_tensor_overhead_s"] = parse_time(
                e.optimizer_tensor_overhead, f"{name}.optimizer_tensor_overhead"
            )
        values["sources"] = {**_OFF_SOURCES, **values["sources"]}
        shape = tuple(int(x) for x in e.mamf_shape) if e.mamf_shape else None
        fp8 = tuple(int(x) for x in e.fp8_mamf_shape) if e.fp8_mamf_shape else None
        try:
            out[name] = ComputeParams(
                gpu=name,
                gemm_tile=(int(e.gemm_tile[0]), int(e.gemm_tile[1])),
                conv_tile=(int(e.conv_tile[0]), int(e.conv_tile[1])) if e.conv_tile else None,
                mamf_shape=shape,  # type: ignore[arg-type]
                fp8_mamf_shape=fp8,  # type: ignore[arg-type]
                launch_overhead_s=parse_time(e.launch_overhead, f"{name}.launch_overhead"),
                **values,
            )
        except ConfigError as err:
            raise TopologyError(f"catalog compute.yaml: {name}: {err}") from None
    return out


def compute_entry_names() -> list[str]:
    """GPU names with an entry in ``compute.yaml``.

    >>> "A100-SXM-80GB" in compute_entry_names()
    True
    """
    return sorted(_entries())


#: Overridden parameters per (GPU, overrides), kept so that the steps of one profile
#: share one (frozen) object: what is costed per compute parameters is then kept too
#: (:func:`sim.training.graph.costs._unit_costs` keys on the object).
_OVERRIDDEN: Kept[ComputeParams] = Kept(limit=64)


def compute_params(gpu: str, overrides: Mapping[str, object] | None = None) -> ComputeParams:
    """The compute parameters of catalog GPU ``gpu``, with ``overrides`` laid over them.

    Raises
    ------
    ConfigError
        No entry for ``gpu`` in ``topologies/catalog/compute.yaml`` (the message lists
        the GPUs that have one), or a bad override.
    """
    entries = _entries()
    if gpu not in entries:
        raise ConfigError(
            f"GPU {gpu!r} has no compute parameters in topologies/catalog/compute.yaml; "
            f"add an entry (its sources and whether it is an estimate) or use one of: "
            f"{', '.join(sorted(entries))}"
        )
    base = entries[gpu]
    if not overrides:
        return base
    # an unhashable value is not kept: the override says what is wrong with it
    key = (gpu, tuple((k, type(v), v) for k, v in overrides.items()))
    return _OVERRIDDEN.get(key, (), lambda: base.overridden(overrides, "profile.compute"))


def tunable_keys() -> tuple[str, ...]:
    """Numeric keys a profile or a fit may set.

    >>> "attn_eff_max" in tunable_keys()
    True
    """
    return _TUNABLE
