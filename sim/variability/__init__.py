"""Variability over a simulated step: jitter, stragglers, throttling, network tails, imbalance.

A layer over a :class:`~sim.result.StepResult` (DESIGN: "beyond the ideal step"):
:func:`sample_step_times` runs a seeded Monte Carlo over the ideal step's breakdown and
returns a :class:`VariabilityResult`; the scenario's ``variability:`` section is a
:class:`VariabilityConfig`.

>>> from sim.variability import Groups, VariabilityConfig, sample_breakdown
>>> cfg = VariabilityConfig(throttle_fraction=0.25, throttle_clock_drop=0.1)
>>> round(sample_breakdown({"compute": 2.0}, 2.0, Groups(dp=8), cfg, 10, 0).mean_slowdown, 12)
1.1
"""

from __future__ import annotations

from sim.variability.config import DISTRIBUTIONS, VariabilityConfig
from sim.variability.moe import expert_compute_share
from sim.variability.result import VariabilityResult
from sim.variability.sample import Groups, sample_breakdown, sample_step_times

__all__ = [
    "DISTRIBUTIONS",
    "Groups",
    "VariabilityConfig",
    "VariabilityResult",
    "expert_compute_share",
    "sample_breakdown",
    "sample_step_times",
]
