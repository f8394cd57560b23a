"""The training-step engine: published numbers, exactness, invariants, errors, traces."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cli import main
from sim.scenario.load import load_scenario, scenario_from_dict, scenario_names
from sim.training.step import simulate_step

TWO_GPU_NODE = {
    "name": "two-gpu",
    "gpu": "H100-SXM",
    "nodes": 1,
    "node": {"gpus": 2, "fabric": "nvswitch", "nvlink": "nvlink4", "pcie": "pcie-gen5", "nics": 0},
}


def small(tmp_path: Path, topo: dict | None = None, **parallel: object) -> dict:  # type: ignore[type-arg]
    """A GPT-2 scenario on a hand-written 2-GPU NVSwitch server (or ``topo``)."""
    f = tmp_path / "topo.yaml"
    f.write_text(yaml.safe_dump(topo or TWO_GPU_NODE))
    par = {"tp": 1, "pp": 2, "micro_batch": 1, "schedule": "1f1b"}
    par.update(parallel)
    return {
        "model": {"preset": "gpt2-124m"},
        "cluster": {"topology": str(f)},
        "parallel": par,
        "training": {"global_batch": 8, "seq_len": 1024},
    }


def test_flow_equals_analytical_when_nothing_contends(tmp_path: Path) -> None:
    """Two pipeline stages on two GPUs: sends go opposite ways, no DP: the backends agree."""
    sc = scenario_from_dict(small(tmp_path), "two")
    flow = simulate_step(sc, network="flow")
    ana = simulate_step(sc, network="analytical")
    assert flow.step_time_s == pytest.approx(ana.step_time_s, rel=1e-9)
    assert flow.breakdown == pytest.approx(ana.breakdown, rel=1e-9, abs=1e-12)


@settings(max_examples=12, deadline=None)
@given(
    pp=st.sampled_from([1, 2, 4]),
    batch=st.sampled_from([8, 16, 32]),
    schedule=st.sampled_from(["gpipe", "1f1b"]),
    recompute=st.sampled_from(["none", "selective", "full"]),
    zero=st.integers(0, 3),
)
def test_breakdown_sums_to_step_time(
    pp: int, batch: int, schedule: str, recompute: str, zero: int
) -> None:
    """On an 8-GPU DGX: the parts of the breakdown add up to the step time, all >= 0."""
    raw = {
        "model": {"preset": "gpt2-124m"},
        "cluster": {"topology": "dgx-h100"},
        "parallel": {
            "tp": 2,
            "pp": pp,
            "micro_batch": 1,
            "schedule": schedule,
            "recompute": recompute,
            "zero": zero,
        },
        "training": {"global_batch": batch, "seq_len": 1024},
    }
    r = simulate_step(scenario_from_dict(raw, "grid"), network="analytical")
    assert sum(r.breakdown.values()) == pytest.approx(r.step_time_s, rel=1e-9)
    assert min(r.breakdown.values()) >= 0
    assert 0 < r.mfu <= r.hfu < 1


def test_1f1b_holds_fewer_microbatches_than_gpipe_same_bubble(tmp_path: Path) -> None:
    """1F1B: less activation memory than GPipe, the same bubble (free-communication bubble)."""
    raw = small(tmp_path, pp=2, schedule="gpipe")
    raw["training"]["global_batch"] = 16
    gpipe = simulate_step(scenario_from_dict(raw, "gpipe"), network="analytical")
    raw["parallel"]["schedule"] = "1f1b"
    ofob = simulate_step(scenario_from_dict(raw, "1f1b"), network="analytical")
    assert ofob.memory_breakdown["activations"] < gpipe.memory_breakdown["activations"]
    assert ofob.breakdown["pipeline_bubble"] == pytest.approx(
        gpipe.breakdown["pipeline_bubble"], rel=0.02
    )
    assert ofob.step_time_s == pytest.approx(gpipe.step_time_s, rel=0.02)


def test_more_microbatches_shrink_the_bubble_share(tmp_path: Path) -> None:
    shares = []
    for batch in (4, 8, 32):
        raw = small(tmp_path)
        raw["training"]["global_batch"] = batch
        r = simulate_step(scenario_from_dict(raw, "b"), network="analytical")
        shares.append(r.breakdown["pipeline_bubble"] / r.step_time_s)
    assert shares[0] > shares[1] > shares[2] > 0


def test_not_fitting_is_an_answer(capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-2-70B on one H100: fits is false, with the breakdown, exit status 0."""
    code = main(
        [
            "run",
            "gpt2-1gpu",
            "--set",
            "model.preset=llama2-70b",
            "--set",
            "training.global_batch=8",
            "--set",
            "parallel.micro_batch=1",
            "--json",
            "--network",
            "analytical",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["fits"] is False
    assert out["memory_per_gpu_bytes"] > 80e9 and out["memory_breakdown"]["weights"] > 100e9


# Shipped as published although the memory model finds it does not fit (see the file).
NOT_FITTING = {"llama3-405b-16k"}


@pytest.mark.parametrize("name", scenario_names())
def test_every_shipped_scenario_runs(name: str) -> None:
    r = simulate_step(load_scenario(name), network="analytical")
    assert r.fits == (name not in NOT_FITTING) and r.step_time_s > 0 and 0 < r.mfu < 1


def test_json_is_byte_identical(capsys: pytest.CaptureFixture[str]) -> None:
    """Same scenario, flow network -> byte-identical JSON."""
    outs = []
    for _ in range(2):
        assert main(["run", "llama3-8b-dgx", "--json"]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1]
    rec = json.loads(outs[0])
    for key in (
        "step_time_s",
        "tokens_per_s",
        "tflops_per_gpu",
        "mfu",
        "fits",
        "memory_per_gpu_bytes",
        "breakdown",
    ):
        assert key in rec


def test_trace_has_a_process_per_gpu_and_counters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "step.json"
    raw = small(
        tmp_path, topo={**TWO_GPU_NODE, "node": {**TWO_GPU_NODE["node"], "gpus": 4}}, pp=2, tp=1
    )
    raw["parallel"]["dp"] = 2
    sc = tmp_path / "sc.yaml"
    sc.write_text(yaml.safe_dump(raw))
    assert main(["run", str(sc), "--trace", str(trace)]) == 0
    doc = json.loads(trace.read_text())
    names = [
        e["args"]["name"]
        for e in doc["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name"
    ]
    assert sum("stage" in n for n in names) == 4 and any("network" in n for n in names)
    spans = [
        e
        for e in doc["traceEvents"]
        if e["ph"] == "X" and e["tid"] == 1 and e["name"] != "optimizer"
    ]
    # GPUs x (F, B) x micro-batches (8 sequences / dp 2): a process per GPU (sim/training/trace.py)
    assert len(spans) == 4 * 2 * 4
    assert any(e["ph"] == "C" for e in doc["traceEvents"])


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["no-such-scenario"], "no-such-scenario"),
        (["llama3-8b-dgx", "--set", "parallel.tp=3"], "tp"),
        (["llama3-8b-dgx", "--set", "parallel.colour=red"], "colour"),
        (["llama3-8b-dgx", "--set", "parallel.tp"], "parallel.tp"),
        (["llama3-8b-dgx", "--set", "model.preset=llama9"], "llama9"),
        (["llama3-8b-dgx", "--network", "packet"], "packet"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    code = main(["run", *args])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_malformed_yaml_and_unknown_top_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: {preset: gpt2-124m\ncluster: [")
    assert main(["run", str(bad)]) == 2
    assert "bad.yaml" in capsys.readouterr().err
    extra = tmp_path / "extra.yaml"
    extra.write_text(yaml.safe_dump({**small(tmp_path), "optimiser": "adam"}))
    assert main(["run", str(extra)]) == 2
    assert "optimiser" in capsys.readouterr().err


def test_trace_not_written_on_error_and_old_file_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.json"
    trace.write_text("previous")
    assert main(["run", "llama3-8b-dgx", "--set", "parallel.tp=3", "--trace", str(trace)]) == 2
    assert trace.read_text() == "previous"


def test_run_subprocess_exit_status() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "sim.cli", "run", "llama3-8b-dgx", "--set", "parallel.pp=0"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (
        p.returncode == 2
        and "Traceback" not in p.stderr
        and len(p.stderr.strip().splitlines()) == 1
    )
