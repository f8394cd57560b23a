"""Optimum checkpoint interval: Young's first-order rule, Daly's higher-order rule, the exact optimum.

The expected wall time per useful second with compute interval ``tau``, checkpoint time
``delta`` and mean time between interruptions ``M`` is proportional to (see
:mod:`sim.reliability.renewal`)

    f(tau) = (exp((tau + delta)/M) - 1) / tau

(restart times only scale it by a constant, so they do not move the optimum). Setting
``f'(tau) = 0`` gives ``(tau/M - 1) exp(tau/M) = -exp(-delta/M)``, whose solution is

    tau_exact = M (1 + W0(-exp(-1 - delta/M)))                        (Lambert W, branch 0)

Approximations in common use:

* Young (J. W. Young, "A first order approximation to the optimum checkpoint interval",
  CACM 17(9), 1974): ``tau = sqrt(2 delta M)``.
* Daly (J. T. Daly, FGCS 22 (2006)): for ``delta < 2M``,
  ``tau = sqrt(2 delta M) (1 + sqrt(delta/(2M))/3 + (delta/(2M))/9) - delta``, else ``M``.

>>> round(daly_interval_s(5 * 60.0, 24 * 3600.0) / 60, 1)  # Daly's Fig. 3: M=24 h, delta=5 min
116.7
>>> round(exact_interval_s(5 * 60.0, 24 * 3600.0) / 60, 1)
116.7
"""

from __future__ import annotations

import math

from sim.errors import ConfigError
from sim.reliability.interruptions import Interruptions
from sim.reliability.renewal import expected_wall_s

__all__ = [
    "POLICIES",
    "branch_w",
    "daly_interval_s",
    "exact_interval_s",
    "interval_s",
    "interval_steps",
    "wall_per_useful_s",
    "young_interval_s",
]

POLICIES = ("young", "daly", "exact")


def _check(checkpoint_s: float, mtbi_s: float) -> None:
    if not (math.isfinite(checkpoint_s) and checkpoint_s >= 0):
        raise ConfigError(f"checkpoint time: must be a finite number >= 0 s (got {checkpoint_s!r})")
    if math.isnan(mtbi_s) or mtbi_s <= 0:
        raise ConfigError(f"mean time between interruptions: must be > 0 s (got {mtbi_s!r})")


def young_interval_s(checkpoint_s: float, mtbi_s: float) -> float:
    """Young's optimum compute interval ``sqrt(2 delta M)`` (s); inf when ``M`` is inf.

    >>> young_interval_s(50.0, 10000.0)
    1000.0
    """
    _check(checkpoint_s, mtbi_s)
    return math.sqrt(2.0 * checkpoint_s * mtbi_s)


def daly_interval_s(checkpoint_s: float, mtbi_s: float) -> float:
    """Daly's higher-order optimum compute interval (s); ``M`` when ``delta >= 2M``."""
    _check(checkpoint_s, mtbi_s)
    if math.isinf(mtbi_s):
        return math.inf
    if checkpoint_s >= 2.0 * mtbi_s:
        return mtbi_s
    x = checkpoint_s / (2.0 * mtbi_s)
    return (
        math.sqrt(2.0 * checkpoint_s * mtbi_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - checkpoint_s
    )


def branch_w(u: float) -> float:
    """``w(u) = -W0(-exp(-1 - u))`` for ``u = delta / M >= 0``, in (0, 1].

    Near ``u = 0`` the argument sits on W's branch point, where floating point loses it;
    there the branch-point series ``W0 = -1 + p - p^2/3 + 11 p^3/72 - 43 p^4/540`` with
    ``p = sqrt(2 (1 - exp(-u)))`` is used (error below 1e-15 for ``u < 1e-6``).

    >>> branch_w(0.0)
    1.0
    >>> from scipy.special import lambertw
    >>> abs(branch_w(1e-6) - float(-lambertw(-math.exp(-1 - 1e-6)).real)) < 1e-12
    True
    """
    if u < 1e-6:
        p = math.sqrt(-2.0 * math.expm1(-u))
        return 1.0 - p + p * p / 3.0 - 11.0 * p**3 / 72.0 + 43.0 * p**4 / 540.0
    from scipy.special import lambertw  # here: a run without reliability never loads scipy

    return float(-lambertw(-math.exp(-1.0 - u), 0).real)


def exact_interval_s(checkpoint_s: float, mtbi_s: float) -> float:
    """The exact minimiser of ``(exp((tau+delta)/M) - 1)/tau``: ``M (1 - w(delta/M))``.

    >>> exact_interval_s(0.0, 3600.0)
    0.0
    """
    _check(checkpoint_s, mtbi_s)
    if math.isinf(mtbi_s):
        return math.inf
    return mtbi_s * (1.0 - branch_w(checkpoint_s / mtbi_s))


_RULES = {"young": young_interval_s, "daly": daly_interval_s, "exact": exact_interval_s}


def interval_s(policy: str, checkpoint_s: float, mtbi_s: float) -> float:
    """The compute interval (s) that ``policy`` (one of :data:`POLICIES`) prescribes."""
    if policy not in _RULES:
        raise ConfigError(
            f"reliability.interval: {policy!r}; allowed: {', '.join(POLICIES)} or a step count"
        )
    return _RULES[policy](checkpoint_s, mtbi_s)


def wall_per_useful_s(work_s: float, checkpoint_s: float, job: Interruptions) -> float:
    """Expected wall seconds per useful second with compute interval ``work_s`` (the cost f)."""
    return expected_wall_s(work_s + checkpoint_s, job) / work_s


def interval_steps(
    target_s: float, step_time_s: float, checkpoint_s: float, job: Interruptions, max_steps: int
) -> int:
    """Whole steps between checkpoints closest to ``target_s``: the cheaper of floor and ceil.

    At least 1 and at most ``max_steps`` (the whole job: one checkpoint at the end).

    >>> from sim.reliability.interruptions import Interruptions
    >>> interval_steps(float("inf"), 2.0, 30.0, Interruptions(()), 500)
    500
    """
    if math.isinf(target_s):
        return max_steps
    low = min(max(1, math.floor(target_s / step_time_s)), max_steps)
    high = min(low + 1, max_steps)
    cost = {k: wall_per_useful_s(k * step_time_s, checkpoint_s, job) for k in (low, high)}
    return min(cost, key=lambda k: (cost[k], k))
