"""Pydantic models of the profile file (``sim.profile``): they validate; the loader builds.

A profile's ``collectives`` section may override any subset of
``sim/collectives/defaults.yaml`` and its ``compute`` section any tunable key of the
compute model (``sim.training.compute.params``), so every key of those sections is
optional here; the merged parameter tree is then built (and, but for shipped files, checked whole) by
:class:`sim.collectives.params.CollectiveParams` and
:meth:`sim.training.compute.params.ComputeParams.overridden`. The same models give the
shipped JSON Schema (``clustersim schema profile``).

Rules: unknown keys are refused at every level; counts are whole numbers >= 1 (never a
bool); efficiencies and fractions lie in (0, 1]; latencies are >= 0 microseconds; rates,
sizes and bandwidths are finite and > 0; ``pipeline.min_chunks <= max_chunks``;
``hardware.nodes <= hardware.gpus``.

>>> from sim.validation import validate_model
>>> validate_model(CollectivesSection, {"channels": {"per_nic": True}}, "p.yaml")
Traceback (most recent call last):
...
sim.errors.ConfigError: p.yaml: channels.per_nic: expected int, got True
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, Field, Strict, model_validator

from sim.validation import (
    STRICT_MODEL,
    ByteCount,
    Count,
    NonNegative,
    Positive,
    StrictText,
    Text,
)

__all__ = [
    "CollectivesSection",
    "ComputeSection",
    "ErrorBarModel",
    "HardwareModel",
    "ProfileModel",
]

_STRICT = STRICT_MODEL
_Str = StrictText
#: An efficiency or fraction: a number in (0, 1].
Fraction = Annotated[float, Strict(), Field(gt=0, le=1, allow_inf_nan=False)]
#: A fraction that may be 0 (fp8 GEMM efficiency of a GPU without fp8; interference).
Fraction0 = Annotated[float, Strict(), Field(ge=0, le=1, allow_inf_nan=False)]
Protocol = Literal["ll", "ll128", "simple"]


class HardwareModel(BaseModel):
    """What a profile was measured on (``sim.profile.Hardware``)."""

    model_config = _STRICT
    gpu: Text
    links: dict[_Str, _Str] = {}
    gpus: Count | None = None
    nodes: Count | None = None
    backend: Text | None = None
    device: Text | None = None

    @model_validator(mode="after")
    def _nodes_hold_gpus(self) -> HardwareModel:
        if self.gpus is not None and self.nodes is not None and self.nodes > self.gpus:
            raise ValueError(f"nodes ({self.nodes}) cannot exceed gpus ({self.gpus})")
        return self


class ErrorBarModel(BaseModel):
    """One validated error of the parameters (``sim.profile.ErrorBar``)."""

    model_config = _STRICT
    what: Text
    metric: Text
    value: Annotated[float, Strict(), Field(ge=0, lt=1e9, allow_inf_nan=False)]
    cases: Count
    source: Text


class _Sourced(BaseModel):
    model_config = _STRICT
    source: _Str | None = None


class Efficiency(_Sourced):
    """``{value: 0.82, source: ...}`` (a bare number is accepted too)."""

    value: Fraction


class LinkEfficiency(BaseModel):
    model_config = _STRICT
    nvlink: Union[Fraction, Efficiency, None] = None  # noqa: UP007
    pcie: Union[Fraction, Efficiency, None] = None  # noqa: UP007
    net: Union[Fraction, Efficiency, None] = None  # noqa: UP007


class ProtocolEntry(_Sourced):
    efficiency: Fraction | None = None


class Protocols(BaseModel):
    model_config = _STRICT
    ll: ProtocolEntry | None = None
    ll128: ProtocolEntry | None = None
    simple: ProtocolEntry | None = None


class PerProtocolUs(BaseModel):
    """Latency per protocol, microseconds (>= 0)."""

    model_config = _STRICT
    ll: NonNegative | None = None
    ll128: NonNegative | None = None
    simple: NonNegative | None = None


class StepLatency(BaseModel):
    model_config = _STRICT
    nvlink: PerProtocolUs | None = None
    pcie: PerProtocolUs | None = None
    net: PerProtocolUs | None = None


class Algorithm(_Sourced):
    efficiency: Fraction | None = None
    protocols: list[Protocol] | None = None
    base_latency_us: PerProtocolUs | None = None
    step_latency_us: StepLatency | None = None


class PerProtocolCount(BaseModel):
    model_config = _STRICT
    ll: Count | None = None
    ll128: Count | None = None
    simple: Count | None = None


class PerProtocolPositive(BaseModel):
    model_config = _STRICT
    ll: Positive | None = None
    ll128: Positive | None = None
    simple: Positive | None = None


class Channels(_Sourced):
    threads: PerProtocolCount | None = None
    thread_threshold_bytes: PerProtocolPositive | None = None
    bandwidth_GBps: PerProtocolPositive | None = None
    per_server: Count | None = None
    per_nic: Count | None = None
    slice_bytes: ByteCount | None = None


class Pipeline(_Sourced):
    chunk_bytes: ByteCount | None = None
    max_chunks: Count | None = None
    min_chunks: Count | None = None

    @model_validator(mode="after")
    def _min_below_max(self) -> Pipeline:
        lo, hi = self.min_chunks, self.max_chunks
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"min_chunks ({lo}) must be <= max_chunks ({hi})")
        return self


class Transport(_Sourced):
    efficiency: Fraction | None = None
    socket_GBps: Positive | None = None
    threads: Count | None = None
    sockets_per_thread: Count | None = None


class Gloo(_Sourced):
    local_GBps: Positive | None = None


class CollectivesSection(_Sourced):
    """A profile's ``collectives``: any subset of ``sim/collectives/defaults.yaml``."""

    link_efficiency: LinkEfficiency | None = None
    protocols: Protocols | None = None
    algorithms: dict[_Str, Algorithm] | None = None
    pipeline: Pipeline | None = None
    channels: Channels | None = None
    transports: dict[_Str, Transport] | None = None
    backend: Literal["nccl", "gloo"] | None = None
    gloo: Gloo | None = None


