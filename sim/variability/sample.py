"""A seeded Monte Carlo over step times, from the ideal step's breakdown (no re-simulation).

Approximation (stated in every result's ``note``): the simulated step's breakdown is
rescaled, not re-simulated. Each sampled step draws one compute multiplier per GPU
(jitter x straggler x throttle) and one multiplier per exposed communication phase, and a
synchronous step waits for the slowest member of each synchronisation group:

- a TP group runs each layer at the pace of its slowest GPU: stage pace ``a = max over
  TP ranks`` (times the stage's load when ``stage_imbalance`` > 1);
- a pipeline of ``p`` stages with uniform passes takes ``(m - 1) t_max + sum_j t_j`` for
  ``m`` micro-batches (1F1B and GPipe fill and drain once), so its compute scales with the
  slowest stage and its bubble with the mean of the other stages:
  ``compute * max(a) + bubble * (sum(a) - max(a)) / (p - 1)``;
- the TP, EP and pipeline-send phases draw a multiplier per data-parallel replica (each
  replica's critical path), and the step waits for the slowest replica before the DP
  reduction; the DP reduction, ZeRO-3 and parameter gathers draw one per step (they span
  the replicas); the optimizer scales with the slowest GPU.

Multipliers are per step, not per kernel: ``compute_cv`` is the spread of a GPU's whole
compute time in a step. Network multipliers describe a whole phase, not single messages.
Breakdown parts this module does not know are held at their ideal value (named in
``notes``). EP groups are not modelled separately: ``moe_skew`` scales the expert share of
compute and the EP time deterministically.

>>> from sim.variability.config import VariabilityConfig
>>> r = sample_breakdown({"compute": 1.0}, 1.0, Groups(tp=8), VariabilityConfig(), 100, 0)
>>> r.mean_step_s, r.p99_slowdown
(1.0, 1.0)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sim.errors import ConfigError
from sim.variability.config import VariabilityConfig
from sim.variability.draws import gpu_multipliers, phase_multipliers, throttled
from sim.variability.result import VariabilityResult, summarise

if TYPE_CHECKING:
    from sim.result import StepResult

__all__ = ["CHUNK_ELEMENTS", "GLOBAL_PHASES", "REPLICA_PHASES", "Groups", "sample_breakdown",
           "sample_step_times"]  # fmt: skip

#: Per-GPU draws held at once (samples x GPUs per chunk): 4 Mi float64 = 32 MiB an array.
CHUNK_ELEMENTS = 2**22
#: Exposed communication on each replica's critical path: one multiplier per replica.
REPLICA_PHASES = ("tp_comm_exposed", "ep_comm", "pp_comm_exposed")
#: Communication across the replicas: one multiplier per step.
GLOBAL_PHASES = ("dp_comm_exposed", "zero3_gather_exposed", "param_gather")
_KNOWN = ("compute", "pipeline_bubble", "optimizer", *REPLICA_PHASES, *GLOBAL_PHASES)

NOTE = (
    "Monte Carlo over the ideal step's breakdown (not re-simulated): one compute multiplier "
    "per GPU and one per exposed communication phase per step; each TP group waits for its "
    "slowest GPU, each pipeline for its slowest stage, the DP reduction for the slowest replica"
)


@dataclass(frozen=True)
class Groups:
    """Synchronisation structure: TP group size, pipeline stages, data-parallel replicas."""

    tp: int = 1
    pp: int = 1
    dp: int = 1

    @property
    def gpus(self) -> int:
        """GPUs in the job."""
        return self.tp * self.pp * self.dp


def sample_step_times(
    result: StepResult,
    config: VariabilityConfig,
    samples: int,
    seed: int,
    expert_share: float = 0.0,
) -> VariabilityResult:
    """Sample ``samples`` step times of a simulated step under ``config``.

    Parameters
    ----------
    result : StepResult
        The simulated ideal step; its ``plan`` gives TP, PP and DP and its ``breakdown``
        the parts (seconds) that are rescaled.
    config : VariabilityConfig
        The ``variability`` section.
    samples : int
        Number of sampled steps (>= 1).
    seed : int
        Seed of the draws: same inputs and seed give identical numbers.
    expert_share : float
        Share of compute spent in MoE experts (0-1), scaled by ``config.moe_skew``.

    Returns
    -------
    VariabilityResult
        Mean, percentiles and slowdowns of the step time (seconds), with the approximation
        in ``note``.
    """
    plan = result.plan
    groups = Groups(tp=int(plan.get("tp", 1)), pp=int(plan.get("pp", 1)), dp=int(plan.get("dp", 1)))
    return sample_breakdown(
        result.breakdown, result.step_time_s, groups, config, samples, seed, expert_share
    )


def sample_breakdown(
    breakdown: Mapping[str, float],
    ideal_s: float,
    groups: Groups,
    config: VariabilityConfig,
    samples: int,
    seed: int,
    expert_share: float = 0.0,
) -> VariabilityResult:
    """Sample step times from a breakdown (seconds) and a synchronisation structure.

    See the module docstring for the model. Without any variability every sample equals
    ``ideal_s`` exactly (each sample is ``ideal_s`` plus the changes of its parts).

    Raises
    ------
    ConfigError
        ``samples`` < 1, ``stage_imbalance`` above the stage count, ``expert_share``
        outside 0-1.
    """
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ConfigError(f"--samples {samples!r}: expected a number of sampled steps >= 1")
    if not 0 <= expert_share <= 1:
        raise ConfigError(f"expert_share {expert_share!r}: expected a share in [0, 1]")
    notes = _notes(breakdown, groups, config, expert_share)
    rng = np.random.default_rng(seed)
    throttle = throttled(rng, groups.gpus, config)
    chunk = max(1, CHUNK_ELEMENTS // groups.gpus)
    steps, straggled = [], []
    for start in range(0, samples, chunk):
        s, f = _chunk(rng, min(chunk, samples - start), breakdown, ideal_s, groups, config,
                      throttle, expert_share)  # fmt: skip
        steps.append(s)
        straggled.append(f)
    return summarise(
        np.concatenate(steps), np.concatenate(straggled), ideal_s, samples=samples, seed=seed,
        gpus=groups.gpus, groups={"tp": groups.tp, "pp": groups.pp, "dp": groups.dp},
        config=config.model_dump(), note=NOTE, notes=notes,
    )  # fmt: skip


def _stage_loads(groups: Groups, imbalance: float) -> np.ndarray:
    """Each stage's load over the mean: the last stage at ``imbalance``, the rest even."""
    loads = np.ones(groups.pp)
    if groups.pp > 1:
        if imbalance > groups.pp:
            raise ConfigError(
                f"variability.stage_imbalance: {imbalance} exceeds the {groups.pp} pipeline "
                f"stages (the busiest stage can carry at most all the load); allowed: 1-{groups.pp}"
            )
        loads[:-1] = (groups.pp - imbalance) / (groups.pp - 1)
        loads[-1] = imbalance
    return loads


