"""Uneven pipeline stages, placed as Megatron-Core places them; Llama 3 405B on 16 stages."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.errors import ConfigError
from sim.scenario.load import scenario_from_dict
from sim.training.memory.report import memory_per_stage
from sim.training.step import simulate_step
from sim.workload.comms import RankParams, end_params, layer_rank_params, rank_params
from sim.workload.models import megatron_gpt, model_preset, param_count
from sim.workload.plan import ParallelPlan
from sim.workload.stages import chunk_layers, stage_layers

L405 = model_preset("llama3-405b")


def test_llama3_405b_on_16_stages_takes_one_layer_off_each_end() -> None:
    """126 layers + embedding + loss = 128 slots: 8 per stage, 7 layers on the first and
    last stage (Dubey et al. 2024, 3.3.2; Megatron's account_for_embedding/loss)."""
    per = stage_layers(ParallelPlan(pp=16, global_batch=16), L405)
    assert per == (7,) + (8,) * 14 + (7,)
    inter = ParallelPlan(pp=16, virtual_stages=2, schedule="interleaved", global_batch=16)
    chunks = chunk_layers(inter, L405)
    assert chunks[0] == 3 and chunks[16] == 4 and chunks[-1] == 3 and chunks[15] == 4
    assert stage_layers(inter, L405) == per


def test_given_first_and_last_stage_sizes() -> None:
    """Megatron's --decoder-first/last-pipeline-num-layers: the rest is shared evenly."""
    m = megatron_gpt(1024, 30)
    plan = ParallelPlan(pp=4, first_stage_layers=6, last_stage_layers=8, global_batch=4)
    assert stage_layers(plan, m) == (6, 8, 8, 8)
    first_only = ParallelPlan(pp=4, first_stage_layers=3, global_batch=4)
    assert stage_layers(first_only, m) == (3, 9, 9, 9)


@settings(max_examples=60, deadline=None)
@given(layers=st.integers(1, 200), pp=st.integers(1, 16), v=st.integers(1, 4))
def test_placement_covers_every_layer_once_or_refuses(layers: int, pp: int, v: int) -> None:
    """Every layer is placed exactly once, stages differ by at most the embedding and loss
    slots; or the plan is refused with the keys that would fix it."""
    m = megatron_gpt(256, layers, heads=2)
    plan = ParallelPlan(pp=pp, virtual_stages=v, schedule="interleaved" if v > 1 else "1f1b",
                        global_batch=pp)  # fmt: skip
    try:
        per = chunk_layers(plan, m)
    except ConfigError as e:
        assert "first_stage_layers" in str(e)
        assert layers % (pp * v) != 0
        return
    assert sum(per) == layers and min(per) >= 0 and len(per) == pp * v
    assert max(per) - min(per) <= 1


def test_uneven_stages_hold_their_own_parameters() -> None:
    """Parameters summed over stages are the model's (first and last stage differ)."""
    plan = ParallelPlan(pp=16, global_batch=16)
    total = sum(rank_params(L405, plan, s).total for s in range(16))
    assert total == pytest.approx(param_count(L405))
    assert rank_params(L405, plan, 1).total > rank_params(L405, plan, 2).total * 0.99


@pytest.mark.parametrize(
    ("keys", "needle"),
    [
        ({"first_stage_layers": 5}, "cannot share"),
        ({"first_stage_layers": 4, "embedding_as_layer": True}, "cannot be combined"),
        ({"embedding_as_layer": True}, "cannot be placed"),
    ],
)
def test_impossible_placements_name_the_keys(keys: dict[str, object], needle: str) -> None:
    plan = ParallelPlan(pp=4, global_batch=4, **keys)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=needle):
        chunk_layers(plan, megatron_gpt(1024, 16))


def test_uneven_layers_without_a_rule_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"first_stage_layers.*last_stage_layers"):
        chunk_layers(ParallelPlan(pp=4, global_batch=4), megatron_gpt(1024, 13))


