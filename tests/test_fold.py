"""Folded pipeline steps (sim.training.graph.fold): a few micro-batches simulated, the
periodic steady state repeated, the same step as the whole graph gives."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.scenario.load import load_scenario
from sim.training import step as step_module
from sim.training.graph import fold
from sim.training.graph.costs import chunk_costs
from sim.training.graph.execute import execute
from sim.training.setup import prepare_step
from sim.training.step import _timer, run_step, simulate_step

NAME = "llama2-70b-256-ib"  # 256 H100, tp 8, pp 4, dp 8, 128 micro-batches, 1F1B


def _both(monkeypatch: pytest.MonkeyPatch, sets: list[str], name: str = NAME):  # type: ignore[no-untyped-def]
    """(folded result, whole-graph result) of one scenario on the analytical network."""
    sc = load_scenario(name, sets)
    folded = run_step(sc, "analytical", whole=False)[0]
    with monkeypatch.context() as m:
        m.setattr(step_module, "fold_run", lambda *a: None)
        whole = run_step(sc, "analytical", whole=False)[0]
    return folded, whole


def _assert_same(folded, whole) -> None:  # type: ignore[no-untyped-def]
    """Equal up to rounding: every time within 1e-12 of the step, every byte count and
    FLOP rate within 1e-12 relative, everything else identical."""
    step = whole.step_time_s
    assert folded.step_time_s == pytest.approx(step, rel=1e-12)
    assert folded.breakdown.keys() == whole.breakdown.keys()
    for k, v in whole.breakdown.items():
        assert abs(folded.breakdown[k] - v) <= 1e-12 * step, k
    for k, v in whole.link_bytes_by_scope.items():
        assert folded.link_bytes_by_scope[k] == pytest.approx(v, rel=1e-12, abs=1e-3), k
    assert folded.mfu == pytest.approx(whole.mfu, rel=1e-12)
    assert folded.cp_bytes_per_gpu == pytest.approx(whole.cp_bytes_per_gpu, rel=1e-12)
    assert folded.critical_stage == whole.critical_stage
    assert (folded.memory_per_gpu_bytes, folded.fits, folded.notes) == (
        whole.memory_per_gpu_bytes, whole.fits, whole.notes
    )  # fmt: skip


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    pp=st.sampled_from([1, 2, 4, 8]),
    tp=st.sampled_from([4, 8]),
    interleaved=st.sampled_from([0, 0, 2, 5]),  # 0: 1F1B, else chunks per stage (80 layers)
    extra=st.integers(1, 12),
    zero=st.sampled_from([0, 1, 2]),
    overlap_dp=st.booleans(),
    framework=st.sampled_from(["", "megatron-core", "torchtitan", "deepspeed", "nemo"]),
    recompute=st.sampled_from(["selective", "full"]),
)
def test_a_folded_step_is_the_whole_step(
    monkeypatch: pytest.MonkeyPatch, pp: int, tp: int, interleaved: int, extra: int,
    zero: int, overlap_dp: bool, framework: str, recompute: str,
) -> None:  # fmt: skip
    """Over pipeline depths, 1F1B and interleaved, micro-batch counts, ZeRO stages, overlap
    and the frameworks' semantics: the folded step gives the whole graph's step time,
    breakdown, byte counters and MFU (to rounding)."""
    dp = 256 // (tp * pp)
    if interleaved and pp > 1:
        m = pp * (1 + extra)
        sets = ["parallel.schedule=interleaved", f"parallel.virtual_stages={interleaved}"]
    else:
        m = pp + fold.FOLD_BLOCKS["1f1b"] + extra
        sets = []
    sets += [f"parallel.pp={pp}", f"parallel.tp={tp}", f"parallel.dp={dp}",
             f"parallel.zero={zero}", f"parallel.overlap_dp={str(overlap_dp).lower()}",
             f"parallel.recompute={recompute}", f"training.global_batch={m * dp}"]  # fmt: skip
    if framework:
        sets.append(f"training.framework={framework}")
    folded, whole = _both(monkeypatch, sets)
    _assert_same(folded, whole)


@pytest.mark.parametrize(
    ("name", "sets"),
    [
        ("gpt3-175b-1024", []),
        ("llama2-70b-256-ib", []),
        ("llama2-70b-256-roce", []),
        ("gpt2-1gpu", []),
        (
            "llama2-70b-256-ib",
            [
                "parallel.schedule=interleaved",
                "parallel.virtual_stages=4",
                "parallel.pp=2",
                "parallel.dp=16",
            ],
        ),
    ],
)
def test_shipped_scenarios_fold_to_the_whole_step(
    monkeypatch: pytest.MonkeyPatch, name: str, sets: list[str]
) -> None:
    """Every shipped 1F1B scenario, and an interleaved layout of one, folds (the fold is
    used) and gives the whole step."""
    setup = prepare_step(load_scenario(name, sets), "analytical")
    timer = _timer(setup)
    got = fold.fold_run(setup, timer, chunk_costs(setup, timer))
    assert got is not None
    run, ideal = got
    assert ideal.weight == run.weight
    m1 = fold.fold_microbatches(setup)
    assert m1 is not None and m1 < setup.plan.num_microbatches
    plan = setup.plan
    v = plan.virtual_stages
    unit = fold.SteadyLayout.of(plan.schedule, plan.pp, m1, v).microbatches
    assert len(run.graph.passes) == 2 * m1 * v * plan.pp  # the short graph ran
    assert run.weight is not None
    assert max(run.weight) == (plan.num_microbatches - m1) // unit + 1
    for line in run.lines:  # the lines count every pass of the whole step
        assert sum(line.repeats) == 2 * plan.num_microbatches * v
    _assert_same(*_both(monkeypatch, sets, name))


@pytest.mark.parametrize(
    ("sets", "network"),
    [
        (["parallel.schedule=gpipe"], "analytical"),
        ([], "flow"),  # the simulated network shares links: every task runs
        (["training.global_batch=48"], "analytical"),  # 6 micro-batches: nothing to gain
        (["parallel.zero=3"], "analytical"),  # NIC-sharing gathers and reductions
    ],
)
def test_the_fold_declines_where_it_does_not_hold(sets: list[str], network: str) -> None:
    """GPipe, the simulated network, short steps and gap-filling reductions are not
    folded: the whole graph runs."""
    setup = prepare_step(load_scenario(NAME, sets), network)
    timer = _timer(setup)
    assert fold.fold_run(setup, timer, chunk_costs(setup, timer)) is None


def test_a_block_that_is_not_periodic_is_not_repeated() -> None:
    """The periodicity check looks at every task of the two blocks: one task moved by a
    nanosecond more than the rest, and the block is not taken to repeat."""
    setup = prepare_step(load_scenario(NAME), "analytical")
    timer = _timer(setup)
    costs = chunk_costs(setup, timer)
    m1 = fold.fold_microbatches(setup)
    assert m1 is not None
    graph = fold.build_step_graph(setup, timer, costs, microbatches=m1)
    plan = setup.plan
    blocks = fold._blocks(
        graph, fold.SteadyLayout.of(plan.schedule, plan.pp, m1, plan.virtual_stages)
    )
    done = execute(graph, timer, "analytical")
    lam = fold._period(blocks, done.start, done.end, 1)
    assert lam is not None and lam > 0
    end = list(done.end)
    end[blocks.members[2][-1]] += 1e-9
    assert fold._period(blocks, done.start, end, 1) is None
    assert math.isclose(lam, fold._period(blocks, done.start, done.end, 2) or 0.0, rel_tol=1e-12)


def test_every_entry_point_gives_the_folded_step_and_traces_get_the_whole_graph() -> None:
    """``simulate_step`` and ``run_step`` (what ``run`` and the trace writer call) give
    byte-identical results; the run ``run_step`` returns is the whole graph."""
    sc = load_scenario(NAME)
    a = simulate_step(sc, "analytical")
    b, run, setup = run_step(sc, "analytical")
    traced = run_step(sc, "analytical", record=True)[0]  # what `run --trace` calls
    assert a.to_dict() == b.to_dict() == traced.to_dict()
    assert run.weight is None
    assert len(run.graph.passes) == 2 * setup.plan.num_microbatches * setup.plan.pp


INTERLEAVED = ["parallel.schedule=interleaved", "parallel.virtual_stages=4", "parallel.pp=2",
               "parallel.dp=16"]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "sets", "runs"),
    [
        ("gpt3-175b-1024", [], 1),  # one short step serves every batch
        ("llama2-70b-256-ib", INTERLEAVED, 1),
        # unfused accumulation: the pass costs change with the micro-batch count
        ("llama2-70b-256-ib", ["training.grad_accum_fusion=false"], 3),
    ],
)
def test_a_kept_short_step_gives_the_step_run_afresh(
    monkeypatch: pytest.MonkeyPatch, name: str, sets: list[str], runs: int
) -> None:
    """Steps that differ only in their global batch share the short step (built and run
    once, while the pass costs are equal) and give, byte for byte, what a fresh run
    gives."""
    calls: list[int] = []
    real = fold._run_short
    monkeypatch.setattr(fold, "_run_short", lambda *a: calls.append(1) or real(*a))
    base = load_scenario(name, sets)
    per_block = base.parallel.dp * base.parallel.micro_batch * base.parallel.pp
    fold._SHORT.clear()
    kept, fresh = [], []
    batches = [
        f"training.global_batch={base.training.global_batch + k * per_block}" for k in (1, 2, 3)
    ]
    for batch in batches:
        kept.append(run_step(load_scenario(name, [*sets, batch]), "analytical", whole=False)[0])
    assert len(calls) == runs
    for batch in batches:
        fold._SHORT.clear()
        fresh.append(run_step(load_scenario(name, [*sets, batch]), "analytical", whole=False)[0])
    assert [r.to_dict() for r in kept] == [r.to_dict() for r in fresh]
    assert len({r.step_time_s for r in kept}) == 3  # the batches were different steps
