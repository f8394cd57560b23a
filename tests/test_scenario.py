"""Scenarios (load, --set, validation) and parallel plans (errors, rank placement)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sim.workload.plan as plan_module
from sim.errors import ConfigError
from sim.scenario.load import (
    apply_overrides,
    load_scenario,
    resolve_plan,
    scenario_from_dict,
    scenario_names,
)
from sim.workload.models import model_preset
from sim.workload.plan import (
    ParallelPlan,
    groups,
    placement_notes,
    rank_coords,
    rank_of,
)
from sim.workload.plan_checks import validate_plan

# GPUs each shipped scenario's topology gives (topology presets are loaded elsewhere).
SHIPPED = {
    "gpt2-1gpu": (1, 1),
    "llama3-8b-dgx": (8, 8),
    "llama2-70b-256-roce": (256, 8),
    "llama2-70b-256-ib": (256, 8),
    "gpt3-175b-1024": (1024, 8),
    "llama3-405b-16k": (16384, 8),
}


def _raw(**sections: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "model": {"preset": "llama2-7b"},
        "cluster": {"topology": "dgx-h100"},
        "parallel": {"tp": 8},
        "training": {"global_batch": 16, "seq_len": 4096},
    }
    raw.update(sections)
    return raw


def test_shipped_scenarios_are_the_expected_ones() -> None:
    """The scenarios package ships the issue's five studies and the Llama 3 405B run, by name."""
    assert set(scenario_names()) == set(SHIPPED)


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_every_shipped_scenario_validates(name: str) -> None:
    """Each shipped YAML loads, and its plan is valid on its cluster's GPU count."""
    s = load_scenario(name)
    gpus, per_node = SHIPPED[name]
    plan = resolve_plan(s, gpus, per_node)
    assert plan.num_gpus == gpus
    assert placement_notes(plan) == []  # TP stays inside a node in every shipped study


def test_gpt3_scenario_has_at_least_64_micro_batches() -> None:
    """The speed benchmark's GPT-3 case: TP 8, PP 8, DP 16, 1F1B, >= 64 micro-batches."""
    plan = resolve_plan(load_scenario("gpt3-175b-1024"), 1024, 8)
    assert (plan.tp, plan.pp, plan.dp, plan.schedule) == (8, 8, 16, "1f1b")
    assert plan.num_microbatches >= 64


def test_load_by_path(tmp_path: Path) -> None:
    """A path loads like a preset; the file stem is the scenario name."""
    path = tmp_path / "mine.yaml"
    path.write_text("model: {preset: gpt2-124m}\ncluster: {topology: single-h100}\n"
                    "training: {global_batch: 8, seq_len: 1024}\n")  # fmt: skip
    s = load_scenario(path)
    assert s.name == "mine" and s.model.name == "gpt2-124m" and s.parallel.dp is None


def test_malformed_yaml_names_the_file_and_line(tmp_path: Path) -> None:
    """Broken YAML is one ConfigError line with the file and line number."""
    path = tmp_path / "bad.yaml"
    path.write_text("model:\n  preset: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: line \d+"):
        load_scenario(path)


def test_unknown_scenario_lists_presets() -> None:
    """An unknown name lists the presets."""
    with pytest.raises(ConfigError, match="gpt2-1gpu"):
        load_scenario("no-such-study")


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        (_raw(parallel={"tp": 8, "pipeline": 2}), "parallel.pipeline"),
        (_raw(model={"preset": "llama2-7b", "hiden": 1}), "model.hiden"),
        (_raw(extra=1), "extra"),
        (_raw(training={"global_batch": 16}), "training.seq_len"),
        (_raw(parallel={"tp": "8"}), "parallel.tp"),
        (_raw(parallel={"schedule": "zigzag"}), "parallel.schedule"),
        (_raw(parallel={"zero": 4}), "parallel.zero"),
        (_raw(parallel={"placement": "tp,dp"}), "parallel.placement"),
        (_raw(network="packet"), "network"),
        (_raw(cluster={}), "cluster.topology"),
    ],
)
def test_bad_scenario_keys_and_values_are_named(raw: dict[str, Any], where: str) -> None:
    """Unknown keys and bad values are rejected naming the key with its place."""
    with pytest.raises(ConfigError, match=rf"^{where}"):
        scenario_from_dict(raw)


