"""Spot against on-demand: the closed forms, the break-even, and the event simulation at it."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.errors import ConfigError
from sim.packaged import validate_section
from sim.reliability import ReliabilityConfig, SpotConfig, simulate_goodput, spot_comparison
from sim.reliability.interruptions import Cause, Interruptions
from sim.reliability.intervals import exact_interval_s
from sim.reliability.renewal import expected_wall_s, goodput
from sim.reliability.spot import (
    break_even_closed_form,
    break_even_preemption_rate,
    optimal_goodput,
    with_preemptions,
)

HOUR = 3600.0
Z = 4.0


@given(
    mtbi_h=st.floats(0.2, 1000.0),
    delta=st.floats(0.1, 600.0),
    restarts=st.lists(st.floats(0.0, 3600.0), min_size=2, max_size=2),
)
@settings(max_examples=200, deadline=None)
def test_optimal_goodput_closed_form(mtbi_h: float, delta: float, restarts: list[float]) -> None:
    """G* = -W0(-exp(-1 - lambda delta)) q equals tau*/E[W] at the exact optimum."""
    job = Interruptions(
        (
            Cause("a", 0.7 / (mtbi_h * HOUR), restarts[0]),
            Cause("b", 0.3 / (mtbi_h * HOUR), restarts[1]),
        )
    )
    tau = exact_interval_s(delta, job.mtbi_s)
    assert optimal_goodput(delta, job) == pytest.approx(goodput(tau, delta, job), rel=1e-9)


@pytest.mark.parametrize("restart", [0.0, 300.0, 1800.0])
@pytest.mark.parametrize("mtbi_h", [0.5, 3.0, 30.0])
@pytest.mark.parametrize("discount", [0.05, 0.3, 0.6, 0.9])
def test_closed_form_break_even_equals_the_numerical_root(
    restart: float, mtbi_h: float, discount: float
) -> None:
    base = Interruptions((Cause("gpu", 1 / (mtbi_h * HOUR), restart),))
    exact = break_even_preemption_rate(base, 30.0, 128, discount, restart)
    closed = break_even_closed_form(base, 30.0, 128, discount, restart)
    assert closed == pytest.approx(exact, rel=1e-9)
    spot = with_preemptions(base, 128, exact, restart)
    assert optimal_goodput(30.0, spot) == pytest.approx(
        (1 - discount) * optimal_goodput(30.0, base), rel=1e-9
    )


def test_costless_preemptions_never_break_even() -> None:
    base = Interruptions((Cause("gpu", 1 / HOUR, 0.0),))
    assert break_even_preemption_rate(base, 0.0, 8, 0.5, 0.0) == math.inf
    assert break_even_closed_form(base, 0.0, 8, 0.5, 0.0) == math.inf


def test_closed_form_declines_mixed_restart_times() -> None:
    base = Interruptions((Cause("gpu", 1 / HOUR, 600.0),))
    assert break_even_closed_form(base, 30.0, 8, 0.5, restart_s=1800.0) is None
    assert break_even_preemption_rate(base, 30.0, 8, 0.5, restart_s=1800.0) > 0


def test_event_simulation_at_the_break_even_costs_the_same() -> None:
    """At the break-even rate the simulated cost per useful second is the same on both:
    (1 - d) W_spot / U_spot = W_od / U_od, within 4 combined standard errors."""
    base = Interruptions((Cause("gpu", 1 / (4 * HOUR), 300.0),))
    delta, nodes, d = 60.0, 16, 0.5
    rate = break_even_preemption_rate(base, delta, nodes, d, 900.0)
    spot = with_preemptions(base, nodes, rate, 900.0)
    cost, se = {}, {}
    for name, job, seed, price in (("od", base, 1, 1.0), ("spot", spot, 2, 1 - d)):
        tau = exact_interval_s(delta, job.mtbi_s)
        segments = round(300 * HOUR / tau)
        sim = simulate_goodput([tau] * segments, delta, job, runs=150, seed=seed)
        expected = segments * expected_wall_s(tau + delta, job)
        assert abs(sim.mean_wall_s - expected) < Z * sim.sem_wall_s
        cost[name] = price * sim.mean_wall_s / (segments * tau)
        se[name] = price * sim.sem_wall_s / (segments * tau)
    combined = math.hypot(se["od"], se["spot"])
    assert combined < 0.01 * cost["od"]
    assert abs(cost["spot"] - cost["od"]) < Z * combined


def test_the_last_partial_segment_is_in_the_expectation() -> None:
    """Wall time with a remainder segment = full segments + the remainder's own E[W]."""
    base = Interruptions((Cause("gpu", 1 / HOUR, 300.0),))
    tau = 900.0
    expected = 10 * expected_wall_s(tau + 30.0, base) + expected_wall_s(300.0 + 30.0, base)
    sim = simulate_goodput([tau] * 10 + [300.0], 30.0, base, runs=3000, seed=4)
    assert abs(sim.mean_wall_s - expected) < Z * sim.sem_wall_s


