"""A checkpointed job plan: interval in whole steps, segments, and its expected wall time.

A job of ``n`` steps of ``t`` seconds checkpointing every ``k`` steps runs ``n // k`` full
segments of ``k t`` seconds of work and, when ``k`` does not divide ``n``, a last segment of
``(n mod k) t``; every segment ends with a checkpoint write of ``delta`` seconds (the last
one saves the final model). By linearity of expectation the job's expected wall time,
breakdown and interruption count are the sums of the segments' (:mod:`.renewal`).

>>> from sim.reliability.interruptions import Cause, Interruptions
>>> job = Interruptions((Cause("any", 1 / 7200.0, 300.0),))
>>> p = job_plan(job, step_time_s=10.0, checkpoint_s=60.0, steps=1000, policy="exact")
>>> p.interval_steps, p.segment_work_s()[-1]
(89, 210.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.cost.training import steps_for_tokens
from sim.errors import ConfigError
from sim.reliability.interruptions import Interruptions
from sim.reliability.intervals import interval_s, interval_steps
from sim.reliability.renewal import expected_interruptions, expected_wall_s, segment_breakdown

__all__ = ["JobPlan", "job_plan", "job_steps"]

#: Steps assumed when no token budget is given: long enough that the last segment is noise.
_STEADY_STEPS = 10**15


@dataclass(frozen=True)
class JobPlan:
    """How a job checkpoints and what that costs in expectation (seconds).

    Attributes
    ----------
    steps : int or None
        Steps in the job (None: steady state, no token budget given).
    interval_steps : int
        Steps between checkpoints.
    interval_s : float
        Compute time between checkpoints, ``interval_steps * step_time_s``.
    steady_goodput : float
        Goodput of one full segment: ``interval_s / E[W(interval_s + delta)]``.
    useful_s, expected_wall_s, expected_interruptions : float or None
        Job totals (None without ``steps``).
    breakdown_s : dict[str, float] or None
        Expected useful, checkpoint, lost and restart seconds of the whole job.
    """

    steps: int | None
    step_time_s: float
    checkpoint_s: float
    interval_steps: int
    interval_s: float
    steady_goodput: float
    useful_s: float | None
    expected_wall_s: float | None
    expected_interruptions: float | None
    breakdown_s: dict[str, float] | None

    @property
    def goodput(self) -> float:
        """Useful time / expected wall time of the job (steady state without ``steps``)."""
        if self.useful_s is None or self.expected_wall_s is None:
            return self.steady_goodput
        return self.useful_s / self.expected_wall_s

    def segment_work_s(self) -> list[float]:
        """Work (s) of each segment, for the event simulation; needs ``steps``."""
        if self.steps is None:
            raise ConfigError("training.tokens: needed to lay out the job's segments")
        full, rest = divmod(self.steps, self.interval_steps)
        return [self.interval_s] * full + ([rest * self.step_time_s] if rest else [])


def job_steps(tokens: float | None, tokens_per_step: float | None) -> int | None:
    """Steps for ``tokens`` tokens, or None (steady state) when no token budget is given."""
    if tokens is None:
        return None
    if tokens_per_step is None:
        raise ConfigError("tokens per step: needed with training.tokens")
    return steps_for_tokens(tokens, tokens_per_step)


def _segments(steps: int, k: int, t: float) -> list[tuple[float, int]]:
    full, rest = divmod(steps, k)
    return [(k * t, full)] + ([(rest * t, 1)] if rest else [])


def job_plan(
    job: Interruptions,
    *,
    step_time_s: float,
    checkpoint_s: float,
    steps: int | None,
    policy: str | int,
) -> JobPlan:
    """Choose the checkpoint interval by ``policy`` and total the job's expected wall time.

    Parameters
    ----------
    job : Interruptions
        The job's interruption process.
    step_time_s, checkpoint_s : float
        Step time and blocking checkpoint write time (s).
    steps : int or None
        Steps in the job; None for steady state.
    policy : str or int
        ``"young"``, ``"daly"``, ``"exact"`` (rounded to the better neighbouring whole step
        count) or a fixed number of steps.
    """
    if not (math.isfinite(step_time_s) and step_time_s > 0):
        raise ConfigError(f"step time: must be a finite number > 0 s (got {step_time_s!r})")
    max_steps = _STEADY_STEPS if steps is None else steps
    if isinstance(policy, str):
        k = interval_steps(
            interval_s(policy, checkpoint_s, job.mtbi_s), step_time_s, checkpoint_s, job, max_steps
        )
    else:
        k = min(policy, max_steps)
    tau = k * step_time_s
    segment = expected_wall_s(tau + checkpoint_s, job)
    if not math.isfinite(segment):
        raise ConfigError(_never_done(job, tau + checkpoint_s))
    steady = tau / segment
    if steps is None:
        return JobPlan(None, step_time_s, checkpoint_s, k, tau, steady, None, None, None, None)
    parts = _segments(steps, k, step_time_s)
    breakdown = {"useful": 0.0, "checkpoint": 0.0, "lost": 0.0, "restart": 0.0}
    for work, count in parts:
        for key, value in segment_breakdown(work, checkpoint_s, job).items():
            breakdown[key] += count * value
    return JobPlan(
        steps=steps,
        step_time_s=step_time_s,
        checkpoint_s=checkpoint_s,
        interval_steps=k,
        interval_s=tau,
        steady_goodput=steady,
        useful_s=steps * step_time_s,
        expected_wall_s=math.fsum(c * expected_wall_s(w + checkpoint_s, job) for w, c in parts),
        expected_interruptions=math.fsum(
            c * expected_interruptions(w + checkpoint_s, job) for w, c in parts
        ),
        breakdown_s=breakdown,
    )


def _never_done(job: Interruptions, segment_s: float) -> str:
    """Why a job whose expected wall time overflows never completes (one line)."""
    restarts = max((c.restart_s for c in job.causes), default=0.0)
    return (
        f"reliability: the job never completes: interruptions every {job.mtbi_s:.3g} s on "
        f"average against a {segment_s:.3g} s checkpoint segment and restarts of up to "
        f"{restarts:.3g} s; raise the MTBFs (*_mtbf_h), lower restart_s or the spot preemption rate"
    )