def test_set_parses_values_as_yaml() -> None:
    """--set parallel.tp=4 sets the integer 4; strings and booleans parse too."""
    raw = apply_overrides(_raw(), ["parallel.tp=4", "parallel.sp=true", "network=analytical"])
    s = scenario_from_dict(raw)
    assert s.parallel.tp == 4 and s.parallel.sp is True and s.network == "analytical"
    assert _raw()["parallel"]["tp"] == 8  # the input is not modified


def test_set_overrides_a_preset_field() -> None:
    """--set model.layers=16 changes one field of the preset."""
    s = load_scenario("llama3-8b-dgx", ["model.layers=16", "parallel.bucket_bytes=50MiB"])
    assert s.model.layers == 16 and s.model.hidden == 4096
    assert s.parallel.bucket_bytes == 50 * 2**20


@pytest.mark.parametrize(
    ("item", "where"),
    [
        ("parallel.tpp=4", "parallel.tpp"),
        ("paralel.tp=4", "paralel.tp"),
        ("model=llama", "model"),
        ("parallel.tp", "parallel.tp"),
        ("parallel.tp.x=1", "parallel.tp.x"),
    ],
)
def test_bad_set_is_a_config_error_naming_it(item: str, where: str) -> None:
    """An unknown or malformed --set key is rejected naming it."""
    with pytest.raises(ConfigError, match=rf"--set '?{where}"):
        apply_overrides(_raw(), [item])


def test_resolve_plan_derives_dp() -> None:
    """Omitted dp = GPUs / (tp * pp)."""
    s = scenario_from_dict(_raw(parallel={"tp": 8, "pp": 2}))
    assert resolve_plan(s, 64, 8).dp == 4
    with pytest.raises(ConfigError, match=r"parallel\.tp x parallel\.pp"):
        resolve_plan(s, 12, 4)


# --- parallel plans --------------------------------------------------------------------

LLAMA70 = model_preset("llama2-70b")
MIXTRAL = model_preset("mixtral-8x7b")


@pytest.mark.parametrize(
    ("kwargs", "model", "gpus", "keys"),
    [
        ({"tp": 8, "pp": 4, "dp": 4, "global_batch": 64}, LLAMA70, 256, ["parallel.tp", "256"]),
        ({"tp": 3, "dp": 1, "global_batch": 1}, LLAMA70, 3, ["parallel.tp", "model.heads"]),
        ({"tp": 16, "dp": 1, "global_batch": 1}, model_preset("llama2-13b"), 16,
         ["parallel.tp", "model.heads=40"]),
        ({"pp": 3, "global_batch": 3}, LLAMA70, 3, ["parallel.pp", "model.layers=80"]),
        ({"pp": 4, "virtual_stages": 3, "schedule": "interleaved", "global_batch": 4},
         LLAMA70, 4, ["parallel.virtual_stages", "model.layers"]),
        ({"dp": 8, "micro_batch": 3, "global_batch": 64}, LLAMA70, 8,
         ["training.global_batch", "parallel.micro_batch"]),
        ({"dp": 8, "ep": 3, "global_batch": 8}, MIXTRAL, 8, ["parallel.ep"]),
        ({"dp": 6, "ep": 3, "global_batch": 6}, MIXTRAL, 6, ["parallel.ep", "model.experts"]),
        ({"dp": 2, "ep": 2, "global_batch": 2}, LLAMA70, 2, ["parallel.ep", "model.experts"]),
        ({"sp": True, "global_batch": 1}, LLAMA70, 1, ["parallel.sp", "parallel.tp"]),
        ({"zero": 4, "global_batch": 1}, LLAMA70, 1, ["parallel.zero"]),
        ({"pp": 4, "virtual_stages": 2, "global_batch": 8}, LLAMA70, 4,
         ["parallel.virtual_stages", "interleaved"]),
        ({"pp": 4, "schedule": "interleaved", "virtual_stages": 2, "global_batch": 6},
         LLAMA70, 4, ["parallel.schedule", "parallel.pp=4"]),
        ({"recompute": "some", "global_batch": 1}, LLAMA70, 1, ["parallel.recompute"]),
    ],
)  # fmt: skip
def test_impossible_plans_name_the_keys(
    kwargs: dict[str, Any], model: Any, gpus: int, keys: list[str]
) -> None:
    """Each impossible plan is one ConfigError line naming the keys and values involved."""
    with pytest.raises(ConfigError) as err:
        validate_plan(ParallelPlan(**kwargs), model, gpus)
    message = str(err.value)
    assert "\n" not in message
    for key in keys:
        assert key in message


