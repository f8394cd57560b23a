"""Heterogeneous clusters: servers of different GPU models and NIC speeds.

Shows: a homogeneous cluster written as ``servers`` groups gives byte-identical results;
with equal batches the step's compute is the slow GPUs' (data parallelism waits for the
slowest replica); a proportional batch split lands within one micro-batch of the closed
form ``global_batch / sum(throughput)``; a speed-based layer split shortens a pipeline
that spans both GPU models; a ring across 400G and 200G NICs runs at the 200G ring's
bandwidth; bad input exits 2 with one line.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cli import main
from sim.collectives.simulate import CollectiveSetup, simulate_collective
from sim.result import StepResult
from sim.scenario.load import scenario_from_dict
from sim.topology.build import build_topology
from sim.topology.spec import parse_spec
from sim.training.hetero.split import split_layers, split_microbatches
from sim.training.step import simulate_step
from tests.helpers import REPO

MIXED = REPO / "topologies" / "mixed-h100-a100.yaml"
# llama3-8b-dgx moved to the mixed cluster: TP 8 in each server, DP over the 8 servers
MIXED_SETS = ["--set", "cluster.topology=mixed-h100-a100", "--set", "parallel.tp=8",
              "--set", "parallel.dp=null", "--set", "parallel.zero=1"]  # fmt: skip


def _spec(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def _write(tmp_path: Path, name: str, doc: dict[str, Any]) -> str:
    f = tmp_path / f"{name}.yaml"
    f.write_text(yaml.safe_dump(doc))
    return str(f)


def _step(topology: str, **parallel: Any) -> StepResult:
    """One analytical step of a small Llama on ``topology`` (TP 8 by default)."""
    model = parallel.pop("model", "llama3-8b")
    batch = parallel.pop("global_batch", 64)
    raw = {
        "model": {"preset": model},
        "cluster": {"topology": topology},
        "parallel": {"tp": 8, "micro_batch": 1, **parallel},
        "training": {"global_batch": batch, "seq_len": 1024},
        "network": "analytical",
        "profile": "none",
    }
    return simulate_step(scenario_from_dict(raw, "het"))


def _mixed_as(tmp_path: Path, gpu: str, nic: str) -> str:
    """The mixed preset with every server of one GPU model and NIC (same fabric)."""
    doc = _spec(MIXED)
    doc["name"] = f"all-{gpu}"
    doc["gpu"] = gpu
    for group in doc["servers"]:
        group.pop("gpu", None)
        group["node"].update(nic=nic, nvlink=None, pcie=None)
    return _write(tmp_path, doc["name"], doc)


def test_homogeneous_servers_form_is_byte_identical(tmp_path: Path) -> None:
    """h100-roce-400g as two ``servers`` groups naming the same gpu: the same JSON."""
    doc = _spec(REPO / "topologies" / "h100-roce-400g.yaml")
    doc["nodes"] = 8
    old = _write(tmp_path, "old", doc)
    new = copy.deepcopy(doc)
    node = new.pop("node")
    del new["nodes"]
    new["servers"] = [{"count": 4, "gpu": "H100-SXM", "node": node}, {"count": 4, "node": node}]
    groups = _write(tmp_path, "new", new)
    assert build_topology(parse_spec(new)).gpu_models == ()
    a, b = _step(old).to_dict(), _step(groups).to_dict()
    a.pop("topology"), b.pop("topology")
    assert "gpu_types" not in a
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_equal_split_waits_for_the_slowest_gpus(tmp_path: Path) -> None:
    """H100 + A100 with equal batches: the step's compute is the A100-only step's."""
    mixed = _step(str(MIXED))
    a100 = _step(_mixed_as(tmp_path, "A100-SXM-80GB", "roce-200g"))
    h100 = _step(_mixed_as(tmp_path, "H100-SXM", "roce-400g"))
    assert mixed.breakdown["compute"] == pytest.approx(a100.breakdown["compute"], rel=1e-12)
    assert mixed.step_time_s > h100.step_time_s
    types = mixed.gpu_types
    assert types is not None and set(types) == {"A100-SXM-80GB", "H100-SXM"}
    slow, fast = types["A100-SXM-80GB"], types["H100-SXM"]
    assert slow["bottleneck"] and not fast["bottleneck"]
    assert slow["count"] == fast["count"] == 32
    assert fast["compute_per_step_s"] == pytest.approx(h100.breakdown["compute"], rel=1e-12)
    assert fast["idle_s"] == pytest.approx(
        a100.breakdown["compute"] - h100.breakdown["compute"], rel=1e-12
    )
    assert slow["idle_s"] == 0.0


def test_proportional_split_is_within_one_microbatch_of_the_harmonic_form() -> None:
    """compute = max_r m_r t_r and global_batch / sum_r (micro_batch / t_r) differ by less
    than one micro-batch of the slowest replica (the rounding), and beat equal batches."""
    kw: dict[str, Any] = {"tp": 1, "model": "gpt2-124m", "global_batch": 256}
    prop = _step(str(MIXED), batch_split="proportional", **kw)
    equal = _step(str(MIXED), **kw)
    types = prop.gpu_types
    assert types is not None
    t = {n: v["compute_per_microbatch_s"] for n, v in types.items()}
    throughput = sum(types[n]["count"] / t[n] for n in t)  # micro-batches/s, 1 replica/GPU
    closed = 256 / throughput
    assert closed <= prop.breakdown["compute"] + 1e-12
    assert prop.breakdown["compute"] - closed < max(t.values())
    assert prop.breakdown["compute"] < equal.breakdown["compute"]
    counts = {n: v["microbatches"] for n, v in types.items()}
    assert sum(types[n]["count"] * counts[n][0] for n in t) == 256  # one count per type
    assert counts["H100-SXM"][0] > counts["A100-SXM-80GB"][0]


def test_speed_stage_split_shortens_a_pipeline_across_both_models() -> None:
    """Stage 0 on the H100 servers, stage 1 on the A100s: layers by speed cut the step."""
    kw: dict[str, Any] = {"pp": 2, "placement": "tp,dp,pp"}
    equal = _step(str(MIXED), **kw)
    speed = _step(str(MIXED), stage_split="speed", **kw)
    assert speed.step_time_s < equal.step_time_s
    note = next(n for n in speed.notes if n.startswith("parallel.stage_split speed"))
    layers = [int(x) for x in note.split("layers per stage ")[1].split(" (")[0].split(", ")]
    assert sum(layers) == 32 and layers[0] > layers[1]


def _two_speed_cluster(nic_a: str, nic_b: str) -> CollectiveSetup:
    node = {"gpus": 8, "fabric": "nvswitch", "pcie_switches": 4, "nics": 8}
    doc = {
        "name": "nics",
        "gpu": "H100-SXM",
        "servers": [
            {"count": 2, "node": {**node, "nic": nic_a}},
            {"count": 2, "node": {**node, "nic": nic_b}},
        ],
        "network": {"kind": "rail-optimized", "link": "roce-400g", "nodes_per_leaf": 4},
    }
    return CollectiveSetup(build_topology(parse_spec(doc)))


@pytest.mark.parametrize("network", ["flow", "analytical"])
def test_mixed_nic_ring_runs_at_the_slow_ring(network: str) -> None:
    """32 GPUs, 1 GiB ring all-reduce: 400G + 200G servers = the all-200G ring's busbw;
    that is NIC-bound: at most 8 x 25 GB/s per server over 8 GPUs (25 GB/s per GPU's rail),
    times link efficiency (> 0.8), while all-400G reaches about twice it."""

    def busbw(a: str, b: str) -> float:
        r = simulate_collective(_two_speed_cluster(a, b), "all_reduce", 2**30,
                                algorithm="ring", protocol="simple", network=network)  # fmt: skip
        return r.busbw_Bps

    mixed, slow, fast = (busbw("roce-400g", "roce-200g"), busbw("roce-200g", "roce-200g"),
                         busbw("roce-400g", "roce-400g"))  # fmt: skip
    assert mixed == pytest.approx(slow, rel=1e-3)
    per_rail = 200e9 / 8  # bytes/s of one 200 Gb/s NIC
    ring_bound = per_rail * 8  # 8 rails (one channel each) per server, busbw per GPU
    assert 0.8 * ring_bound < mixed <= ring_bound
    assert fast > 1.8 * mixed


def test_run_json_and_text_report_gpu_types(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["run", "llama3-8b-dgx", *MIXED_SETS, "--network", "analytical"]
    assert main([*args, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    types = record["gpu_types"]
    assert set(types["H100-SXM"]) == {"count", "microbatches", "compute_per_microbatch_s",
                                      "compute_per_step_s", "idle_s", "bottleneck"}  # fmt: skip
    assert types["H100-SXM"]["idle_s"] > 0
    assert main(args) == 0
    assert "bottleneck GPU type: A100-SXM-80GB" in capsys.readouterr().out


def _run_err(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


def test_unknown_gpu_in_a_server_group_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _spec(MIXED)
    doc["servers"][1]["gpu"] = "X100"
    topo = _write(tmp_path, "bad", doc)
    code, err = _run_err(capsys, ["run", "llama3-8b-dgx", "--set", f"cluster.topology={topo}"])
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "servers[1].gpu" in err and "X100" in err and "A100-SXM-80GB" in err


def test_proportional_split_with_fewer_microbatches_than_replicas_exits_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["run", "llama3-8b-dgx", *MIXED_SETS, "--set", "parallel.batch_split=proportional",
            "--set", "training.global_batch=4"]  # fmt: skip
    code, err = _run_err(capsys, argv)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "batch_split" in err and "dp=8" in err


def test_context_parallel_on_a_mixed_cluster_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "llama3-8b-dgx", *MIXED_SETS, "--set", "parallel.cp=2"]
    code, err = _run_err(capsys, argv)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "parallel.cp" in err and "heterogeneous" in err


def test_bad_split_name_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run_err(capsys, ["run", "llama3-8b-dgx", "--set", "parallel.stage_split=fast"])
    assert code == 2 and "parallel.stage_split" in err and "speed" in err


@settings(max_examples=200, deadline=None)
@given(
    weights=st.lists(st.floats(0.05, 20.0), min_size=1, max_size=16),
    extra=st.integers(0, 500),
)
def test_microbatch_split_sums_and_rounds_each_share(weights: list[float], extra: int) -> None:
    total = len(weights) + extra
    out = split_microbatches(total, weights)
    assert sum(out) == total and min(out) >= 1
    exact = [total * w / sum(weights) for w in weights]
    if min(exact) >= 1:  # no replica needed topping up: each within one of its share
        assert all(abs(m - x) < 1 for m, x in zip(out, exact, strict=True))


@settings(max_examples=200, deadline=None)
@given(speed=st.lists(st.floats(0.05, 20.0), min_size=1, max_size=16), extra=st.integers(0, 200))
def test_layer_split_sums_and_rounds_each_share(speed: list[float], extra: int) -> None:
    layers = len(speed) + extra
    out = split_layers(layers, speed)
    assert sum(out) == layers and min(out) >= 1
    exact = [layers * v / sum(speed) for v in speed]
    if min(exact) >= 1:
        assert all(abs(n - x) < 1 for n, x in zip(out, exact, strict=True))
