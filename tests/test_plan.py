"""clustersim plan: at least as fast as the experts' published layouts, by the simulator's own model."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from sim import load_scenario, simulate_step
from sim.catalog import gpu_spec
from sim.scenario.load import Scenario
from sim.studies.plan.bounds import ShapeTimes, lower_bound_s, shape_of
from sim.studies.plan.memory import estimate_memory, least_memory
from sim.studies.plan.search import plan
from sim.studies.plan.space import Layout, layouts
from tests.helpers import REPO, SHARED_DATA

TABLE = SHARED_DATA / "published" / "megatron-lm-a100-weak-scaling.csv"
SLOW_ROWS = ("39B", "76B", "145B", "310B", "530B", "1T")


def megatron_rows() -> list:
    if not TABLE.exists():
        return []
    from calibrate.published import read_megatron_table

    return read_megatron_table(TABLE)


def _row_params() -> list:
    rows = megatron_rows()
    if not rows:
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"shared data absent: {TABLE}"))]
    return [
        pytest.param(r, id=r.name, marks=[pytest.mark.slow] if r.name in SLOW_ROWS else [])
        for r in rows
    ]


@pytest.mark.parametrize("row", _row_params())
def test_plan_is_at_least_as_fast_as_the_published_megatron_layout(row) -> None:  # type: ignore[no-untyped-def]
    """Narayanan et al. (SC21) / Megatron-LM README table, Selene A100: the published split
    (TP = min(8, MP), PP = MP / TP, full recompute, micro-batch 1) is one of the layouts
    the planner may pick, so the planner's best is never slower by the same model."""
    from calibrate.published import megatron_scenario

    scenario = megatron_scenario(row, profile="a100-megatron", run_script=False)
    published = simulate_step(scenario, network="analytical")
    best = plan(scenario, top=1).ranked[0]
    assert best.result.fits
    assert best.result.step_time_s <= published.step_time_s * (1 + 1e-9)


def test_ranking_is_fastest_first_and_every_entry_fits() -> None:
    r = plan(load_scenario("llama2-70b-256-ib"), top=5)
    times = [c.result.step_time_s for c in r.ranked]
    assert len(times) == 5 and times == sorted(times)
    assert all(c.result.fits for c in r.ranked)
    assert r.pruned > 0 and r.rejected  # the bound and the memory check both did work


def test_each_ranked_layout_is_what_simulate_step_gives() -> None:
    """The planner's numbers are the simulator's: rerun the winner as a user would."""
    s = load_scenario("llama3-8b-dgx")
    best = plan(s, top=1).ranked[0]
    sets = [f"parallel.{k}={json.dumps(v)}" for k, v in best.layout.settings().items()]
    again = simulate_step(load_scenario("llama3-8b-dgx", sets), network="analytical")
    assert again.step_time_s == best.result.step_time_s


def test_the_memory_check_agrees_with_the_simulated_step() -> None:
    """The planner's one window on the memory model says what simulate_step reports."""
    s = load_scenario("llama2-70b-256-ib", ["cluster.nodes=4"])
    found, _ = layouts(s.model, 32, 8, s.training.global_batch)
    for lay in found[::97]:
        sc = dataclasses.replace(s, parallel=dataclasses.replace(s.parallel, **lay.settings()))
        mem = estimate_memory(sc, 32, 8, [gpu_spec("H100-SXM")])
        least = least_memory(sc, 32, 8, [gpu_spec("H100-SXM")])
        r = simulate_step(sc, network="analytical")
        assert mem.total_bytes == r.memory_per_gpu_bytes
        assert least.total_bytes <= mem.total_bytes


def test_the_least_memory_reads_no_schedule() -> None:
    """The search keeps one least_memory per layout less its schedule and interleaving
    (``_Search.least``): an interleaved layout's answer is its 1F1B twin's, exactly, while
    the full estimates of some pairs differ."""
    s = load_scenario("llama2-70b-256-ib", ["cluster.nodes=4"])
    gpus = [gpu_spec("H100-SXM")]

    def at(lay: Layout) -> Scenario:
        return dataclasses.replace(s, parallel=dataclasses.replace(s.parallel, **lay.settings()))

    found, _ = layouts(s.model, 32, 8, s.training.global_batch)
    pairs = [
        (at(lay), at(dataclasses.replace(lay, schedule="1f1b", virtual_stages=1)))
        for lay in found[::7]
        if lay.virtual_stages > 1
    ]
    assert pairs
    for a, b in pairs:
        assert least_memory(a, 32, 8, gpus) == least_memory(b, 32, 8, gpus)
    assert any(estimate_memory(a, 32, 8, gpus) != estimate_memory(b, 32, 8, gpus) for a, b in pairs)


