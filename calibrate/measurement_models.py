"""Pydantic models of the measurement file: they validate, then the dataclasses are built.

The file layout and units are described in :mod:`calibrate.measurements`; these models
hold its rules: every key known (``extra="forbid"``), strict types (an ``int`` where a
count belongs, never a bool; a number never a string), finite floats, times > 0,
bandwidths and sizes >= 0, counts >= 1, and the rules across fields (a meta's ``nodes``
cannot exceed its ``world_size``; a step record's ``time_s`` lies within its step times).
:func:`calibrate.measurements.measurements_from_dict` runs them through
:func:`sim.validation.validate_model`, so each failure is one line naming the key path.

>>> from sim.validation import validate_model
>>> validate_model(MetaModel, {"source": "x", "created": "now", "world_size": 0}, "m.json")
Traceback (most recent call last):
...
sim.errors.ConfigError: m.json: world_size: must be >= 1, got 0
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, Field, Strict, model_validator

from calibrate.dtypes import DTYPE_BYTES
from sim.validation import STRICT_MODEL, Count, Finite, NonNegative, Positive, StrictText, Text

__all__ = [
    "CollectiveRecordModel",
    "ComputeRecordModel",
    "FileModel",
    "MetaModel",
    "StepRecordModel",
]

_STRICT = STRICT_MODEL


def _known_dtype(name: str) -> str:
    if name not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {name[:40]!r}; allowed: {', '.join(DTYPE_BYTES)}")
    return name


#: A record's element type: one of :data:`DTYPE_BYTES` (torch's spelling).
Dtype = Annotated[str, Strict(), AfterValidator(_known_dtype)]
_Str = StrictText
_Int = Annotated[int, Strict()]
_Size = Annotated[int, Strict(), Field(ge=0)]
#: A scalar of a free-form mapping (``details``, a step record's ``model``).
Scalar = Union[_Str, _Int, Finite, Annotated[bool, Strict()], None]  # noqa: UP007


class MetaModel(BaseModel):
    """Provenance of one file (fields as :class:`calibrate.measurements.Meta`)."""

    model_config = _STRICT
    source: Text
    created: Text
    hosts: list[_Str] = []
    gpu_model: _Str | None = None
    driver: _Str | None = None
    torch_version: _Str | None = None
    nccl_version: _Str | None = None
    world_size: Count = 1
    nodes: Count | None = None
    gpus_per_node: Count | None = None
    backend: _Str | None = None
    time_statistic: _Str = "median"
    spread: _Str | None = None
    notes: list[_Str] = []
    details: dict[str, Scalar] = {}

    @model_validator(mode="after")
    def _nodes_hold_ranks(self) -> MetaModel:
        if self.nodes is not None and self.nodes > self.world_size:
            raise ValueError(
                f"nodes ({self.nodes}) cannot exceed world_size ({self.world_size}): "
                "every node runs at least one rank"
            )
        return self


class CollectiveRecordModel(BaseModel):
    """One collective at one size (fields as :class:`calibrate.measurements.CollectiveRecord`)."""

    model_config = _STRICT
    op: Text
    size_bytes: _Size
    count: _Size
    dtype: Dtype
    time_s: Positive
    time_spread_s: NonNegative | None
    algbw_GBps: NonNegative
    busbw_GBps: NonNegative
    in_place: Annotated[bool, Strict()]
    n_ranks: Count
    iters: Count | None


class ComputeRecordModel(BaseModel):
    """One kernel on one device (fields as :class:`calibrate.measurements.ComputeRecord`)."""

    model_config = _STRICT
    op: Text
    shape: list[_Size]
    dtype: Dtype
    flops: NonNegative
    bytes: NonNegative
    time_s: Positive
    time_spread_s: NonNegative | None
    achieved_flops_per_s: NonNegative
    achieved_Bps: NonNegative
    iters: Count
    device: _Str


class StepRecordModel(BaseModel):
    """One training-step job (fields as :class:`calibrate.measurements.StepRecord`)."""

    model_config = _STRICT
    model: dict[str, Scalar]
    device: _Str
    optimizer: _Str
    n_params: Count
    tokens_per_step: Count
    model_flops_per_step: Positive
    warmup_steps: Annotated[int, Strict(), Field(ge=0)]
    time_s: Positive
    time_spread_s: NonNegative | None
    step_times_s: list[Positive]
    tokens_per_s: NonNegative
    achieved_flops_per_s: NonNegative

    @model_validator(mode="after")
    def _time_within_steps(self) -> StepRecordModel:
        # time_s summarises step_times_s (median, minimum or mean), so it lies within them; the
        # tolerance covers rounding of the written numbers.
        xs = self.step_times_s
        if xs and not min(xs) * (1 - 1e-6) <= self.time_s <= max(xs) * (1 + 1e-6):
            raise ValueError(
                f"time_s ({self.time_s}) must lie within step_times_s "
                f"[{min(xs)}, {max(xs)}] (it summarises them)"
            )
        return self


RECORD_MODELS: dict[str, type[BaseModel]] = {
    "collectives": CollectiveRecordModel,
    "compute": ComputeRecordModel,
    "step": StepRecordModel,
}


class FileModel(BaseModel):
    """The top level: schema, kind, meta; records are checked per kind afterwards."""

    model_config = _STRICT
    schema_: Literal["clustersim.measurements/1"] = Field(alias="schema")
    kind: Literal["collectives", "compute", "step"]
    meta: MetaModel
    records: list[Any]
