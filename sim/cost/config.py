"""The ``price:`` and ``energy:`` scenario sections (pydantic models).

``price`` keeps today's ``gpu_hour_usd`` and adds dated, sourced presets (``prices.yaml``)
plus the user's own entries::

    price:
      preset: lambda-h100            # or one of the entries below
      entries:
        my-quote: {gpu: H100-SXM, gpus_per_server: 8, server_hour_usd: 16.0,
                   as_of: "2026-10-01", source: "signed quote"}

``energy`` is opt-in::

    energy:
      pue: hyperscale                # a preset (facility.yaml) or a number >= 1
      grid: us-average               # a preset or grams CO2e per kWh
      server_w_per_gpu: 350          # CPUs, memory, NICs, fans per GPU (W)
      network_w_per_gpu: null        # switches, NICs and optics per GPU (W); null: the
                                     # fabric's bill of materials (sim.cost.bom), else 0
      gpu_idle_w: null               # override the GPU's idle draw (W)
      gpu_busy_w: null               # override the GPU's busy draw (W; default its TDP)
      utilisation: null              # override the busy fraction the caller passes

>>> from sim.packaged import validate_section
>>> validate_section(PriceConfig, {"gpu_hour_usd": 2.0}, "price").gpu_hour_usd
2.0
>>> validate_section(EnergyConfig, {"pue": 0.9}, "energy")
Traceback (most recent call last):
...
sim.errors.ConfigError: energy.pue: PUE must be >= 1 (got 0.9)
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sim.catalog import gpu_names
from sim.packaged import validate_section

__all__ = ["EnergyConfig", "PriceConfig", "PriceEntry", "read_energy"]


class PriceEntry(BaseModel):
    """One price: a server-hour for ``gpus_per_server`` GPUs of type ``gpu``, dated and sourced."""

    model_config = ConfigDict(extra="forbid")

    gpu: str
    gpus_per_server: int = Field(ge=1)
    server_hour_usd: float = Field(ge=0, allow_inf_nan=False)
    kind: str = "on-demand"
    as_of: str
    source: str

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, value: str) -> str:
        if value not in gpu_names():
            raise ValueError(f"unknown GPU; known: {', '.join(gpu_names())}")
        return value

    @field_validator("as_of", "source")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty: every price needs a date and a source")
        return value


class PriceConfig(BaseModel):
    """``price``: a flat ``gpu_hour_usd``, a preset, or a user entry (``gpu_hour_usd`` wins)."""

    model_config = ConfigDict(extra="forbid")

    gpu_hour_usd: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    preset: str | None = None
    entries: dict[str, PriceEntry] = Field(default_factory=dict)


class EnergyConfig(BaseModel):
    """``energy``: facility overhead, grid intensity and the power model's knobs."""

    model_config = ConfigDict(extra="forbid")

    pue: float | str = "industry-average"
    grid: float | str = "us-average"
    server_w_per_gpu: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    network_w_per_gpu: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    gpu_idle_w: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    gpu_busy_w: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    utilisation: float | None = Field(default=None, ge=0, le=1)

    @field_validator("pue")
    @classmethod
    def _pue(cls, value: float | str) -> float | str:
        if isinstance(value, float) and not (math.isfinite(value) and value >= 1):
            raise ValueError("PUE must be >= 1")
        return value

    @field_validator("grid")
    @classmethod
    def _grid(cls, value: float | str) -> float | str:
        if isinstance(value, float) and not (math.isfinite(value) and value >= 0):
            raise ValueError("grid intensity must be a finite number of g CO2e/kWh >= 0")
        return value


def read_energy(value: object) -> EnergyConfig:
    """The scenario's ``energy:`` section, validated (one-line ConfigError otherwise)."""
    return validate_section(EnergyConfig, value, "energy")