def test_the_step_time_bound_is_below_every_simulated_step() -> None:
    s = load_scenario("llama2-70b-256-ib", ["cluster.nodes=4"])
    shapes = ShapeTimes(s, s.cluster, 32)
    found, _ = layouts(s.model, 32, 8, s.training.global_batch)
    for lay in found[::53]:
        lay = dataclasses.replace(lay, recompute="full")
        sc = dataclasses.replace(s, parallel=dataclasses.replace(s.parallel, **lay.settings()))
        r = simulate_step(sc, network="analytical")
        bound = lower_bound_s(lay, s.training.global_batch, shapes.seconds(shape_of(lay)))
        assert 0 < bound <= r.step_time_s


def test_layouts_divide_the_job() -> None:
    s = load_scenario("llama2-70b-256-ib")
    found, skipped = layouts(s.model, 256, 8, s.training.global_batch)
    for lay in found:
        assert lay.tp * lay.pp * lay.dp == 256 and lay.tp <= 8
        assert s.model.layers % (lay.pp * lay.virtual_stages) == 0
        assert s.training.global_batch % (lay.micro_batch * lay.dp) == 0
    assert any("does not divide global_batch" in k for k in skipped.counts)


def test_one_gpu_answers_whether_one_gpu_is_enough() -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "sim", "plan", *args], capture_output=True,
                              text=True, check=False, cwd=REPO)  # fmt: skip

    no = cli("llama3-8b-dgx", "--gpus", "1", "--finetune", "full", "--offload", "none")
    assert no.returncode == 0, no.stderr
    assert "one GPU is not enough for any recipe searched (full adamw)" in no.stdout
    yes = cli("gpt2-1gpu", "--gpus", "1")
    assert "one GPU is enough" in yes.stdout
    lora = cli("llama3-8b-dgx", "--gpus", "1")  # every fine-tuning and offload by default
    assert "one GPU is enough: lora adamw" in lora.stdout


def test_json_is_a_list_best_first_with_parallel_and_run_fields() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "sim", "plan", "llama3-8b-dgx", "--top", "3", "--json"],
        capture_output=True, text=True, check=False, cwd=REPO,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert len(doc) == 3
    run_fields = set(simulate_step(load_scenario("gpt2-1gpu"), network="analytical").to_dict())
    for entry in doc:
        assert run_fields <= set(entry)
        assert set(entry["parallel"]) == {f.name for f in dataclasses.fields(Layout)}
    assert [e["step_time_s"] for e in doc] == sorted(e["step_time_s"] for e in doc)
    from sim.report import ResultSet

    assert ResultSet.from_dicts(doc).kind == "plan"


def test_budget_limits_the_cluster() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "sim", "plan", "llama3-8b-dgx", "--set", "cluster.topology=h100-ib-ndr",
         "--set", "cluster.nodes=4", "--max-usd-per-hour", "45", "--top", "2", "--json"],
        capture_output=True, text=True, check=False, cwd=REPO,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    price = load_scenario("llama3-8b-dgx").price.gpu_hour_usd
    assert price is not None and all(e["gpus"] * price <= 45 for e in doc)


def test_budget_without_a_price_is_refused() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "sim", "plan", "gpt2-1gpu", "--set", "price.gpu_hour_usd=null",
         "--max-usd-per-hour", "10"],
        capture_output=True, text=True, check=False, cwd=REPO,
    )  # fmt: skip
    assert p.returncode == 2 and "price.gpu_hour_usd" in p.stderr


def test_the_search_leaves_the_garbage_collector_as_it_found_it() -> None:
    """The search keeps older objects out of full collections while it runs (gc.freeze)
    and hands them back after; a caller's own frozen objects stay frozen."""
    import gc

    s = load_scenario("gpt2-1gpu")
    gc.unfreeze()  # an in-process CLI test may have frozen objects (sim.cli.long_lived)
    assert gc.get_freeze_count() == 0
    plan(s, top=1)
    assert gc.get_freeze_count() == 0
    mine = [object()]  # the caller's: frozen objects are not among gc.get_objects()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        plan(s, top=1)
        # still frozen, and nothing frozen added (the count may fall: a cache the search
        # refills can drop frozen entries it held, depending on the suite run before)
        assert not any(o is mine for o in gc.get_objects())
        assert gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()
    assert any(o is mine for o in gc.get_objects())
