"""Expected wall time and goodput under Poisson interruptions, against Daly's closed form."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.reliability.interruptions import Cause, Interruptions
from sim.reliability.renewal import (
    expected_interruptions,
    expected_wall_s,
    goodput,
    segment_breakdown,
)

HOUR = 3600.0
positive = st.floats(min_value=1.0, max_value=1e5)


@given(
    tau=positive, delta=st.floats(0.0, 1e4), mtbi=st.floats(600.0, 1e7), restart=st.floats(0.0, 1e4)
)
@settings(max_examples=300, deadline=None)
def test_single_cause_is_dalys_cost_function(
    tau: float, delta: float, mtbi: float, restart: float
) -> None:
    """One cause: E[W] = M exp(R/M) (exp((tau+delta)/M) - 1) (Daly 2006)."""
    job = Interruptions((Cause("any", 1.0 / mtbi, restart),))
    daly = mtbi * math.exp(restart / mtbi) * math.expm1((tau + delta) / mtbi)
    assert expected_wall_s(tau + delta, job) == pytest.approx(daly, rel=1e-12)


@given(
    tau=positive,
    delta=st.floats(0.0, 1e4),
    rates=st.lists(st.floats(1e-7, 1e-3), min_size=1, max_size=4),
    restarts=st.lists(st.floats(0.0, 3e3), min_size=4, max_size=4),
)
@settings(max_examples=300, deadline=None)
def test_breakdown_sums_to_the_wall_time_and_wald_holds(
    tau: float, delta: float, rates: list[float], restarts: list[float]
) -> None:
    """useful + checkpoint + lost + restart = E[W]; interruptions = lambda E[W] (Wald)."""
    job = Interruptions(tuple(Cause(f"c{i}", r, restarts[i]) for i, r in enumerate(rates)))
    wall = expected_wall_s(tau + delta, job)
    parts = segment_breakdown(tau, delta, job)
    assert math.fsum(parts.values()) == pytest.approx(wall, rel=1e-9)
    assert min(parts.values()) >= -1e-9 * wall
    assert expected_interruptions(tau + delta, job) == pytest.approx(
        job.rate_per_s * wall, rel=1e-9
    )


def test_a_segment_of_thousands_of_mtbis_never_finishes() -> None:
    """Past the float range the expected wall time is inf and goodput 0, not an overflow."""
    job = Interruptions((Cause("any", 1.0 / 60.0, 0.0),))
    assert expected_wall_s(1e6, job) == math.inf
    assert goodput(1e6, 0.0, job) == 0.0
    assert segment_breakdown(1e6, 0.0, job) == {
        "useful": 1e6, "checkpoint": 0.0, "lost": math.inf, "restart": 0.0,
    }  # fmt: skip


def test_nothing_fails_nothing_is_lost() -> None:
    job = Interruptions(())
    assert expected_wall_s(123.0, job) == 123.0
    assert goodput(100.0, 25.0, job) == 0.8
    assert expected_interruptions(100.0, job) == 0.0


def test_restarts_split_by_cause_use_each_causes_restart_time() -> None:
    """q = sum p_i exp(-lambda R_i): two causes at equal rates with R=0 and R=r."""
    lam, r = 1e-4, 500.0
    job = Interruptions((Cause("a", lam, 0.0), Cause("b", lam, r)))
    q = 0.5 * 1.0 + 0.5 * math.exp(-2 * lam * r)
    assert job.restart_survival() == pytest.approx(q, rel=1e-15)
    assert expected_wall_s(1000.0, job) == pytest.approx(
        math.expm1(2 * lam * 1000.0) / (2 * lam * q)
    )


@given(
    tau=positive, delta=st.floats(0.0, 1e3), mtbi=st.floats(3e4, 1e6), more=st.floats(1.01, 10.0)
)
@settings(max_examples=200, deadline=None)
def test_more_failures_lower_goodput(tau: float, delta: float, mtbi: float, more: float) -> None:
    low = Interruptions((Cause("any", 1.0 / mtbi, 300.0),))
    high = Interruptions((Cause("any", more / mtbi, 300.0),))
    assert goodput(tau, delta, high) < goodput(tau, delta, low)


@given(tau=positive, delta=st.floats(1e-3, 1e3), faster=st.floats(1.01, 100.0))
@settings(max_examples=200, deadline=None)
def test_shorter_checkpoints_higher_goodput(tau: float, delta: float, faster: float) -> None:
    job = Interruptions((Cause("any", 1.0 / (3 * HOUR), 600.0),))
    assert goodput(tau, delta / faster, job) > goodput(tau, delta, job)
