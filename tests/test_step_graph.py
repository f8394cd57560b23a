"""The training step as one task graph: what the builder makes, what both executors do
with it, and that every entry point resolves a scenario the same way."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest

from sim.network import BACKENDS
from sim.scenario.load import load_scenario
from sim.studies.grid import sweep_spec
from sim.studies.runner import run_sweep
from sim.training.graph.buckets import buckets_of
from sim.training.graph.build import build_step_graph
from sim.training.graph.costs import chunk_costs
from sim.training.graph.execute import ideal_skip, run_graph
from sim.training.graph.listsched import fill_gaps, list_schedule
from sim.training.graph.simulate import simulate_graph
from sim.training.graph.task import COLLECTIVE, COMPUTE, TRANSFER, StepGraph
from sim.training.schedule.pipeline import make_schedule
from sim.training.setup import prepare_step
from sim.training.step import _timer, run_step, simulate_step


def _graph(name: str, *sets: str, network: str = "analytical"):  # type: ignore[no-untyped-def]
    setup = prepare_step(load_scenario(name, list(sets)), network)
    timer = _timer(setup)
    costs = chunk_costs(setup, timer)
    return setup, timer, costs, build_step_graph(setup, timer, costs)


def _order(graph: StepGraph, stage: int) -> list[tuple[str, int, int]]:
    seen: list[tuple[str, int, int]] = []
    for i in graph.stream_order[graph.stream(f"s{stage}.compute")]:
        pid = graph.pass_of[i]
        if pid < 0:
            continue
        p = graph.passes[pid]
        if not seen or seen[-1] != (p.kind, p.mb, p.chunk):
            seen.append((p.kind, p.mb, p.chunk))
    return seen


@pytest.mark.parametrize(
    "sets",
    [
        (),
        ("parallel.schedule=gpipe",),
        ("parallel.schedule=interleaved", "parallel.virtual_stages=2"),
    ],
)
def test_each_stage_runs_its_schedule_once_in_order(sets: tuple[str, ...]) -> None:
    """The compute stream of every stage holds every pass of the pipeline schedule once, in
    the schedule's order, and nothing else before the optimizer."""
    setup, _, _, g = _graph("llama2-70b-256-ib", *sets)
    plan = setup.plan
    schedule = make_schedule(plan.schedule, plan.pp, plan.num_microbatches, plan.virtual_stages)
    for s in range(plan.pp):
        assert _order(g, s) == [(st.kind, st.mb, st.chunk) for st in schedule[s]]
    assert len(g.passes) == sum(len(o) for o in schedule)


def test_every_pass_waits_for_its_input() -> None:
    """A forward's first compute waits for the previous virtual stage's forward (through a
    pipeline send across stages), a backward's for the next one's backward, the last
    backward's for the loss (parameter all-gathers run ahead may start before the input)."""
    _, _, _, g = _graph("llama2-70b-256-ib")
    first_task = {}
    last_task: dict[int, int] = {}
    for i, pid in enumerate(g.pass_of):
        if pid >= 0 and g.kind[i] == COMPUTE:
            first_task.setdefault(pid, i)
            last_task[pid] = i
    by_key = {(p.kind, p.vstage, p.mb): pid for pid, p in enumerate(g.passes)}
    nvs = max(p.vstage for p in g.passes) + 1
    for pid, p in enumerate(g.passes):
        deps = g.deps[first_task[pid]]
        if p.kind == "F" and p.vstage == 0:
            assert not [d for d in deps if g.kind[d] == TRANSFER]
            continue
        if p.kind == "F":
            src = by_key[("F", p.vstage - 1, p.mb)]
        elif p.vstage == nvs - 1:
            src = by_key[("F", p.vstage, p.mb)]
            assert last_task[src] in deps  # the loss: no send
            continue
        else:
            src = by_key[("B", p.vstage + 1, p.mb)]
        sends = [d for d in deps if g.kind[d] == TRANSFER]
        assert len(sends) == 1 and g.deps[sends[0]] == [last_task[src]]


