"""Failures, checkpoints, goodput and spot capacity: a layer over a simulated step.

DESIGN.md: "variability, failures, goodput, cost and energy are layers over a Result, not
flags threaded through the engine". Every entry point takes plain numbers (step time, job
size, parameter count, tokens) and returns a frozen dataclass with ``to_dict()``:

* :func:`goodput_estimate` - MTBI, checkpoint size and write time, Young/Daly/exact optimum
  intervals, expected goodput, time and cost to train (closed forms);
* :func:`simulate_goodput` - the same job as a seeded SimPy event simulation;
* :func:`spot_comparison` - spot against on-demand, and the break-even.

Scenario sections: ``reliability`` (:class:`ReliabilityConfig`) and ``spot``
(:class:`SpotConfig`); formulas and sources in docs/beyond-the-step.md.
"""

from sim.reliability.config import ReliabilityConfig, SpotConfig
from sim.reliability.estimate import GoodputEstimate, goodput_estimate
from sim.reliability.events import GoodputSimulation, SimulatedRun, simulate_goodput, simulate_run
from sim.reliability.interruptions import (
    Cause,
    FailureRates,
    Interruptions,
    failure_preset,
    failure_preset_names,
    job_interruptions,
)
from sim.reliability.intervals import daly_interval_s, exact_interval_s, young_interval_s
from sim.reliability.plan import JobPlan, job_plan
from sim.reliability.renewal import expected_wall_s, goodput, segment_breakdown
from sim.reliability.spot import SpotComparison, spot_comparison
from sim.reliability.storage import StorageTier, checkpoint_bytes, storage_tier, storage_tier_names

__all__ = [
    "Cause",
    "FailureRates",
    "GoodputEstimate",
    "GoodputSimulation",
    "Interruptions",
    "JobPlan",
    "ReliabilityConfig",
    "SimulatedRun",
    "SpotComparison",
    "SpotConfig",
    "StorageTier",
    "checkpoint_bytes",
    "daly_interval_s",
    "exact_interval_s",
    "expected_wall_s",
    "failure_preset",
    "failure_preset_names",
    "goodput",
    "goodput_estimate",
    "job_interruptions",
    "job_plan",
    "segment_breakdown",
    "simulate_goodput",
    "simulate_run",
    "spot_comparison",
    "storage_tier",
    "storage_tier_names",
    "young_interval_s",
]
