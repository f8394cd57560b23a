"""Goodput, time to train and cost to train of a job that fails, checkpoints and restarts.

One call turns a simulated step (step time, job size, model size) and the ``reliability``
section into the job's mean time between interruptions, checkpoint size and write time,
the Young, Daly and exact optimum intervals, the interval used (whole steps), the expected
goodput and, given ``training.tokens``, the expected time and cost to train including lost
work and restarts. Formulas: :mod:`.interruptions`, :mod:`.storage`, :mod:`.intervals`,
:mod:`.renewal`, :mod:`.plan`.

>>> est = goodput_estimate(step_time_s=10.0, gpus=16384, gpus_per_node=8, params=405e9,
...                        config=ReliabilityConfig(), tokens=15.6e12, tokens_per_step=16 * 2**20)
>>> round(est.mtbi_s / 3600, 2), round(est.checkpoint_write_s, 2), round(est.goodput, 4)
(3.09, 2.83, 0.9263)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from sim.cost.training import cost_usd
from sim.reliability.config import ReliabilityConfig
from sim.reliability.interruptions import job_interruptions
from sim.reliability.intervals import daly_interval_s, exact_interval_s, young_interval_s
from sim.reliability.plan import JobPlan, job_plan, job_steps
from sim.reliability.storage import StorageTier

__all__ = ["GoodputEstimate", "goodput_estimate"]


@dataclass(frozen=True)
class GoodputEstimate:
    """Expected behaviour of a job under failures (SI units; rates per day for readability).

    Attributes
    ----------
    interruptions_per_day : dict[str, float]
        Expected job interruptions per day by cause (gpu, link, node, software).
    mtbi_s : float
        Mean time between interruptions of the job (inf when nothing fails).
    checkpoint_bytes, checkpoint_bandwidth_Bps, checkpoint_write_s : float
        Checkpoint size, effective write bandwidth and blocking write time.
    interval_young_s, interval_daly_s, interval_exact_s : float
        Optimum compute intervals by each rule.
    interval_policy : str
        The rule used, or ``"fixed"``.
    interval_steps, interval_s : int, float
        Steps between checkpoints and the compute time they take.
    goodput : float
        Useful time / expected wall time (steady state without a token budget).
    steps, useful_time_s, expected_wall_time_s, expected_interruptions : optional
        Job totals (None without ``tokens``).
    expected_breakdown_s : dict[str, float] or None
        Expected useful, checkpoint, lost and restart seconds; they sum to the wall time.
    cost_usd : float or None
        Expected cost to train (all GPUs billed for the wall time) when priced.
    """

    gpus: int
    nodes: int
    failures_source: str
    interruptions_per_day: dict[str, float]
    mtbi_s: float
    restart_s: float
    storage: str
    checkpoint_bytes: float
    checkpoint_bandwidth_Bps: float
    checkpoint_write_s: float
    interval_young_s: float
    interval_daly_s: float
    interval_exact_s: float
    interval_policy: str
    interval_steps: int
    interval_s: float
    goodput: float
    steps: int | None
    useful_time_s: float | None
    expected_wall_time_s: float | None
    expected_breakdown_s: dict[str, float] | None
    expected_interruptions: float | None
    usd_per_gpu_hour: float | None
    cost_usd: float | None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (plain Python types; ``inf`` where nothing fails)."""
        return asdict(self)

    @property
    def busy_time_s(self) -> float | None:
        """Expected time running steps, useful or later lost (GPUs busy; for the energy layer)."""
        b = self.expected_breakdown_s
        return None if b is None else b["useful"] + b["lost"]

    @property
    def idle_time_s(self) -> float | None:
        """Expected time writing checkpoints and restarting (GPUs held but idle)."""
        b = self.expected_breakdown_s
        return None if b is None else b["checkpoint"] + b["restart"]


def _notes(tier: StorageTier, plan: JobPlan, nodes: int) -> list[str]:
    notes = []
    if not tier.survives_node_loss and nodes > 1:
        notes.append(
            f"checkpoints on {tier.name} do not survive the loss of the node that wrote "
            "them; restarts after node failures assume a copy elsewhere"
        )
    if plan.steps is None:
        notes.append("no training.tokens: goodput is the steady state of one checkpoint interval")
    return notes


def goodput_estimate(
    *,
    step_time_s: float,
    gpus: int,
    gpus_per_node: int,
    params: float,
    config: ReliabilityConfig,
    tokens: float | None = None,
    tokens_per_step: float | None = None,
    usd_per_gpu_hour: float | None = None,
) -> GoodputEstimate:
    """Expected goodput, time to train and cost to train of a job under failures.

    Parameters
    ----------
    step_time_s : float
        Simulated step time (s).
    gpus, gpus_per_node : int
        Job size.
    params : float
        Model parameters (checkpoint size = params x (model + optimizer bytes per parameter),
        unless ``config.checkpoint_bytes`` is given).
    config : ReliabilityConfig
        The ``reliability`` section.
    tokens, tokens_per_step : float, optional
        ``training.tokens`` and ``global_batch * seq_len``; without them, steady state only.
    usd_per_gpu_hour : float, optional
        Price for the expected cost to train.

    Raises
    ------
    ConfigError
        Bad inputs (non-positive, NaN), unknown presets.
    """
    rates = config.rates()
    job = job_interruptions(rates, gpus, gpus_per_node, config.restart_s)
    nodes = math.ceil(gpus / gpus_per_node)
    size = config.checkpoint_size(params)
    tier = config.tier()
    delta = tier.write_s(size, nodes)
    steps = job_steps(tokens, tokens_per_step)
    plan = job_plan(
        job, step_time_s=step_time_s, checkpoint_s=delta, steps=steps, policy=config.interval
    )
    wall = plan.expected_wall_s
    priced = usd_per_gpu_hour is not None and wall is not None
    return GoodputEstimate(
        gpus=gpus,
        nodes=nodes,
        failures_source=rates.source,
        interruptions_per_day={c.name: c.rate_per_s * 86400.0 for c in job.causes},
        mtbi_s=job.mtbi_s,
        restart_s=config.restart_s,
        storage=tier.name,
        checkpoint_bytes=size,
        checkpoint_bandwidth_Bps=tier.bandwidth_Bps(nodes),
        checkpoint_write_s=delta,
        interval_young_s=young_interval_s(delta, job.mtbi_s),
        interval_daly_s=daly_interval_s(delta, job.mtbi_s),
        interval_exact_s=exact_interval_s(delta, job.mtbi_s),
        interval_policy=config.interval if isinstance(config.interval, str) else "fixed",
        interval_steps=plan.interval_steps,
        interval_s=plan.interval_s,
        goodput=plan.goodput,
        steps=plan.steps,
        useful_time_s=plan.useful_s,
        expected_wall_time_s=wall,
        expected_breakdown_s=plan.breakdown_s,
        expected_interruptions=plan.expected_interruptions,
        usd_per_gpu_hour=usd_per_gpu_hour,
        cost_usd=cost_usd(wall, gpus, usd_per_gpu_hour) if priced else None,  # type: ignore[arg-type]
        notes=_notes(tier, plan, nodes),
    )