def test_gradient_bytes_are_reduced_once_per_release() -> None:
    """ZeRO-1 reduces every chunk's gradients once (in its last backward), ZeRO-2 in every
    micro-batch: the DP stream's reduce-scatter bytes are the stage's gradient bytes times that."""
    for zero, releases in ((1, lambda m: 1), (2, lambda m: m)):
        setup, _, _, g = _graph("llama2-70b-256-ib", f"parallel.zero={zero}")
        m = setup.plan.num_microbatches
        for s in range(setup.plan.pp):
            dp = g.stream(f"s{s}.dp")
            moved = sum(
                c.nbytes
                for i in g.stream_order[dp]
                if g.label[i].startswith("dp_") and g.kind[i] == COLLECTIVE
                for c in g.comm[i]
            )
            per_release = sum(b.steps[0][2] for b in buckets_of(setup, s))
            assert moved == pytest.approx(per_release * releases(m), rel=1e-12)


def test_zero3_gathers_prefetch_one_unit_ahead() -> None:
    """Unit j's gather waits for unit j - 2 to have run (at most two gathered units) and
    unit j waits for its gather."""
    _, _, _, g = _graph("llama3-8b-dgx", "parallel.zero=3")
    gather = g.stream("s0.gather")
    gathers = g.stream_order[gather]
    assert gathers
    for gt in gathers[:50]:
        unit = next(i for i in range(gt + 1, len(g)) if gt in g.deps[i])
        assert g.kind[unit] == COMPUTE and g.pass_of[unit] == g.pass_of[gt]


def test_the_ideal_pipeline_frees_everything_but_the_passes() -> None:
    """The ideal pipeline (its idle time is the bubble) is the same graph with every task
    outside the passes free: no sends, no data-parallel work, no optimizer; the passes and
    their parameter gathers keep their times."""
    _, _, _, g = _graph("llama2-70b-256-ib", "parallel.zero=3", "cluster.nodes=8",
                        "parallel.dp=2", "training.global_batch=32")  # fmt: skip
    skip = ideal_skip(g)
    kept = {g.label[i] for i in range(len(g)) if not skip[i]}
    freed = {g.label[i] for i in range(len(g)) if skip[i]}
    assert kept == {"pass", "zero_all_gather"}
    assert {"pp_send", "optimizer"} <= freed and any(x.startswith("dp_") for x in freed)


def test_executors_agree_exactly_without_contention() -> None:
    """With nothing contending (one pipeline replica's sends on their own rails, no
    data-parallel work), list scheduling on the closed-form network and SimPy on the flow
    network give the same times (DESIGN: both agree exactly where nothing contends)."""
    _, timer, _, g = _graph(
        "llama2-70b-256-ib", "parallel.dp=1", "cluster.nodes=4", "training.global_batch=32"
    )
    _, end_a = list_schedule(g, timer)
    _, end_f, _ = simulate_graph(g, timer, "flow")
    assert max(end_f) == pytest.approx(max(end_a), rel=1e-12)


def test_both_networks_run_the_same_graph() -> None:
    """The executor follows the backend's registry entry: the closed-form one needs no
    network, the simulated one returns its network with the bytes it carried."""
    for name, spec in BACKENDS.items():
        setup = prepare_step(load_scenario("llama3-8b-dgx"), name)
        run = run_graph(setup, _timer(setup))
        assert (run.network is None) == spec.closed_form
        assert len(run.start) == len(run.graph)


def test_fill_gaps() -> None:
    """Reductions use the gaps the gathers leave on a NIC."""
    assert fill_gaps(0.0, 2.0, [(1.0, 3.0)]) == 4.0
    assert fill_gaps(0.0, 1.0, [(1.0, 3.0)]) == 1.0
    assert fill_gaps(2.0, 1.0, [(0.0, 1.0), (2.5, 3.0), (10.0, 11.0)]) == 3.5


