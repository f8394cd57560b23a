"""The ``variability:`` scenario section (a pydantic model; opt-in, every knob neutral by default).

::

    variability:
      compute_cv: 0.03               # per-GPU step compute time: coefficient of variation
      distribution: lognormal        # normal | lognormal | gamma (all with mean 1)
      straggler_probability: 0.001   # per GPU per step
      straggler_slowdown: 1.5        # a straggler's compute takes 1.5x as long
      throttle_fraction: 0.01        # share of GPUs that run throttled, every step
      throttle_clock_drop: 0.1       # a throttled GPU's compute takes 1.1x as long
      network_cv: 0.1                # each exposed communication phase (or network_p99_p50)
      stage_imbalance: 1.05          # busiest pipeline stage's load over the mean stage's
      moe_skew: 1.3                  # busiest expert's load over the mean expert's

Where the magnitudes come from (typical values, not defaults; every default is "none"):

- ``compute_cv``: Sinha et al., "Not All GPUs Are Created Equal", SC22, arXiv:2208.11035,
  measured 8% (max 22%) average performance variation between GPUs of one SKU in five
  HPC clusters, with outliers up to 1.5x slower than the median GPU.
- ``straggler_*``: Lin et al., "Understanding Stragglers in Large Model Training Using
  What-if Analysis", OSDI'25, arXiv:2505.05713 (five months of ByteDance LLM jobs: a few
  slow workers stall synchronous training, often for causes other than hardware faults);
  Jiang et al., "MegaScale", NSDI'24, arXiv:2402.15627 (slow nodes at 10,000+ GPUs).
- ``throttle_*``: the 1.5x outliers of arXiv:2208.11035 come from power management
  (clocks lowered under power and thermal limits).
- ``network_*``: Dean and Barroso, "The Tail at Scale", CACM 56(2), 2013: a step that waits
  for many parallel operations sees their tail, not their median.
- ``moe_skew``: Fedus et al., "Switch Transformers", arXiv:2101.03961, size expert buffers
  with a capacity factor above 1 (1.0 and 1.25 among those studied) because routing loads
  experts unevenly; the skew is the load the busiest expert actually gets.

>>> from sim.packaged import validate_section
>>> validate_section(VariabilityConfig, {"compute_cv": 0.05}, "variability").compute_cv
0.05
>>> validate_section(VariabilityConfig, {"distribution": "weibull"}, "variability")
Traceback (most recent call last):
...
sim.errors.ConfigError: variability.distribution: Input should be 'normal', 'lognormal' or 'gamma' (got 'weibull')
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sim.packaged import validate_section

__all__ = ["DISTRIBUTIONS", "Z99", "VariabilityConfig", "read_variability"]

DISTRIBUTIONS = ("normal", "lognormal", "gamma")
#: The standard normal's 99th percentile: a lognormal's p99/p50 ratio is exp(Z99 * sigma).
Z99 = 2.3263478740408408


#: Largest coefficient of variation accepted (a spread ten times the mean is no longer a
#: step-time distribution; 1e300 overflowed the samples' squares).
MAX_CV = 10.0
#: Largest slowdown, tail ratio, imbalance or skew factor accepted (x1000).
MAX_FACTOR = 1000.0


class VariabilityConfig(BaseModel):
    """Per-GPU and per-phase variability of a training step (see the module docstring).

    Attributes
    ----------
    compute_cv : float
        Coefficient of variation of one GPU's compute time in one step (its multiplier has
        mean 1). ``normal`` multipliers are clipped at 0 (probability ``Phi(-1/cv)``).
    distribution : str
        ``normal``, ``lognormal`` or ``gamma`` (``gamma`` with ``cv = 1`` is exponential).
    straggler_probability : float
        Probability, per GPU per step, that the GPU straggles (0-1).
    straggler_slowdown : float
        A straggler's compute-time multiplier (>= 1).
    throttle_fraction : float
        Share of the GPUs (rounded to a whole number) that are throttled in every step; which
        ones is drawn once from the seed, as persistent thermal/power outliers are.
    throttle_clock_drop : float
        A throttled GPU's compute takes ``1 + throttle_clock_drop`` times as long (0.1 = 10%
        slower). Compute-bound kernels slow by ``1/(1 - drop)`` under a clock drop and
        memory-bound ones less, so this is the user's effective figure, not a clock ratio.
    network_cv : float
        Coefficient of variation of each exposed communication phase's time in a step
        (lognormal, mean 1). Exclusive with ``network_p99_p50``.
    network_p99_p50 : float or None
        Alternatively, the phase time's p99 over its p50 (lognormal with median 1: the
        simulated time is the typical one, and the tail only adds).
    stage_imbalance : float
        The busiest pipeline stage's compute load over the mean stage's (>= 1, < stages).
    moe_skew : float
        The busiest expert's load over the mean expert's (>= 1): scales the expert share of
        compute and the exposed EP (all-to-all) time.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    compute_cv: float = Field(default=0.0, ge=0, le=MAX_CV, allow_inf_nan=False)
    distribution: Literal["normal", "lognormal", "gamma"] = "normal"
    straggler_probability: float = Field(default=0.0, ge=0, le=1)
    straggler_slowdown: float = Field(default=1.5, ge=1, le=MAX_FACTOR, allow_inf_nan=False)
    throttle_fraction: float = Field(default=0.0, ge=0, le=1)
    throttle_clock_drop: float = Field(default=0.1, ge=0, le=MAX_FACTOR, allow_inf_nan=False)
    network_cv: float = Field(default=0.0, ge=0, le=MAX_CV, allow_inf_nan=False)
    network_p99_p50: float | None = Field(default=None, ge=1, le=MAX_FACTOR, allow_inf_nan=False)
    stage_imbalance: float = Field(default=1.0, ge=1, le=MAX_FACTOR, allow_inf_nan=False)
    moe_skew: float = Field(default=1.0, ge=1, le=MAX_FACTOR, allow_inf_nan=False)

    @model_validator(mode="after")
    def _one_network_tail(self) -> VariabilityConfig:
        if self.network_cv > 0 and self.network_p99_p50 is not None:
            raise ValueError("give network_cv or network_p99_p50, not both")
        return self

    def network_lognormal(self) -> tuple[float, float]:
        """(mu, sigma) of the log of a phase's time multiplier; (0, 0) without a tail.

        >>> mu, sigma = VariabilityConfig(network_p99_p50=2.0).network_lognormal()
        >>> mu, round(math.exp(Z99 * sigma), 12)
        (0.0, 2.0)
        """
        if self.network_p99_p50 is not None:
            return 0.0, math.log(self.network_p99_p50) / Z99
        sigma2 = math.log1p(self.network_cv**2)
        return -sigma2 / 2, math.sqrt(sigma2)


def read_variability(value: object) -> VariabilityConfig:
    """The scenario's ``variability:`` section, validated (one-line ConfigError otherwise)."""
    return validate_section(VariabilityConfig, value, "variability")
