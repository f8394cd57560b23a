"""One row of a sweep file as a model: what a sweep writes and what its readers check
(``--resume`` checks each row of a partial file with it; the report reads sweeps with it)."""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sim.studies.columns import SWEEP_PARTS

__all__ = ["SweepRow"]


class SweepRow(BaseModel):
    """One point of a sweep: the grid keys it varied, then its metrics.

    Every column not named in :data:`SWEEP_METRICS` is a grid key (kept in
    ``model_extra``, in file order). A failed point has a ``reason`` and no metrics;
    any other point needs all of ``step_time_s``, ``tokens_per_s``, ``tflops_per_gpu``,
    ``mfu``, ``memory_per_gpu_bytes`` and ``fits``. Non-finite numbers read as missing.
    Files written before rows carried their breakdowns read with empty dicts there.

    Attributes
    ----------
    point : int or None
        The point's index in the sweep (its order in the grid), when the file has it.
    gpus : int
        GPUs of the point (0 for a failed point whose cluster could not be built).
    gpu : str or None
        GPU model (catalog name), e.g. ``"H100-SXM"``.
    step_time_s, tokens_per_s, tflops_per_gpu, mfu, memory_per_gpu_bytes : float or None
        As in :class:`RunRecord`.
    throughput_unit : str or None
        What ``tokens_per_s`` counts: ``"tokens/s"``, or ``"images/s"`` for CNNs.
    hbm_bytes : float or None
        HBM capacity of one GPU, bytes.
    fits : bool or None
        Whether it fits in memory.
    cost_per_step_usd : float or None
        Cost of one step in US dollars, when the scenario has a price.
    profile : str or None
        The parameter profile the point was simulated with (``defaults``: shipped ones).
    scaling_efficiency : float or None
        Throughput per GPU over that of the smallest point of the same series, a fraction
        (:mod:`sim.studies.efficiency`); None where the series has one GPU count only.
    scaling_series : str or None
        The series the point belongs to: the values of the keys that do not set the GPU
        count, and the GPU model (``""`` when the whole sweep is one series).
    scaling_reference_point : int or None
        The ``point`` the efficiency is measured against.
    breakdown, memory_breakdown, link_bytes_by_scope : dict[str, float]
        From the ``breakdown.*``, ``memory_breakdown.*`` and ``link_bytes_by_scope.*``
        columns (seconds, bytes, bytes): as in :class:`RunRecord`.
    reason : str or None
        Why the point could not be simulated.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    point: int | None = Field(default=None, ge=0)
    gpus: int = Field(default=0, ge=0)
    gpu: str | None = None
    step_time_s: float | None = Field(default=None, gt=0.0)
    tokens_per_s: float | None = Field(default=None, ge=0.0)
    throughput_unit: str | None = None
    tflops_per_gpu: float | None = Field(default=None, ge=0.0)
    mfu: float | None = Field(default=None, ge=0.0)
    memory_per_gpu_bytes: float | None = Field(default=None, ge=0.0)
    hbm_bytes: float | None = None
    fits: bool | None = None
    cost_per_step_usd: float | None = None
    profile: str | None = None
    scaling_efficiency: float | None = None
    scaling_series: str | None = None
    scaling_reference_point: int | None = None
    breakdown: dict[str, float] = Field(default_factory=dict)
    memory_breakdown: dict[str, float] = Field(default_factory=dict)
    link_bytes_by_scope: dict[str, float] = Field(default_factory=dict)
    reason: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _nest_parts(cls, data: Any) -> Any:
        """``breakdown.compute`` -> ``breakdown["compute"]`` (flat files to nested fields)."""
        if not isinstance(data, dict):
            return data
        out: dict[str, Any] = {}
        parts: dict[str, dict[str, float]] = {f: {} for f in SWEEP_PARTS}
        for key, value in data.items():
            field, dot, name = str(key).partition(".")
            if dot and field in SWEEP_PARTS:
                if isinstance(value, (int, float)) and math.isfinite(value):
                    parts[field][name] = float(value)
            else:
                out[key] = value
        for field, values in parts.items():
            if values and not isinstance(out.get(field), dict):
                out[field] = values
        return out

    @field_validator(
        "step_time_s",
        "tokens_per_s",
        "tflops_per_gpu",
        "mfu",
        "memory_per_gpu_bytes",
        "hbm_bytes",
        "cost_per_step_usd",
        "scaling_efficiency",
        mode="before",
    )
    @classmethod
    def _nan_is_missing(cls, v: Any) -> Any:
        return None if isinstance(v, float) and not math.isfinite(v) else v

    @field_validator("gpus", mode="before")
    @classmethod
    def _unknown_gpus(cls, v: Any) -> Any:
        return 0 if v is None else v

    @field_validator("scaling_series", "gpu", "profile", "throughput_unit", mode="before")
    @classmethod
    def _text(cls, v: Any) -> Any:
        """CSV reads an empty cell as None and a number-like label as a number."""
        return None if v is None else str(v)

    @model_validator(mode="after")
    def _metrics_or_reason(self) -> SweepRow:
        if self.reason:
            return self
        if self.gpus < 1:
            raise ValueError("gpus must be >= 1 for a simulated point")
        needed = ("step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu")
        missing = [k for k in (*needed, "memory_per_gpu_bytes", "fits") if getattr(self, k) is None]
        if missing:
            raise ValueError(f"missing {', '.join(missing)} (a failed point needs a 'reason')")
        return self

    @property
    def grid(self) -> dict[str, Any]:
        """The grid keys of this point and their values, in file order."""
        return dict(self.model_extra or {})

    @property
    def ok(self) -> bool:
        """True when the point was simulated (it has metrics, not a ``reason``)."""
        return not self.reason