# --- complete counters -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("overlap", "tag"),
    [("false", "shard param all_gather"), ("true", "param shard all_gather")],
)
def test_parameter_gathers_are_on_the_links(overlap: str, tag: str) -> None:
    """ZeRO-1's all-gather of the updated parameters runs on the flow network, after the
    optimizer or ahead of the next forward (Megatron's ``overlap_param_gather``): its bytes
    are in the per-link counters under their tag, as every other collective's."""
    sets = ["cluster.nodes=4", "parallel.dp=1", "parallel.zero=1", "training.global_batch=32",
            "parallel.pp=2", "parallel.dp=2", f"framework.overlap_param_gather={overlap}"]  # fmt: skip
    result, run, _ = run_step(load_scenario("llama2-70b-256-ib", sets))
    tags = run.network.link_bytes_by_tag  # type: ignore[union-attr]
    assert tags[tag].sum() > 0
    assert tags["dp reduce_scatter"].sum() > 0
    assert result.breakdown["param_gather"] > 0


def test_offload_copies_cross_pcie() -> None:
    """CPU offload moves gradients down and parameters up over PCIe every step."""
    base = simulate_step(load_scenario("llama3-8b-dgx"), "analytical")
    off = simulate_step(load_scenario("llama3-8b-dgx", ["training.offload=cpu"]), "analytical")
    tech = off.techniques
    params = tech["pcie_down_s"] * tech["pcie_Bps"] / 2  # bf16 gradients down at pcie_Bps
    extra = off.link_bytes_by_scope["pcie"] - base.link_bytes_by_scope["pcie"]
    # 8 GPUs, 2 bytes down and 2 up per parameter, each over two PCIe links (GPU-switch-host)
    assert extra == pytest.approx(8 * 2 * 2 * 2 * params, rel=1e-9)


def test_local_sgd_bytes_are_averaged_over_the_sync_period() -> None:
    """Local SGD synchronises every H steps: a step moves 1/H of a synchronisation's bytes."""
    sets = ["cluster.topology=h100-tcp-100g", "parallel.zero=0", "parallel.tp=8",
            "parallel.dp=4", "training.global_batch=64"]  # fmt: skip
    one = simulate_step(load_scenario("llama3-8b-dgx", sets), "analytical")
    four = simulate_step(load_scenario("llama3-8b-dgx", [*sets, "parallel.sync_every=4"]),
                         "analytical")  # fmt: skip
    # TP stays in each server's NVLink: every byte on the network is the DP synchronisation
    assert one.link_bytes_by_scope["net"] > 0
    assert four.link_bytes_by_scope["net"] == pytest.approx(one.link_bytes_by_scope["net"] / 4)
    assert four.link_bytes_by_scope["nvlink"] < one.link_bytes_by_scope["nvlink"]


def test_byte_counters_do_not_depend_on_the_network() -> None:
    """Bytes per link scope come from the graph's tasks: the same on both backends."""
    sc = load_scenario("llama2-70b-256-ib", ["cluster.nodes=4", "parallel.pp=2", "parallel.dp=2",
                                             "training.global_batch=32"])  # fmt: skip
    a = simulate_step(sc, "analytical").link_bytes_by_scope
    f = simulate_step(sc, "flow").link_bytes_by_scope
    assert a == pytest.approx(f, rel=1e-12)


def test_every_stage_counts_its_tp_bytes() -> None:
    """Each pipeline stage's passes carry their own TP groups' wire bytes, also when the op
    times came from the memo another stage filled (8 symmetric NVSwitch TP groups: equal)."""
    sc = load_scenario("llama2-70b-256-ib", ["network=analytical"])
    setup = prepare_step(sc)
    costs = chunk_costs(setup, _timer(setup))
    per_stage = {vs: costs[(vs, "F")].wire_bytes["tp"]["nvlink"] for vs in range(setup.plan.pp)}
    assert setup.plan.pp == 4 and min(per_stage.values()) > 0
    body = [per_stage[vs] for vs in range(1, setup.plan.pp - 1)]  # no embedding or head
    assert body == pytest.approx([body[0]] * len(body), rel=1e-12)


