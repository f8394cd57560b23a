"""Expected wall time of checkpointed work under Poisson interruptions (Daly's complete model).

Training runs in *segments*: ``tau`` seconds of useful steps, then a blocking checkpoint
write of ``delta`` seconds (segment length ``L = tau + delta``). An interruption at any
moment (computing, writing, or restarting) loses everything since the last completed
checkpoint; the job then restarts, which takes ``R_i`` for an interruption of cause ``i``
and can itself be interrupted (a new restart of the new cause then begins).

With total rate ``lambda`` and ``q = sum_i p_i exp(-lambda R_i)`` (``p_i = lambda_i/lambda``),
a renewal argument gives the exact expected wall time of one segment:

    E[W(L)] = (exp(lambda L) - 1) / (lambda q)

For a single cause (``q = exp(-R/M)``, ``M = 1/lambda``) this is Daly's cost function,
``M exp(R/M) (exp((tau + delta)/M) - 1)`` per segment (J. T. Daly, "A higher order estimate
of the optimum checkpoint interval for restart dumps", Future Generation Computer Systems 22
(2006)). It splits exactly into

    useful      tau
    checkpoint  delta
    lost        (exp(lambda L) - 1)/lambda - L          (rework, incl. torn checkpoints)
    restart     (exp(lambda L) - 1) (1 - q)/(lambda q)

and the expected number of interruptions per segment is ``(exp(lambda L) - 1)/q``
(``lambda E[W]``, as Wald's identity requires). Goodput is ``tau / E[W]``.

>>> from sim.reliability.interruptions import Cause, Interruptions
>>> job = Interruptions((Cause("any", 1 / 3600.0, 600.0),))
>>> round(goodput(1800.0, 60.0, job), 4)
0.6257
"""

from __future__ import annotations

import math

from sim.reliability.interruptions import Interruptions

__all__ = ["expected_interruptions", "expected_wall_s", "goodput", "segment_breakdown"]


def _grown(rate: float, length_s: float) -> float:
    """``exp(lambda L) - 1``, or inf past the float range (segments of ~700+ MTBIs never end)."""
    exponent = rate * length_s
    return math.expm1(exponent) if exponent < 700.0 else math.inf


def expected_wall_s(length_s: float, job: Interruptions) -> float:
    """Expected wall time (s) to complete ``length_s`` seconds of uninterrupted progress.

    ``(exp(lambda L) - 1) / (lambda q)``; exactly ``L`` when nothing fails.
    """
    rate = job.rate_per_s
    if rate == 0:
        return length_s
    q = job.restart_survival()
    if q == 0.0:  # every restart is interrupted (exp(-lambda R) underflows): never done
        return math.inf
    return _grown(rate, length_s) / (rate * q)


def segment_breakdown(work_s: float, checkpoint_s: float, job: Interruptions) -> dict[str, float]:
    """Expected seconds per segment spent on useful work, checkpoint, lost work and restarts.

    The four parts sum to :func:`expected_wall_s` of ``work_s + checkpoint_s``.

    >>> from sim.reliability.interruptions import Interruptions
    >>> segment_breakdown(100.0, 5.0, Interruptions(()))
    {'useful': 100.0, 'checkpoint': 5.0, 'lost': 0.0, 'restart': 0.0}
    """
    length = work_s + checkpoint_s
    rate = job.rate_per_s
    if rate == 0:
        return {"useful": work_s, "checkpoint": checkpoint_s, "lost": 0.0, "restart": 0.0}
    grown = _grown(rate, length)
    q = job.restart_survival()
    return {
        "useful": work_s,
        "checkpoint": checkpoint_s,
        "lost": grown / rate - length,
        "restart": 0.0 if q == 1.0 else math.inf if q == 0.0 else grown * (1.0 - q) / (rate * q),
    }


def expected_interruptions(length_s: float, job: Interruptions) -> float:
    """Expected interruptions (incl. those that hit restarts) while completing ``length_s``."""
    rate = job.rate_per_s
    if rate == 0:
        return 0.0
    q = job.restart_survival()
    return math.inf if q == 0.0 else _grown(rate, length_s) / q


def goodput(work_s: float, checkpoint_s: float, job: Interruptions) -> float:
    """Fraction of wall time spent on useful steps: ``tau / E[W(tau + delta)]``."""
    return work_s / expected_wall_s(work_s + checkpoint_s, job)