SCENARIO = {
    "step_time_s": 10.0,
    "gpus": 1024,
    "gpus_per_node": 8,
    "params": 70e9,
    "tokens": 2e12,
    "tokens_per_step": 4 * 2**20,
}


def test_comparison_costs_follow_from_goodput() -> None:
    cmp = spot_comparison(
        reliability=ReliabilityConfig(),
        spot=SpotConfig(discount=0.6, preemptions_per_node_hour=0.002),
        usd_per_gpu_hour=2.0,
        **SCENARIO,  # type: ignore[arg-type]
    )
    od, sp = cmp.on_demand, cmp.spot
    assert od.cost_usd is not None and sp.cost_usd is not None
    assert sp.usd_per_gpu_hour == pytest.approx(0.8)
    assert sp.cost_usd / od.cost_usd == pytest.approx(cmp.relative_cost, rel=1e-12)
    assert cmp.relative_cost == pytest.approx(0.4 * od.goodput / sp.goodput)
    assert sp.mtbi_s < od.mtbi_s and sp.goodput < od.goodput
    assert cmp.pays_off
    assert 0 < cmp.break_even_discount < 0.6
    assert cmp.break_even_preemptions_per_node_hour > 0.002
    assert cmp.break_even_preemptions_per_node_hour_closed_form == pytest.approx(
        cmp.break_even_preemptions_per_node_hour, rel=1e-9
    )


def test_spot_stops_paying_past_the_break_even() -> None:
    cfg = ReliabilityConfig()
    at = spot_comparison(
        reliability=cfg, spot=SpotConfig(discount=0.3, preemptions_per_node_hour=0.01), **SCENARIO
    )  # type: ignore[arg-type]
    rate = at.break_even_preemptions_per_node_hour
    below = spot_comparison(
        reliability=cfg,
        spot=SpotConfig(discount=0.3, preemptions_per_node_hour=rate * 0.8),
        **SCENARIO,
    )  # type: ignore[arg-type]
    above = spot_comparison(
        reliability=cfg,
        spot=SpotConfig(discount=0.3, preemptions_per_node_hour=rate * 1.25),
        **SCENARIO,
    )  # type: ignore[arg-type]
    assert below.pays_off and not above.pays_off


def test_monthly_interruption_matches_the_equivalent_rate() -> None:
    """f = 1 - exp(-r * 730 h): AWS Spot Advisor's monthly frequency as a per-node rate."""
    by_month = SpotConfig(discount=0.7, monthly_interruption=0.2)
    by_rate = SpotConfig(discount=0.7, preemptions_per_node_hour=-math.log(0.8) / 730)
    assert by_month.preemption_rate_per_node_s() == pytest.approx(
        by_rate.preemption_rate_per_node_s(), rel=1e-12
    )


def test_no_discount_never_pays_and_breaks_even_at_zero() -> None:
    cmp = spot_comparison(
        reliability=ReliabilityConfig(),
        spot=SpotConfig(discount=0.0, preemptions_per_node_hour=0.001),
        **SCENARIO,
    )  # type: ignore[arg-type]
    assert not cmp.pays_off and cmp.break_even_preemptions_per_node_hour == 0.0


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (
            {"discount": 0.5},
            "spot: give exactly one of preemptions_per_node_hour or monthly_interruption",
        ),
        ({"discount": 1.0, "monthly_interruption": 0.1}, "spot.discount"),
        ({"discount": -0.1, "monthly_interruption": 0.1}, "spot.discount"),
        (
            {"discount": 0.5, "preemptions_per_node_hour": float("nan")},
            "spot.preemptions_per_node_hour",
        ),
        ({"discount": 0.5, "monthly_interruption": 1.0}, "spot.monthly_interruption"),
        ({"discount": 0.5, "monthly_interruption": 0.1, "restart_s": -5}, "spot.restart_s"),
        ({"discount": 0.5, "monthly_interruption": 0.1, "bid": 3}, "spot.bid: unknown key"),
    ],
)
def test_bad_spot_sections(section: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        validate_section(SpotConfig, section, "spot")