def _llama405(**parallel: object) -> dict[str, object]:
    par = {"tp": 8, "pp": 16, "micro_batch": 1, "schedule": "interleaved",
           "virtual_stages": 2, "sp": True, "zero": 1, **parallel}  # fmt: skip
    return {
        "model": {"preset": "llama3-405b"},
        "cluster": {"topology": "h100-roce-400g", "nodes": 16},
        "parallel": par,
        "training": {"global_batch": 16, "seq_len": 8192},
        "network": "analytical",
    }


def test_llama3_405b_with_126_layers_runs_on_16_stages() -> None:
    """TP 8 x PP 16 (one replica of Meta's plan): the step runs, stage 0 computes less
    than stage 1 (7 layers and the embedding against 8 layers)."""
    r = simulate_step(scenario_from_dict(_llama405(), "llama3-405b"))
    assert r.step_time_s > 0 and r.plan["pp"] == 16 and r.gpus == 128


def test_meta_plan_memory_and_what_would_fit() -> None:
    """Meta's Llama-3-405B plan (TP8, PP16 interleaved, SP, 8k sequences, m = pp = 16
    micro-batches) under Megatron's schedule holds all 16 micro-batches' activations on
    the first stages (m == pp runs every forward in warm-up): it does not fit an 80 GB
    H100 without recomputation, and the result says which change fits."""
    r = simulate_step(scenario_from_dict(_llama405(), "llama3-405b"))
    assert not r.fits
    # 8 layers x 16 micro-batches x s b h/t x (8 + 4/t(h, kv) + 6 f/t) bytes, no dropout
    per_layer_gib = 8192 * (8 * 16384 / 8 + 4 * 16384 / 8 + 4 * 128 + 6 * 53248 / 8) / 2**30
    assert r.memory_breakdown["activations"] / 2**30 == pytest.approx(
        16 * 8 * per_layer_gib, rel=0.02
    )
    advice = " ".join(r.notes)
    assert "DOES NOT FIT" in advice and "parallel.recompute=full" in advice
    fits = simulate_step(scenario_from_dict(_llama405(recompute="full"), "l"))
    assert fits.fits


def test_first_stage_memory_counts_the_embedding() -> None:
    plan = ParallelPlan(tp=8, pp=16, global_batch=16, sp=True)
    stages = memory_per_stage(L405, plan, 8192, 80e9)
    assert stages[0].weights_bytes > stages[15].weights_bytes * 0.9
    assert stages[0].activations_bytes < stages[1].activations_bytes


def test_rank_params_kept_per_plan_answer_each_plan() -> None:
    """rank_params keeps its answers per plan fields it reads (TP, EP, PP and the layer
    placement): plans that differ in one of them, asked one after another, each get the
    stage parameters computed afresh (a layer's times the stage's layers, plus the
    embedding and head), never another plan's."""
    m = megatron_gpt(1024, 30)
    plans = [
        ParallelPlan(global_batch=8),
        ParallelPlan(pp=2, global_batch=8),
        ParallelPlan(pp=2, tp=4, global_batch=8),
        ParallelPlan(pp=2, virtual_stages=3, schedule="interleaved", global_batch=8),
        ParallelPlan(pp=2, layer_split=(10, 20), global_batch=8),
        ParallelPlan(pp=4, embedding_as_layer=True, loss_as_layer=True, global_batch=8),
        ParallelPlan(pp=4, first_stage_layers=6, global_batch=8),
        ParallelPlan(pp=4, first_stage_layers=3, global_batch=8),
        ParallelPlan(pp=4, last_stage_layers=6, global_batch=8),
    ]
    for _ in range(2):
        for plan in plans:
            layer = layer_rank_params(m, plan)
            for stage, n in enumerate(stage_layers(plan, m)):
                fresh = n * layer.dense + end_params(m, plan, stage)
                assert rank_params(m, plan, stage) == RankParams(fresh, 0.0)