def test_a_step_does_not_depend_on_what_ran_before() -> None:
    """A layout costed fresh and after the same stages were costed in another order (what
    another layout on the cluster leaves in the kept unit costs and collective times)
    gives the same result, byte for byte."""
    from dataclasses import replace

    from sim.training.compute import passes
    from sim.training.graph import costs

    sc = load_scenario("llama2-70b-256-ib", ["network=analytical", "parallel.pp=8",
                                             "parallel.dp=4"])  # fmt: skip
    out = []
    for warm in (False, True):
        costs._UNITS.clear()
        passes._TIMERS.clear()
        if warm:
            setup = prepare_step(sc)
            chunk_costs(replace(setup, stages=setup.stages[::-1]), _timer(setup))
        out.append(json.dumps(run_step(sc)[0].to_dict(), sort_keys=True))
    assert out[0] == out[1]


# --- one resolution path ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["llama2-70b-256-ib", "gpt3-175b-1024", "llama3-8b-dgx"])
@pytest.mark.parametrize("zero3", [False, True])
@pytest.mark.parametrize("profile", [None, "none"])
def test_entry_points_give_byte_identical_steps(
    name: str, zero3: bool, profile: str | None
) -> None:
    """``simulate_step``, the same point in a sweep and ``clustersim run --json`` give the
    same step time to the last bit, with and without an explicit profile."""
    sets = ["parallel.zero=3"] if zero3 else []
    if profile is not None:
        sets.append(f"profile={profile}")
    api = simulate_step(load_scenario(name, sets), "analytical")
    rows = run_sweep(sweep_spec(name, ["seed=0"], sets), network="analytical", progress=False)
    assert rows[0]["step_time_s"] == api.step_time_s
    assert rows[0]["profile"] == api.profile["name"]
    cmd = [sys.executable, "-m", "sim", "run", name, "--network", "analytical", "--json"]
    cmd += [a for s in sets for a in ("--set", s)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert json.loads(out)["step_time_s"] == api.step_time_s


def test_profile_option_is_the_scenario_key() -> None:
    """``--profile X`` means ``profile: X``: the step says which it used and how."""
    chosen = simulate_step(load_scenario("llama2-70b-256-ib"), "analytical")
    assert chosen.profile["how"] == "selected"
    none = simulate_step(load_scenario("llama2-70b-256-ib", ["profile=none"]), "analytical")
    assert none.profile["how"] == "defaults" and none.step_time_s != chosen.step_time_s


def test_layer_list_scenarios_honour_the_profile() -> None:
    """A CNN scenario's step resolves its profile as a transformer's does."""
    from sim.scenario.layer_list import any_scenario_from_dict
    from sim.training.layers import simulate_any

    raw = {"model": {"preset": "resnet50"}, "cluster": {"topology": "h100-ib-ndr", "nodes": 2},
           "training": {"global_batch": 512}}  # fmt: skip
    auto = simulate_any(any_scenario_from_dict(raw), "analytical")
    none = simulate_any(any_scenario_from_dict({**raw, "profile": "none"}), "analytical")
    assert auto.profile["name"] == "h100-ib-2node" and none.profile["how"] == "defaults"
    assert auto.step_time_s != none.step_time_s


def test_no_backend_name_branches_outside_the_network_package() -> None:
    """Nothing outside sim/network compares a backend's name: the registry says what a
    backend is (``closed_form``), and everyone asks it."""
    from pathlib import Path

    import sim

    root = Path(sim.__file__).parent
    hits = Counter()
    for path in root.rglob("*.py"):
        if path.parts[-2] == "network":
            continue
        text = path.read_text()
        for needle in ('== "flow"', '== "analytical"', '!= "flow"', '!= "analytical"',
                       '("flow", "analytical")', "FlowNetwork(", "AnalyticalNetwork("):  # fmt: skip
            if needle in text:
                hits[f"{path.relative_to(root)}: {needle}"] += 1
    assert not hits, sorted(hits)