def _chunk(
    rng: np.random.Generator, n: int, parts: Mapping[str, float], ideal_s: float,
    groups: Groups, config: VariabilityConfig, throttle: np.ndarray, expert_share: float,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """How much ``n`` sampled steps exceed the ideal one (s), and their straggler flags."""
    m, straggled = gpu_multipliers(rng, n, throttle, config)
    per_gpu = m.reshape(n, groups.dp, groups.pp, groups.tp)
    stage = per_gpu.max(axis=3) * _stage_loads(groups, config.stage_imbalance)
    slowest = stage.max(axis=2)
    # the bubble is the other stages' passes, at their mean pace (unchanged with one stage)
    pp = groups.pp
    others = (stage.sum(axis=2) - slowest) / (pp - 1) if pp > 1 else np.ones_like(slowest)
    moe = 1.0 + expert_share * (config.moe_skew - 1.0)
    replica = parts.get("compute", 0.0) * (moe * slowest - 1.0)
    replica += parts.get("pipeline_bubble", 0.0) * (moe * others - 1.0)
    for key in REPLICA_PHASES:
        if parts.get(key, 0.0):
            skew = config.moe_skew if key == "ep_comm" else 1.0
            tail = phase_multipliers(rng, (n, groups.dp), config)
            replica += parts[key] * (skew * tail - 1.0)
    step = replica.max(axis=1)
    step += parts.get("optimizer", 0.0) * (m.max(axis=1) - 1.0)
    for key in GLOBAL_PHASES:
        if parts.get(key, 0.0):
            step += parts[key] * (phase_multipliers(rng, (n,), config) - 1.0)
    return step, straggled  # changes from the ideal step (s): exact zeros without variability


def _notes(
    parts: Mapping[str, float], groups: Groups, config: VariabilityConfig, expert_share: float
) -> list[str]:
    """Facts about this run worth printing: knobs without effect, parts held fixed."""
    out = []
    fixed = sorted(k for k, v in parts.items() if k not in _KNOWN and v)
    if fixed:
        out.append(f"held at their ideal time (no variability model): {', '.join(fixed)}")
    if config.stage_imbalance > 1 and groups.pp == 1:
        out.append("stage_imbalance has no effect: the plan has one pipeline stage")
    if config.moe_skew > 1 and expert_share == 0 and not parts.get("ep_comm"):
        out.append("moe_skew has no effect: the model has no experts")
    if config.network_cv or config.network_p99_p50:
        phases = [k for k in (*REPLICA_PHASES, *GLOBAL_PHASES) if parts.get(k)]
        if not phases:
            out.append("network tail has no effect: the step has no exposed communication")
    return out
