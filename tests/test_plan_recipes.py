"""The planner answers "is one GPU enough?": it searches LoRA, QLoRA, optimizers and offload
with the layouts, reports the cheapest that fits and why the others do not; ``--explain``
says what each of the best's settings buys against the scenario's own."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest

from sim import load_scenario
from sim.errors import ConfigError
from sim.studies.plan.explain import explain, render_explanation
from sim.studies.plan.recipes import ALL, Recipe, parse_choices, recipes
from sim.studies.plan.search import plan
from sim.training.step import simulate_step
from tests.helpers import REPO

LLAMA2_7B = ["model.preset=llama2-7b", "training.seq_len=4096", "training.global_batch=16"]


@pytest.fixture(scope="module")
def one_gpu():  # type: ignore[no-untyped-def]
    """Llama-2-7B, 16 sequences of 4096 tokens per step, on one H100 of a DGX, every
    fine-tuning x offload with AdamW."""
    from sim.scenario.load import load_scenario as load

    sc = load("llama3-8b-dgx", LLAMA2_7B)
    return plan(sc, 1, top=20, recipes=recipes(ALL["finetune"], ["adamw"], ALL["offload"]))


def test_full_fine_tuning_does_not_fit_and_says_by_how_much(one_gpu) -> None:  # type: ignore[no-untyped-def]
    full = next(o for o in one_gpu.recipes if o.recipe == Recipe("full", "adamw", "none"))
    assert full.best is None and "out of memory by" in (full.reason or "")


def test_lora_qlora_and_offload_fit_on_one_h100_with_memory_and_time(one_gpu) -> None:  # type: ignore[no-untyped-def]
    """Each fits (memory within the 80 GB), with a step time and a cost; QLoRA's 4-bit base
    needs less memory than LoRA's bf16 one at the same micro-batch; offload moves AdamW's
    12 bytes per parameter off the GPU so full fine-tuning fits too, slower."""
    best = {o.recipe: o.best for o in one_gpu.recipes}
    for rec in (Recipe("lora"), Recipe("qlora"), Recipe("full", "adamw", "cpu")):
        c = best[rec]
        assert c is not None and c.result.fits and c.result.gpus == 1
        assert 0 < c.result.memory_per_gpu_bytes <= 80e9 and c.result.step_time_s > 0
    lora, qlora = best[Recipe("lora")], best[Recipe("qlora")]
    assert lora is not None and qlora is not None
    assert qlora.result.memory_breakdown["weights"] < lora.result.memory_breakdown["weights"] / 3
    offload = best[Recipe("full", "adamw", "cpu")]
    assert offload is not None and offload.result.step_time_s > lora.result.step_time_s
    cheapest = one_gpu.cheapest
    assert cheapest is not None
    assert cheapest.result.cost_per_step_usd == min(
        c.result.cost_per_step_usd for c in one_gpu.ranked
    )


def test_a_ranked_configuration_is_what_the_simulator_says(one_gpu) -> None:  # type: ignore[no-untyped-def]
    """The plan's numbers are a plain simulation of the scenario with that recipe and layout."""
    from sim.scenario.load import load_scenario as load
    from sim.studies.plan.cluster import cluster_for

    c = one_gpu.ranked[0]
    sc = c.recipe.applied(load("llama3-8b-dgx", LLAMA2_7B))
    with cluster_for(sc, 1) as (cluster, _topo, _notes):
        par = dataclasses.replace(sc.parallel, **c.layout.settings())
        r = simulate_step(dataclasses.replace(sc, parallel=par, cluster=cluster), "analytical")
    assert r.step_time_s == c.result.step_time_s
    assert r.memory_per_gpu_bytes == c.result.memory_per_gpu_bytes


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "sim", *args], capture_output=True, text=True,
                          cwd=REPO, env=env, check=False, timeout=600)  # fmt: skip


def test_cli_answers_is_one_gpu_enough() -> None:
    """``--gpus 1`` searches every fine-tuning and offload by itself."""
    sets = [x for s in LLAMA2_7B for x in ("--set", s)]
    out = run_cli("plan", "llama3-8b-dgx", *sets, "--gpus", "1", "--top", "3")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "one GPU is enough: " in text and "cheapest that fits: " in text
    assert "full adamw                   does not fit: " in text
    for rec in ("lora adamw ", "qlora adamw ", "full adamw offload=cpu "):
        line = next(
            x for x in text.splitlines() if x.strip().startswith(rec.strip() + " ") and "fits:" in x
        )
        assert "GiB" in line and "s per step" in line, line
    assert "not modelled yet" not in text


def test_choices_are_checked() -> None:
    with pytest.raises(
        ConfigError, match="--finetune 'lora,dora': dora is not one of full, lora, qlora"
    ):
        parse_choices("finetune", "lora,dora", "full")
    assert parse_choices("optimizer", None, "sgd") == ("sgd",)


def test_explain_puts_each_setting_back_and_times_it() -> None:
    """A small Llama on one DGX: the best's settings against the scenario's, each put back
    alone on the best; the numbers are the simulator's."""
    from sim.scenario.load import load_scenario as load
    from sim.studies.plan.cluster import cluster_for

    sets = ["model.layers=8", "training.global_batch=32", "training.seq_len=2048"]
    sc = load("llama3-8b-dgx", sets)
    result = plan(sc, top=1)
    best = result.ranked[0]
    ex = explain(sc, best)
    own = simulate_step(sc, "analytical")
    assert ex.yours is not None and ex.yours.step_time_s == own.step_time_s
    assert ex.attributions, "the best differs from the scenario's own layout"
    a = next((a for a in ex.attributions if a.name == "recompute"), None)
    if a is not None and a.seconds is not None:
        back = dataclasses.replace(best.layout, recompute=sc.parallel.recompute)
        with cluster_for(sc, best.result.gpus) as (cluster, _t, _n):
            par = dataclasses.replace(sc.parallel, **back.settings())
            t = simulate_step(dataclasses.replace(sc, parallel=par, cluster=cluster), "analytical")
        assert a.seconds == pytest.approx(t.step_time_s - best.result.step_time_s, rel=1e-12)
    text = render_explanation(ex, sc.name)
    assert "step time (s)" in text and "what the best's value buys" in text


def test_overlap_tp_is_named_as_what_buys_the_70b_layout() -> None:
    """The issue's case, cut to one pipeline-sized slice: Llama-2-70B's layout with TP 8 and
    overlap off against the same with overlap on: explain names overlap_tp and its seconds."""
    sc = load_scenario("llama2-70b-256-ib", ["training.framework=null"])  # overlap off
    sc = dataclasses.replace(
        sc, training=dataclasses.replace(sc.training, global_batch=64), network="analytical"
    )
    from sim.studies.plan.search import Candidate
    from sim.studies.plan.space import Layout

    par = sc.parallel
    layout = Layout(tp=par.tp, pp=par.pp, dp=par.dp or 8, zero=par.zero, micro_batch=par.micro_batch,
                    recompute=par.recompute, overlap_tp=True, overlap_dp=par.overlap_dp, sp=par.sp)  # fmt: skip
    best_sc = dataclasses.replace(sc, parallel=dataclasses.replace(par, **layout.settings()))
    best = Candidate(layout, simulate_step(best_sc, "analytical"), Recipe())
    ex = explain(sc, best)
    (a,) = ex.attributions
    assert a.name == "overlap_tp" and a.yours == "False" and a.best == "True"
    assert ex.yours is not None
    assert a.seconds == pytest.approx(ex.yours.step_time_s - best.result.step_time_s, rel=1e-9)
    assert a.seconds > 0