def test_kv_heads_may_be_replicated() -> None:
    """tp = 16 > kv_heads = 8 replicates KV heads: allowed."""
    plan = ParallelPlan(tp=16, global_batch=1, gpus_per_node=8)
    assert validate_plan(plan, LLAMA70, 16) is plan
    assert placement_notes(plan) and "span 2 nodes" in placement_notes(plan)[0]


def test_default_placement_puts_tp_inside_a_node() -> None:
    """tp, then pp, then dp: TP groups are consecutive ranks."""
    plan = ParallelPlan(tp=8, pp=4, dp=8, global_batch=8)
    assert groups(plan, "tp")[0] == list(range(8))
    assert groups(plan, "pp")[0] == [0, 8, 16, 24]
    assert groups(plan, "dp")[0] == [32 * i for i in range(8)]


def test_placement_order_is_overridable() -> None:
    """order tp,dp,pp makes DP replicas neighbours and stages far apart."""
    plan = ParallelPlan(tp=2, pp=2, dp=2, order=("tp", "dp", "pp"), global_batch=2)
    assert groups(plan, "dp")[0] == [0, 2] and groups(plan, "pp")[0] == [0, 4]


sizes = st.sampled_from([1, 2, 4])


@settings(max_examples=50, deadline=None)
@given(tp=sizes, pp=sizes, dp=sizes, ep=sizes,
       order=st.permutations(["tp", "pp", "dp"]))  # fmt: skip
def test_groups_partition_ranks_and_coords_round_trip(
    tp: int, pp: int, dp: int, ep: int, order: list[str]
) -> None:
    """Every kind of group partitions the ranks; coordinates invert."""
    ep = min(ep, dp)
    plan = ParallelPlan(tp=tp, pp=pp, dp=dp, ep=ep, order=tuple(order), global_batch=dp)
    n = plan.num_gpus
    for kind, size in (("tp", tp), ("pp", pp), ("dp", dp), ("ep", ep), ("edp", dp // ep)):
        gs = groups(plan, kind)
        assert sorted(r for g in gs for r in g) == list(range(n))
        assert all(len(g) == size for g in gs)
    for r in range(n):
        c = rank_coords(plan, r)
        assert rank_of(plan, c) == r
        tp_group = next(g for g in groups(plan, "tp") if r in g)
        assert all(rank_coords(plan, q)[1:] == c[1:] for q in tp_group)


def test_public_api_is_pinned() -> None:
    """The plan module's public names (the engine imports these)."""
    assert set(plan_module.__all__) == {
        "AXES", "DEFAULT_BUCKET_BYTES", "GROUP_KINDS", "PLACEMENT_AXES", "RECOMPUTE", "SCHEDULE_NAMES", "Coord",
        "ParallelPlan", "full_order", "group_of", "group_rows", "groups", "parse_order", "placement_notes",
        "rank_coords", "rank_of", "stage_group_ranks",
    }  # fmt: skip
