"""The seeded event simulation against the closed forms it must reproduce in expectation.

Tolerance: the sample mean of the wall time over N independent runs has standard error
SE = s / sqrt(N). Each check asserts |mean - E[W]| < 4 SE (a 6e-5 chance of a false alarm
for a normal mean; the seeds are fixed, so the outcome is deterministic) and that SE is below
1% of E[W], so the check has the power to see a 4% error.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from sim.errors import ConfigError
from sim.reliability.events import simulate_goodput, simulate_run
from sim.reliability.interruptions import Cause, Interruptions
from sim.reliability.plan import job_plan
from sim.reliability.renewal import expected_wall_s

HOUR = 3600.0
Z = 4.0

JOBS = {
    "one cause": Interruptions((Cause("gpu", 1 / HOUR, 300.0),)),
    "restart longer than MTBI/10": Interruptions((Cause("gpu", 1 / (2 * HOUR), 1800.0),)),
    "three causes": Interruptions(
        (
            Cause("gpu", 0.6 / HOUR, 120.0),
            Cause("node", 0.3 / HOUR, 900.0),
            Cause("net", 0.1 / HOUR, 0.0),
        )
    ),
}


@pytest.mark.parametrize("name", list(JOBS))
def test_mean_wall_time_matches_the_closed_form(name: str) -> None:
    job = JOBS[name]
    plan = job_plan(job, step_time_s=5.0, checkpoint_s=45.0, steps=20_000, policy="daly")
    assert plan.expected_wall_s is not None and plan.breakdown_s is not None
    sim = simulate_goodput(plan.segment_work_s(), 45.0, job, runs=120, seed=11)
    assert sim.sem_wall_s < 0.01 * plan.expected_wall_s
    assert abs(sim.mean_wall_s - plan.expected_wall_s) < Z * sim.sem_wall_s
    assert sim.goodput == pytest.approx(plan.goodput, rel=Z * sim.sem_wall_s / plan.expected_wall_s)
    for part in ("lost", "restart"):
        assert (
            abs(sim.mean_breakdown_s[part] - plan.breakdown_s[part]) < Z * sim.sem_breakdown_s[part]
        )
    assert sim.mean_breakdown_s["useful"] == pytest.approx(plan.breakdown_s["useful"], rel=1e-12)
    assert plan.expected_interruptions is not None
    assert abs(sim.mean_interruptions - plan.expected_interruptions) < Z * sim.sem_interruptions


def test_every_run_accounts_for_its_whole_wall_time() -> None:
    rng = np.random.default_rng(3)
    job = JOBS["three causes"]
    for _ in range(20):
        run = simulate_run([600.0] * 30, 60.0, job, rng)
        parts = run.useful_s + run.checkpoint_s + run.lost_s + run.restart_s
        assert parts == pytest.approx(run.wall_s, rel=1e-12)
        assert run.useful_s == pytest.approx(30 * 600.0)
        assert run.checkpoint_s == pytest.approx(30 * 60.0)


def test_same_seed_same_runs_other_seed_other_runs() -> None:
    job = JOBS["one cause"]
    a = simulate_goodput([900.0] * 40, 30.0, job, runs=5, seed=7)
    b = simulate_goodput([900.0] * 40, 30.0, job, runs=5, seed=7)
    c = simulate_goodput([900.0] * 40, 30.0, job, runs=5, seed=8)
    assert a == b
    assert a.mean_wall_s != c.mean_wall_s


def test_without_failures_the_run_is_deterministic() -> None:
    run = simulate_run([100.0, 50.0], 10.0, Interruptions(()), np.random.default_rng(0))
    assert (run.wall_s, run.lost_s, run.restart_s, run.interruptions) == (170.0, 0.0, 0.0, 0)


def test_a_single_segment_matches_the_formula_for_long_restarts() -> None:
    """Interruptions during restarts (R = M/2) are where naive models go wrong."""
    job = Interruptions((Cause("gpu", 1 / HOUR, HOUR / 2),))
    sim = simulate_goodput([2 * HOUR], 0.0, job, runs=10_000, seed=5)
    exact = expected_wall_s(2 * HOUR, job)
    assert sim.sem_wall_s < 0.01 * exact
    assert abs(sim.mean_wall_s - exact) < Z * sim.sem_wall_s
    assert not math.isclose(
        exact, HOUR * math.expm1(2.0) * (1 + 0.5), rel_tol=0.01
    )  # the naive E[N](M+R)


@pytest.mark.parametrize(
    ("work", "runs"), [([], 5), ([10.0, 0.0], 5), ([10.0, math.nan], 5), ([10.0], 1)]
)
def test_bad_inputs_are_refused(work: list[float], runs: int) -> None:
    with pytest.raises(ConfigError):
        simulate_goodput(work, 1.0, JOBS["one cause"], runs=runs, seed=0)
