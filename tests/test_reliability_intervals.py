"""Optimum checkpoint intervals: Young, Daly and the exact (Lambert W) optimum against closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import lambertw

from sim.errors import ConfigError
from sim.reliability.interruptions import Cause, Interruptions
from sim.reliability.intervals import (
    branch_w,
    daly_interval_s,
    exact_interval_s,
    interval_s,
    interval_steps,
    wall_per_useful_s,
    young_interval_s,
)

MIN = 60.0
HOUR = 3600.0


def cost(tau: float, delta: float, mtbi: float) -> float:
    """Daly's cost per useful second up to a constant: (exp((tau+delta)/M) - 1)/tau."""
    return math.expm1((tau + delta) / mtbi) / tau


@pytest.mark.parametrize(
    ("mtbi_h", "delta_min", "published_min"),
    [(24.0, 5.0, 117.0), (6.0, 5.0, 57.0), (0.25, 5.0, 9.1)],
)
def test_daly_matches_his_published_optima(
    mtbi_h: float, delta_min: float, published_min: float
) -> None:
    """Daly (FGCS 2006), Figs. 3-5: M=24 h -> 117 min, 6 h -> 57 min, 15 min -> 9.1 min (delta=5 min)."""
    tau_min = daly_interval_s(delta_min * MIN, mtbi_h * HOUR) / MIN
    assert tau_min == pytest.approx(published_min, abs=0.5 if published_min > 10 else 0.05)


def test_young_is_sqrt_two_delta_m() -> None:
    assert young_interval_s(300.0, 86400.0) == math.sqrt(2 * 300.0 * 86400.0)


@pytest.mark.parametrize("ratio", [1e-5, 1e-3, 0.01, 0.1, 0.5, 2.0])
def test_exact_optimum_zeroes_the_derivative(ratio: float) -> None:
    """d/dtau [(exp((tau+delta)/M)-1)/tau] = 0 at the Lambert-W optimum (central difference)."""
    mtbi = 10_000.0
    delta = ratio * mtbi
    tau = exact_interval_s(delta, mtbi)
    h = tau * 1e-5
    slope = (cost(tau + h, delta, mtbi) - cost(tau - h, delta, mtbi)) / (2 * h)
    scale = cost(tau, delta, mtbi) / tau
    assert abs(slope) < 1e-8 * scale


@pytest.mark.parametrize("ratio", [1e-4, 1e-2, 0.3])
def test_brute_force_minimum_equals_the_formula(ratio: float) -> None:
    """A dense grid search of the cost finds the same tau as the closed form (within 0.1%)."""
    mtbi = 7200.0
    delta = ratio * mtbi
    tau = exact_interval_s(delta, mtbi)
    grid = np.linspace(tau * 0.5, tau * 1.5, 200_001)
    costs = np.expm1((grid + delta) / mtbi) / grid
    assert grid[int(np.argmin(costs))] == pytest.approx(tau, rel=1e-3)


@given(ratio=st.floats(min_value=1e-7, max_value=0.05))
@settings(max_examples=200, deadline=None)
def test_daly_is_close_to_exact_and_young_overshoots(ratio: float) -> None:
    """For delta << M Daly's higher-order estimate is within 0.5% of the optimum, and its cost
    within 1e-5; Young's first-order estimate lies above the optimum and converges to it."""
    mtbi = 3600.0
    delta = ratio * mtbi
    exact = exact_interval_s(delta, mtbi)
    daly = daly_interval_s(delta, mtbi)
    assert daly == pytest.approx(exact, rel=5e-3)
    assert cost(daly, delta, mtbi) == pytest.approx(cost(exact, delta, mtbi), rel=1e-5)
    assert young_interval_s(delta, mtbi) >= exact * (1 - 1e-9)
    assert cost(exact, delta, mtbi) <= cost(young_interval_s(delta, mtbi), delta, mtbi) * (
        1 + 1e-12
    )


def test_daly_caps_at_m_when_the_checkpoint_is_long() -> None:
    assert daly_interval_s(3 * HOUR, HOUR) == HOUR


@pytest.mark.parametrize("u", [0.0, 1e-12, 1e-8, 1e-6, 1e-3, 0.5, 5.0])
def test_branch_w_solves_its_equation(u: float) -> None:
    """w = -W0(-exp(-1-u)) satisfies w - 1 - ln(w) = u (the series near u=0 included)."""
    w = branch_w(u)
    assert 0 < w <= 1
    assert w - 1 - math.log(w) == pytest.approx(u, rel=1e-6, abs=1e-15)
    if u >= 1e-6:
        assert w == pytest.approx(float(-lambertw(-math.exp(-1 - u)).real), rel=1e-12)


def test_no_failures_means_no_checkpoint_until_the_end() -> None:
    assert exact_interval_s(60.0, math.inf) == math.inf
    assert interval_steps(math.inf, 2.0, 60.0, Interruptions(()), 1234) == 1234


def test_steps_round_to_the_cheaper_neighbour() -> None:
    job = Interruptions((Cause("gpu", 1 / HOUR, 0.0),))
    target = exact_interval_s(60.0, HOUR)
    k = interval_steps(target, 7.0, 60.0, job, 10**9)
    assert k in (math.floor(target / 7.0), math.ceil(target / 7.0))
    for other in (k - 1, k + 1):
        assert wall_per_useful_s(k * 7.0, 60.0, job) <= wall_per_useful_s(other * 7.0, 60.0, job)


def test_unknown_policy_names_the_allowed_ones() -> None:
    with pytest.raises(ConfigError, match="allowed: young, daly, exact or a step count"):
        interval_s("hourly", 60.0, HOUR)


@pytest.mark.parametrize(
    ("delta", "mtbi"), [(math.nan, HOUR), (-1.0, HOUR), (60.0, 0.0), (60.0, math.nan)]
)
def test_bad_inputs_are_refused(delta: float, mtbi: float) -> None:
    with pytest.raises(ConfigError):
        young_interval_s(delta, mtbi)
