"""The ``reliability:`` and ``spot:`` scenario sections (pydantic models; both opt-in).

::

    reliability:
      failures: llama3-405b-h100     # failure-rate preset (failures.yaml)
      gpu_mtbf_h: 80000              # optional overrides, hours per component (.inf = never)
      restart_s: 600                 # detect + replace + relaunch + load, seconds
      storage: parallel-fs           # checkpoint tier (storage.yaml)
      checkpoint_bandwidth: 1TB/s    # optional: replace the tier's aggregate write bandwidth
      interval: daly                 # young | daly | exact | a number of steps
      simulate_runs: 20              # optional: also run the seeded event simulation N times
    spot:
      discount: 0.7                  # fraction off the on-demand price
      preemptions_per_node_hour: 0.002   # or monthly_interruption: 0.05
      restart_s: 1800                # reacquire capacity + relaunch after a preemption

>>> from sim.packaged import validate_section
>>> validate_section(ReliabilityConfig, {"interval": 500}, "reliability").interval
500
>>> validate_section(SpotConfig, {"discount": 0.7}, "spot")
Traceback (most recent call last):
...
sim.errors.ConfigError: spot: give exactly one of preemptions_per_node_hour or monthly_interruption
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator

from sim.errors import ConfigError
from sim.packaged import validate_section
from sim.reliability.interruptions import (
    FailureRates,
    Interruptions,
    failure_preset,
    job_interruptions,
)
from sim.reliability.storage import StorageTier, checkpoint_bytes, storage_tier
from sim.units import parse_bytes

__all__ = ["HOURS_PER_MONTH", "ReliabilityConfig", "SpotConfig", "read_reliability", "read_spot"]

#: Hours in a billing month as the cloud price lists count them (8760 h / 12).
HOURS_PER_MONTH = 730.0

_MTBF = Field(default=None, gt=0, description="hours per component; .inf = never fails")


class ReliabilityConfig(BaseModel):
    """Failures, checkpoints and restarts of the training job (see the module docstring).

    ``restart_s`` defaults to 600 s, an assumption: Daly's worked examples use R = 10 min, and
    an optimised recovery system restores 4,800 accelerators in 150 s (FlashRecovery,
    arXiv:2509.03047). It dominates goodput at scale; set it from your own logs.
    """

    model_config = ConfigDict(extra="forbid")

    failures: str = "llama3-405b-h100"
    gpu_mtbf_h: float | None = _MTBF
    link_mtbf_h: float | None = _MTBF
    node_mtbf_h: float | None = _MTBF
    software_mtbf_h: float | None = _MTBF
    restart_s: float = Field(default=600.0, ge=0, allow_inf_nan=False)
    storage: str = "parallel-fs"
    checkpoint_bandwidth: str | float | None = None
    checkpoint_bytes: str | float | None = None
    model_bytes_per_param: float = Field(default=2.0, ge=0, allow_inf_nan=False)
    optimizer_bytes_per_param: float = Field(default=12.0, ge=0, allow_inf_nan=False)
    interval: Literal["young", "daly", "exact"] | StrictInt = "daly"
    simulate_runs: StrictInt | None = Field(default=None, ge=2, description="event-simulation runs")

    @field_validator("interval", mode="before")
    @classmethod
    def _interval(cls, value: object) -> object:
        steps = isinstance(value, int) and not isinstance(value, bool) and value >= 1
        if not steps and value not in ("young", "daly", "exact"):
            raise ValueError("expected young, daly, exact or a number of steps >= 1")
        return value

    def rates(self) -> FailureRates:
        """The preset's per-component rates with this section's MTBF overrides applied."""
        overrides = {
            c: v
            for c, v in (
                ("gpu", self.gpu_mtbf_h),
                ("link", self.link_mtbf_h),
                ("node", self.node_mtbf_h),
                ("software", self.software_mtbf_h),
            )
            if v is not None
        }
        rates = failure_preset(self.failures)
        return rates.with_mtbf_h(overrides) if overrides else rates

    def tier(self) -> StorageTier:
        """The checkpoint storage tier, with ``checkpoint_bandwidth`` as its aggregate limit."""
        return storage_tier(self.storage, self.checkpoint_bandwidth)

    def job(self, gpus: int, gpus_per_node: int) -> Interruptions:
        """The interruption process of a job of this size under these rates."""
        return job_interruptions(self.rates(), gpus, gpus_per_node, self.restart_s)

    def checkpoint_size(self, params: float) -> float:
        """Checkpoint bytes: ``checkpoint_bytes`` when given, else from ``params``."""
        if self.checkpoint_bytes is not None:
            return parse_bytes(self.checkpoint_bytes, "reliability.checkpoint_bytes")
        return checkpoint_bytes(params, self.model_bytes_per_param, self.optimizer_bytes_per_param)


class SpotConfig(BaseModel):
    """Spot/preemptible capacity: a discount in exchange for preemptions of whole nodes."""

    model_config = ConfigDict(extra="forbid")

    discount: float = Field(ge=0, lt=1)
    preemptions_per_node_hour: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    monthly_interruption: float | None = Field(default=None, ge=0, lt=1)
    restart_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _one_rate(self) -> SpotConfig:
        if (self.preemptions_per_node_hour is None) == (self.monthly_interruption is None):
            raise ValueError(
                "give exactly one of preemptions_per_node_hour or monthly_interruption"
            )
        return self

    def preemption_rate_per_node_s(self) -> float:
        """Preemptions per node per second.

        ``monthly_interruption`` is the fraction ``f`` of instances interrupted in a month, the
        figure AWS's Spot Instance Advisor publishes in bands (<5%, 5-10%, 10-15%, 15-20%,
        >20%); with exponential lifetimes ``rate = -ln(1 - f) / 730 h``.

        >>> round(SpotConfig(discount=0.6, monthly_interruption=0.1).preemption_rate_per_node_s() * 3600, 6)
        0.000144
        """
        if self.preemptions_per_node_hour is not None:
            return self.preemptions_per_node_hour / 3600.0
        assert self.monthly_interruption is not None  # the validator guarantees one of the two
        return -math.log1p(-self.monthly_interruption) / (HOURS_PER_MONTH * 3600.0)


def read_reliability(value: object) -> ReliabilityConfig:
    """The scenario's ``reliability:`` section, validated (one-line ConfigError otherwise)."""
    return validate_section(ReliabilityConfig, value, "reliability")


def read_spot(value: object, reliability: ReliabilityConfig | None) -> SpotConfig:
    """The scenario's ``spot:`` section, validated; it needs a ``reliability:`` section (its
    failures and checkpoints are the on-demand baseline).

    Raises
    ------
    ConfigError
        A bad key or value, or no ``reliability`` section.
    """
    spot = validate_section(SpotConfig, value, "spot")
    if reliability is None:
        raise ConfigError(
            "spot: needs a reliability section (its failures and checkpoints are the "
            "on-demand baseline); add 'reliability: {}' for the defaults"
        )
    return spot