#: ``launch_overhead_s``: seconds, or a time string such as ``"2us"`` (sim.units).
_Time = Union[NonNegative, _Str]  # noqa: UP007


class ComputeSection(BaseModel):
    """A profile's ``compute``: tunable keys of ``sim.training.compute.params`` (any subset)."""

    model_config = _STRICT
    matmul_eff_max: Fraction | None = None
    fp8_matmul_eff_max: Fraction0 | None = None
    fp32_matmul_eff_max: Fraction0 | None = None
    matmul_training_factor: Fraction | None = None
    attn_eff_max: Fraction | None = None
    attn_bwd_ratio: Fraction | None = None
    mem_eff: Fraction | None = None
    mem_training_factor: Fraction | None = None
    vector_eff: Fraction | None = None
    comm_interference: Fraction0 | None = None
    stream_eff: Fraction | None = None
    attn_odd_head_dim_eff: Fraction | None = None
    sustained_clock: Fraction | None = None
    conv_eff: Fraction | None = None
    matmul_half_flops: NonNegative | None = None
    matmul_k_half: NonNegative | None = None
    attn_seq_half: NonNegative | None = None
    attn_head_dim_half: NonNegative | None = None
    launch_overhead_s: _Time | None = None
    optimizer_tensor_overhead_s: _Time | None = None
    host_dispatch_s: _Time | None = None
    sm_count: Count | None = None
    vector_dtype: Literal["fp32", "tf32", "bf16", "fp16", "fp8"] | None = None
    # the power-limit clock (sim.training.compute.power): watts, and the exponent
    power_cap_w: NonNegative | None = None
    power_gemm_w: NonNegative | None = None
    power_exponent: NonNegative | None = None
    power_other_w: NonNegative | None = None
    power_idle_w: NonNegative | None = None
    power_gemm_fp8_w: NonNegative | None = None


class ProfileModel(BaseModel):
    """The whole profile file (see ``sim.profile``'s module docstring)."""

    model_config = _STRICT
    schema_: Literal["clustersim.profile/1"] = Field(alias="schema")
    name: Text | None = None
    hardware: HardwareModel | None = None
    error_bars: list[ErrorBarModel] | None = None
    provenance: dict[_Str, Any] | None = None
    collectives: CollectivesSection | None = None
    compute: ComputeSection | None = None
