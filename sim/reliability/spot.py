"""Spot/preemptible capacity against on-demand: expected cost, wall time and the break-even.

On spot capacity every node can be preempted (rate ``r_p`` per node, restart ``R_p``: wait
for capacity, relaunch, reload) on top of the hardware failures both options share, in
exchange for a discount ``d``. With ``Lambda_p = nodes * r_p`` added to the job's
interruption stream (:mod:`.renewal`), both options checkpoint at their own optimum and

    cost_spot / cost_od = (1 - d) W_spot / W_od = (1 - d) G_od / G_spot

(same useful work; every GPU billed for the wall time). Spot pays off while
``G_spot > (1 - d) G_od``, so the break-even discount is ``d* = 1 - G_spot / G_od``.

At the exact optimum interval the goodput has a closed form. With ``u = lambda delta`` and
``w = -W0(-exp(-1 - u))`` (Lambert W; ``w`` in (0, 1]), ``exp(lambda (tau* + delta)) = 1/w``
and ``lambda tau* = 1 - w``, so

    G* = w q,      q = sum_i p_i exp(-lambda R_i)                    (:func:`optimal_goodput`)

and ``u = w - 1 - ln w`` inverts it. When every interruption restarts in the same ``R``
(``rho = R / delta``, ``a = 1 + rho``), ``G* = w^a exp(-rho (w - 1))``, and the break-even
``G*(lambda) = c = (1 - d) G*_od`` solves in closed form:

    w = -(a / rho) W0(-(rho / a) c^(1/a) exp(-rho / a)),   lambda* = (w - 1 - ln w) / delta,

``Lambda_p* = lambda* - lambda_f`` (:func:`break_even_closed_form`). With different restart
times the break-even is found by Brent's method on the same exact goodput
(:func:`break_even_preemption_rate`); the two agree to ~1e-12 where both apply.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from sim.reliability.config import HOURS_PER_MONTH, ReliabilityConfig, SpotConfig
from sim.reliability.interruptions import Cause, Interruptions
from sim.reliability.intervals import branch_w
from sim.reliability.plan import job_plan, job_steps

__all__ = [
    "CapacityOption",
    "SpotComparison",
    "break_even_closed_form",
    "break_even_preemption_rate",
    "optimal_goodput",
    "spot_comparison",
    "with_preemptions",
]


def with_preemptions(
    job: Interruptions, nodes: int, rate_per_node_s: float, restart_s: float
) -> Interruptions:
    """``job`` plus a ``preemption`` cause at ``nodes * rate_per_node_s`` per second."""
    return job.plus(Cause("preemption", nodes * rate_per_node_s, restart_s))


def optimal_goodput(checkpoint_s: float, job: Interruptions) -> float:
    """Steady-state goodput at the exact optimum interval: ``-W0(-exp(-1 - lambda delta)) q``.

    >>> from sim.reliability.interruptions import Interruptions
    >>> optimal_goodput(60.0, Interruptions(()))
    1.0
    """
    return branch_w(job.rate_per_s * checkpoint_s) * job.restart_survival()


def break_even_preemption_rate(
    job: Interruptions, checkpoint_s: float, nodes: int, discount: float, restart_s: float
) -> float:
    """Preemptions per node per second at which spot costs as much as on-demand (exact model).

    Solves ``G(job + preemptions) = (1 - discount) G(job)`` by Brent's method; 0 when the
    discount is 0, inf when preemptions cost nothing (no checkpoint or restart time).
    """
    if discount <= 0:
        return 0.0
    target = (1.0 - discount) * optimal_goodput(checkpoint_s, job)

    def gap(rate_per_node_h: float) -> float:
        spot = with_preemptions(job, nodes, rate_per_node_h / 3600.0, restart_s)
        return optimal_goodput(checkpoint_s, spot) - target

    from scipy.optimize import brentq  # here: a run without spot never loads scipy

    high = 1e-6
    while gap(high) > 0:
        if high > 1e9:  # free checkpoints and instant restarts: preemptions cost nothing
            return math.inf
        high *= 4.0
    return float(brentq(gap, 0.0, high, xtol=1e-15, rtol=1e-12)) / 3600.0


def break_even_closed_form(
    job: Interruptions, checkpoint_s: float, nodes: int, discount: float, restart_s: float
) -> float | None:
    """The break-even preemption rate per node per second in closed form (Lambert W).

    Exact in the model when every cause of ``job`` restarts in ``restart_s`` too; None when
    they do not (use :func:`break_even_preemption_rate`). Needs ``checkpoint_s > 0``; with no
    checkpoint cost it is ``-ln(c) / R``.
    """
    if any(c.restart_s != restart_s for c in job.causes if c.rate_per_s > 0):
        return None
    if discount <= 0:
        return 0.0
    lam_f = job.rate_per_s
    target = (1.0 - discount) * optimal_goodput(checkpoint_s, job)
    if checkpoint_s == 0:
        lam = -math.log(target) / restart_s if restart_s > 0 else math.inf
    elif restart_s == 0:
        lam = (target - 1.0 - math.log(target)) / checkpoint_s
    else:
        from scipy.special import lambertw  # here: a run without spot never loads scipy

        rho = restart_s / checkpoint_s
        a = 1.0 + rho
        z = -(rho / a) * target ** (1.0 / a) * math.exp(-rho / a)
        w = -(a / rho) * float(lambertw(z, 0).real)
        lam = (w - 1.0 - math.log(w)) / checkpoint_s
    return max(0.0, lam - lam_f) / nodes


@dataclass(frozen=True)
class CapacityOption:
    """One way to buy the GPUs: its price, interruptions and expected outcome."""

    name: str
    usd_per_gpu_hour: float | None
    preemptions_per_node_hour: float
    mtbi_s: float
    interval_steps: int
    goodput: float
    expected_wall_time_s: float | None
    cost_usd: float | None


@dataclass(frozen=True)
class SpotComparison:
    """Spot against on-demand for the same job.

    Attributes
    ----------
    relative_cost : float
        ``cost_spot / cost_od = (1 - d) G_od / G_spot`` (< 1: spot is cheaper).
    break_even_discount : float
        ``1 - G_spot / G_od``: the smallest discount at which spot pays off at this rate.
    break_even_preemptions_per_node_hour : float
        Brent's method on the exact goodput; ``..._closed_form`` is the Lambert-W closed
        form (None unless preemptions and failures share one restart time).
    break_even_monthly_interruption : float
        The exact break-even as a fraction of instances interrupted per month.
    """

    on_demand: CapacityOption
    spot: CapacityOption
    discount: float
    relative_cost: float
    pays_off: bool
    break_even_discount: float
    break_even_preemptions_per_node_hour: float
    break_even_preemptions_per_node_hour_closed_form: float | None
    break_even_monthly_interruption: float
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


def _option(
    name: str, job: Interruptions, price: float | None, gpus: int, rate_h: float, **plan: Any
) -> CapacityOption:
    p = job_plan(job, **plan)
    wall = p.expected_wall_s
    cost = None if price is None or wall is None else gpus * wall / 3600.0 * price
    return CapacityOption(name, price, rate_h, job.mtbi_s, p.interval_steps, p.goodput, wall, cost)


def spot_comparison(
    *,
    step_time_s: float,
    gpus: int,
    gpus_per_node: int,
    params: float,
    reliability: ReliabilityConfig,
    spot: SpotConfig,
    usd_per_gpu_hour: float | None = None,
    tokens: float | None = None,
    tokens_per_step: float | None = None,
) -> SpotComparison:
    """Expected cost and wall time on spot against on-demand, and where spot stops paying off.

    Both options checkpoint by ``reliability.interval``; the break-even figures use the
    steady-state goodput at the exact optimum interval. ``usd_per_gpu_hour`` is the
    on-demand price (spot: ``(1 - discount)`` of it).
    """
    nodes = math.ceil(gpus / gpus_per_node)
    base = reliability.job(gpus, gpus_per_node)
    delta = reliability.tier().write_s(reliability.checkpoint_size(params), nodes)
    r_p = spot.preemption_rate_per_node_s()
    restart = reliability.restart_s if spot.restart_s is None else spot.restart_s
    spot_job = with_preemptions(base, nodes, r_p, restart)
    plan = {
        "step_time_s": step_time_s,
        "checkpoint_s": delta,
        "steps": job_steps(tokens, tokens_per_step),
        "policy": reliability.interval,
    }
    spot_price = None if usd_per_gpu_hour is None else usd_per_gpu_hour * (1.0 - spot.discount)
    od = _option("on-demand", base, usd_per_gpu_hour, gpus, 0.0, **plan)
    sp = _option("spot", spot_job, spot_price, gpus, r_p * 3600.0, **plan)
    even = break_even_preemption_rate(base, delta, nodes, spot.discount, restart)
    closed = break_even_closed_form(base, delta, nodes, spot.discount, restart)
    relative = (1.0 - spot.discount) * od.goodput / sp.goodput
    return SpotComparison(
        on_demand=od,
        spot=sp,
        discount=spot.discount,
        relative_cost=relative,
        pays_off=relative < 1.0,
        break_even_discount=1.0 - sp.goodput / od.goodput,
        break_even_preemptions_per_node_hour=even * 3600.0,
        break_even_preemptions_per_node_hour_closed_form=None
        if closed is None
        else closed * 3600.0,
        break_even_monthly_interruption=-math.expm1(-even * HOURS_PER_MONTH * 3600.0),
        notes=["every GPU is billed for the whole wall time, restarts and capacity waits included"],
    )
