"""A deterministic, machine-stable robust fit for calibration parameters.

Fitting a simulator to measurements is a small (5-15 parameter) non-linear, non-smooth
problem: the predicted time is a minimum over algorithms and protocols and a maximum over
links and channels, so the objective has kinks, and some parameters are only weakly
identified by a given log (two latency factors that trade off, an efficiency of a
protocol the data never selects). A plain local solver from one start then stops wherever
rounding sends it, and rounding differs between CPUs and BLAS builds: the same log gave
different profiles, and different hold-out errors, on different machines. :func:`solve`
makes the problem well posed and the search reproducible:

1. **Scaled, bounded coordinates.** Every parameter is searched in ``[0, 1]`` (the caller
   maps it to its value, linearly or in log10), so tolerances mean the same for all.
2. **A weak prior** pulls each coordinate toward its documented default: one extra
   residual per parameter, ``f_scale * (u - u0) / prior_width``, so a parameter the data
   cannot see stays at its default instead of drifting along a flat valley. A parameter
   the data does see moves freely: moving it by ``prior_width`` costs as much as one
   measurement ``f_scale`` off.
3. **A smooth objective, sharpened in stages** (graduated non-convexity): the caller's
   model takes a softness ``tau`` that replaces its minima and maxima by smooth ones; the
   search starts at ``softness[0]`` (few, wide basins) and refines the optimum at each
   smaller ``tau``. The last stage defines the optimum.
4. **A deterministic global stage** at the first softness: the robust cost at the default
   and at ``2**screen_log2`` points of a scrambled Sobol sequence with a fixed seed (the
   same points on every machine); the ``refine`` best distinct ones are refined locally
   too and the lowest cost wins (ties within ``tie_rtol``: the earlier start). The default
   start comes first, so a basin only replaces it by fitting clearly better.
5. **Local refinement** with L-BFGS-B on the robust cost (soft-L1 of the residuals plus
   the prior), with explicit tolerances; quasi-Newton steps follow the curved valleys of
   this problem where Gauss-Newton zig-zags.
6. **A convergence check**: :class:`Solution` says whether the last stage met its
   tolerance (``converged``) or ran out of evaluations; the caller refuses a fit that did
   not converge.

>>> import numpy as np
>>> def res(u, tau):  # data that want u = 0.25 exactly
...     return np.full(3, 4 * u[0] - 1.0)
>>> sol = solve(res, np.array([0.5]), screen_log2=0)
>>> round(float(sol.u[0]), 3), sol.converged
(0.25, True)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import OptimizeResult, minimize
from scipy.stats import qmc

__all__ = ["FTOL", "GTOL", "Solution", "robust_cost", "solve"]

#: Stopping tolerances of every local stage (L-BFGS-B: relative cost change, gradient).
FTOL = 1e-12
GTOL = 1e-9
#: Projected-gradient size below which a line-search stop counts as converged.
ACCEPT_GRAD = 1e-5
#: Relative cost change at which a local run of the global stage stops.
COARSE_FTOL = 1e-7


@dataclass(frozen=True)
class Solution:
    """The chosen optimum (unit-box coordinates) and how it was reached.

    Attributes
    ----------
    u : numpy.ndarray
        Coordinates in ``[0, 1]`` of every parameter.
    cost : float
        Robust cost (data and prior) at ``u`` at the last softness.
    converged : bool
        The last stage met its tolerance before its evaluation budget.
    nfev : int
        Cost evaluations over all stages.
    message : str
        The optimizer's message for the last stage.
    starts : int
        Local runs of the global stage.
    runner_up_gap : float
        Relative cost gap, in the global stage, to the best other local minimum whose
        coordinates differ by more than 1e-3 (inf when every run found the same one):
        near 0 means an ambiguous fit.
    """

    u: np.ndarray
    cost: float
    converged: bool
    nfev: int
    message: str
    starts: int
    runner_up_gap: float


def robust_cost(r: np.ndarray, f_scale: float) -> float:
    """Soft-L1 cost ``sum(f^2 * (sqrt(1 + (r/f)^2) - 1))`` (scipy's ``least_squares`` form).

    Quadratic for residuals well below ``f_scale``, linear beyond: a few outliers do not
    steer the fit.

    >>> robust_cost(np.zeros(3), 0.03)
    0.0
    """
    z = (np.asarray(r) / f_scale) ** 2
    return float(f_scale**2 * np.sum(np.sqrt(1.0 + z) - 1.0))


def solve(
    residuals: Callable[[np.ndarray, float], np.ndarray],
    u0: np.ndarray,
    *,
    f_scale: float = 0.05,
    prior_width: float | np.ndarray = 0.25,
    softness: tuple[float, ...] = (0.3, 0.1, 0.03),
    screen_log2: int = 8,
    refine: int = 6,
    seed: int = 0,
    max_nfev: int | None = None,
    tie_rtol: float = 1e-9,
    start_jitter: float = 0.0,
    first: np.ndarray | None = None,
) -> Solution:
    """Minimise the robust cost of ``residuals(u, tau)`` plus a weak prior, ``u`` in [0, 1].

    Parameters
    ----------
    residuals : callable
        ``(u, tau) -> r``: data residuals (log time: predicted over measured) at unit
        coordinates, with the model's choices smoothed by ``tau``.
    u0 : numpy.ndarray
        Prior centre (the documented defaults) in unit coordinates; also the first start.
    f_scale : float
        Soft-L1 scale of the residuals (0.05: 5% in log time).
    prior_width : float or array
        Unit-box distance at which the prior costs as much as one residual of ``f_scale``.
    softness : tuple of float
        Continuation schedule (decreasing); the global stage runs at the first.
    screen_log2 : int
        ``2**screen_log2`` Sobol points are screened (0 disables the global stage).
    refine : int
        Local runs from the best screened starts besides the default start.
    seed : int
        Seed of the scrambled Sobol sequence and of ``start_jitter``.
    max_nfev : int, optional
        Cost evaluations per local run; default ``400 * (parameters + 1)``.
    tie_rtol : float
        Costs this close (relative) count as equal; the earlier start wins.
    start_jitter : float
        Moves every start by up to this much (unit box; uniform, drawn with ``seed``):
        for tests that the optimum does not depend on where the search began.
    first : numpy.ndarray, optional
        The first start instead of ``u0`` (a warm start, e.g. a refit on a subset from
        the full fit), while the prior stays centred on ``u0``.

    Returns
    -------
    Solution
    """
    u0 = np.clip(np.asarray(u0, dtype=float), 0.0, 1.0)
    d = len(u0)
    width = np.broadcast_to(np.asarray(prior_width, dtype=float), (d,))

    def cost_at(tau: float) -> Callable[[np.ndarray], float]:
        def cost(u: np.ndarray) -> float:
            r = np.concatenate([residuals(u, tau), f_scale * (u - u0) / width])
            c = robust_cost(r, f_scale)
            return c if np.isfinite(c) else 1e30

        return cost

    budget = max_nfev or 400 * (d + 1)
    first_cost = cost_at(softness[0])
    start0 = u0 if first is None else np.clip(np.asarray(first, dtype=float), 0.0, 1.0)
    starts = _starts(first_cost, start0, screen_log2, refine, seed)
    if start_jitter:
        rng = np.random.default_rng(seed)
        starts = [np.clip(s + rng.uniform(-start_jitter, start_jitter, d), 0, 1) for s in starts]
    runs = [_local(first_cost, s, budget, coarse=len(softness) > 1) for s in starts]
    nfev = sum(int(r.nfev) for r in runs)
    best_i = _pick([float(r.fun) for r in runs], tie_rtol)
    best = runs[best_i]
    others = [float(r.fun) for r in runs if np.max(np.abs(r.x - best.x)) > 1e-3]
    gap = (min(others) - best.fun) / max(best.fun, 1e-300) if others else np.inf
    for tau in softness[1:]:
        best = _local(cost_at(tau), best.x, budget)
        nfev += int(best.nfev)
    return Solution(
        u=np.clip(best.x, 0.0, 1.0), cost=float(best.fun), converged=_converged(best),
        nfev=nfev, message=str(best.message), starts=len(runs), runner_up_gap=float(gap),
    )  # fmt: skip


def _converged(r: OptimizeResult) -> bool:
    """L-BFGS-B met its tolerance, or stopped in its line search where the projected
    gradient is already negligible (finite-difference noise at the optimum: ABNORMAL);
    running out of evaluations never counts."""
    if r.success:
        return True
    if "ABNORMAL" not in str(r.message):
        return False
    g = np.asarray(r.jac, dtype=float)
    x = np.asarray(r.x, dtype=float)
    g = np.where((x <= 0.0) & (g > 0), 0.0, np.where((x >= 1.0) & (g < 0), 0.0, g))
    return bool(np.max(np.abs(g), initial=0.0) <= ACCEPT_GRAD * max(1.0, abs(float(r.fun))))


def _pick(costs: list[float], tie_rtol: float) -> int:
    """Index of the lowest cost; costs within ``tie_rtol`` go to the earliest start."""
    low = min(costs)
    return next(i for i, c in enumerate(costs) if c <= low * (1 + tie_rtol))


def _local(cost: Callable[[np.ndarray], float], start: np.ndarray, budget: int,
           coarse: bool = False) -> OptimizeResult:  # fmt: skip
    """L-BFGS-B from ``start`` in the unit box (finite-difference gradient). ``coarse``
    (the global stage, which only has to find the basins) stops at ``COARSE_FTOL``; the
    later stages refine to ``FTOL``/``GTOL``."""
    ftol, gtol = (COARSE_FTOL, COARSE_FTOL * 10) if coarse else (FTOL, GTOL)
    return minimize(
        cost, np.clip(start, 0.0, 1.0), method="L-BFGS-B", bounds=[(0.0, 1.0)] * len(start),
        options={"maxfun": budget, "maxiter": budget, "ftol": ftol, "gtol": gtol},
    )  # fmt: skip


def _starts(cost: Callable[[np.ndarray], float], u0: np.ndarray, screen_log2: int,
            refine: int, seed: int) -> list[np.ndarray]:  # fmt: skip
    """The default, then the best distinct screened Sobol points (ties: lower index)."""
    out = [u0]
    if screen_log2 <= 0 or refine <= 0:
        return out
    pts = qmc.Sobol(len(u0), scramble=True, seed=seed).random_base2(screen_log2)
    costs = np.array([cost(p) for p in pts])
    for i in np.lexsort((np.arange(len(pts)), costs)):
        if len(out) > refine:
            break
        if all(np.max(np.abs(pts[i] - s)) > 0.05 for s in out):
            out.append(pts[i])
    return out
