"""The planner's step-time bounds are below the simulated step, and its cuts never change
what it ranks (sim/studies/plan/bounds.py, sim/studies/plan/search.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sim.studies.plan.search as search
from sim import load_scenario, simulate_step
from sim.scenario.load import Scenario
from sim.studies.plan.bounds import (
    ShapeTimes,
    lower_bound_s,
    pipeline_bound_s,
    shape_of,
    step_bounds,
)
from sim.studies.plan.space import RECOMPUTE_ORDER, Layout, layouts
from sim.training.compute.passes import PassCost
from sim.training.schedule.ideal import simulate_ideal
from sim.training.schedule.pipeline import make_schedule


def _with(s: Scenario, lay: Layout) -> Scenario:
    return dataclasses.replace(s, parallel=dataclasses.replace(s.parallel, **lay.settings()))


def _variants(found: list[Layout], stride: int) -> Iterator[Layout]:
    """Every ``stride``-th layout, each with another recompute, and now and then with an
    overlap switch off (what the planner's finalists try)."""
    for i, lay in enumerate(found[::stride]):
        lay = dataclasses.replace(lay, recompute=RECOMPUTE_ORDER[i % 3])
        if i % 4 == 1:
            lay = dataclasses.replace(lay, overlap_dp=False)
        if i % 4 == 3 and lay.tp > 1:
            lay = dataclasses.replace(lay, overlap_tp=False)
        yield lay


def _check_below(s: Scenario, lay: Layout, shapes: ShapeTimes) -> list[float]:
    sc = _with(s, lay)
    step = simulate_step(sc, network="analytical").step_time_s
    probe = lower_bound_s(lay, s.training.global_batch, shapes.seconds(shape_of(lay)))
    tighter = list(step_bounds(sc))
    assert tighter == sorted(tighter), lay.label()  # each level only adds
    assert max([probe, *tighter]) <= step, (lay.label(), probe, tighter, step)
    return tighter


SMALL = "training.global_batch=32"  # few micro-batches: small graphs, quick steps


@pytest.mark.parametrize(
    ("name", "sets", "gpus", "cps", "stride"),
    [
        ("llama2-70b-256-ib", ["cluster.nodes=4", SMALL], 32, (1,), 11),
        ("llama3-8b-dgx", [SMALL], 8, (1, 2), 13),
        ("llama3-8b-dgx", ["model.experts=4", "model.top_k=2", SMALL], 8, (1,), 13),
        pytest.param("llama2-70b-256-ib", ["cluster.nodes=4"], 32, (1,), 7,
                     marks=pytest.mark.slow),
        pytest.param("llama3-8b-dgx", [], 8, (1, 2), 5, marks=pytest.mark.slow),
    ],
    ids=["70b-32gpu", "8b-cp", "8b-moe", "70b-32gpu-full-batch", "8b-cp-full-batch"],
)  # fmt: skip
def test_every_bound_is_below_the_simulated_step(
    name: str, sets: list[str], gpus: int, cps: tuple[int, ...], stride: int
) -> None:
    """ZeRO 0-3, interleaving, recompute, overlap off, CP and EP: the probe bound and every
    level of the tighter bounds stay at or below the step ``simulate_step`` gives."""
    s = load_scenario(name, sets)
    found, _ = layouts(s.model, gpus, 8, s.training.global_batch, cps, s.training.seq_len)
    shapes = ShapeTimes(s, s.cluster, gpus)
    checked = [_check_below(s, lay, shapes) for lay in _variants(found, stride)]
    assert len(checked) >= 8 and sum(1 for t in checked if t) >= len(checked) // 2


def test_the_bound_holds_for_every_layout_a_plan_simulates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The layouts a search simulates are the ones closest to their bound."""
    s = load_scenario("llama2-70b-256-ib", ["cluster.nodes=4", SMALL])
    seen: list[Layout] = []
    simulate = search._Search.simulate

    def record(self: search._Search, layout: Layout) -> search.Candidate | None:
        seen.append(layout)
        return simulate(self, layout)

    monkeypatch.setattr(search._Search, "simulate", record)
    search.plan(s, top=5)
    shapes = ShapeTimes(s, s.cluster, 32)
    assert len(seen) >= 5
    for lay in seen:
        _check_below(s, lay, shapes)


def _exhaustive(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every bound 0: the search cuts nothing and simulates every layout that fits."""
    monkeypatch.setattr(search, "lower_bound_s", lambda *a: 0.0)
    monkeypatch.setattr(search, "step_bounds", lambda sc: iter(()))


def _same_ranking(s: Scenario, top: int, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = search.plan(s, top=top)
    with monkeypatch.context() as m:
        _exhaustive(m)
        every = search.plan(s, top=top)
    assert every.pruned == 0 and every.simulated > fast.simulated
    assert [c.layout for c in fast.ranked] == [c.layout for c in every.ranked]
    assert [c.result.to_dict() for c in fast.ranked] == [c.result.to_dict() for c in every.ranked]


def test_the_cuts_never_change_the_ranking(monkeypatch: pytest.MonkeyPatch) -> None:
    """Searching with the bounds ranks exactly what simulating every layout ranks."""
    s = load_scenario("llama3-8b-dgx", ["training.global_batch=8"])
    _same_ranking(s, 5, monkeypatch)


@pytest.mark.slow
def test_the_cuts_never_change_the_ranking_at_full_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    _same_ranking(load_scenario("llama3-8b-dgx"), 5, monkeypatch)


def _uniform(p: int, v: int, f: float, b: float) -> dict[tuple[int, str], PassCost]:
    out = {}
    for vs in range(p * v):
        out[(vs, "F")] = PassCost(f / v, 0.0, 0.0, 0.0, 0.0)
        out[(vs, "B")] = PassCost(b / v, 0.0, 0.0, 0.0, 0.0)
    return out


def test_the_pipeline_bound_is_1f1b_exactly() -> None:
    """Equal stages, 1F1B: ``(m + p - 1) (t_f + t_b)``, the schedule's makespan."""
    p, m, f, b = 4, 8, 1.0, 2.0
    ideal = simulate_ideal(make_schedule("1f1b", p, m), f, b).makespan_s
    assert ideal == (m + p - 1) * (f + b)
    assert pipeline_bound_s(_uniform(p, 1, f, b), p, 1, m) == pytest.approx(ideal, rel=2e-9)


@settings(max_examples=60, deadline=None)
@given(
    schedule=st.sampled_from(["1f1b", "gpipe", "interleaved"]),
    p=st.integers(1, 6),
    groups=st.integers(1, 4),
    v=st.integers(1, 4),
    f=st.floats(0.1, 3.0),
    b=st.floats(0.1, 6.0),
)
def test_the_pipeline_bound_never_exceeds_the_ideal_pipeline(
    schedule: str, p: int, groups: int, v: int, f: float, b: float
) -> None:
    """Every schedule, free communication: the bound is at most the makespan."""
    v = v if schedule == "interleaved" else 1
    m = groups * p
    ideal = simulate_ideal(make_schedule(schedule, p, m, v), f, b).makespan_s
    assert pipeline_bound_s(_uniform(p, v, f, b), p, v, m) <= ideal
