"""Calibration end to end: fit refuses contradicting hardware and poor fits (exit 2,
nothing written) unless ``--force``; fitted profiles record their hardware, hold-out and
error bars; ``calibrate step`` records go through ``fit`` and ``validate``."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from calibrate.hardware import catalog_gpu, contradictions, measured_device
from calibrate.measurements import (
    CollectiveRecord,
    ComputeRecord,
    Measurements,
    Meta,
    StepRecord,
    load_measurements,
    save_measurements,
)
from calibrate.profile_io import fit_profile
from calibrate.step_model import one_device_topology, step_scenario
from sim.cli import main
from sim.profile import load_profile
from sim.topology.presets import load_topology
from sim.training.step import simulate_step

CREATED = "2025-01-01T00:00:00Z"
ROOT = Path(__file__).resolve().parents[1]
MIB = 2**20


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("clustersim: error: "), err
    return err


def gloo_run(times: list[float] | None = None, scale: float = 1.0) -> Measurements:
    """A gloo-like 2-rank sweep of all_reduce and all_gather, as a CPU live run records it:
    a call overhead, 25 us per message of gloo's rings, 2 GB/s, and all_gather's copies."""
    recs = []
    sizes = [2**k for k in range(10, 24)]
    for op in ("all_reduce", "all_gather"):
        for i, s in enumerate(sizes):
            if op == "all_reduce":
                steps = max(math.ceil(s / MIB), 4)
                t = 60e-6 + 25e-6 * steps + s / 2e9
            else:
                t = 60e-6 + 2 * 25e-6 + s / 2 / 2e9 + 1.5 * s / 3e9
            t = times[i] if times else t * scale
            recs.append(CollectiveRecord(op, s, s // 4, "float32", t, None, 0.0, 0.0, False, 2, 10))
    meta = Meta("live run", CREATED, hosts=("box",), world_size=2, nodes=1, backend="gloo",
                details={"device": "cpu", "cpu_model": "Test CPU"})  # fmt: skip
    return Measurements("collectives", meta, tuple(recs))


def save(m: Measurements, path: Path) -> str:
    save_measurements(m, path)
    return str(path)


# --- hardware ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("device", "name"),
    [("NVIDIA H100 80GB HBM3", "H100-SXM"), ("NVIDIA H100 PCIe", "H100-PCIe"),
     ("NVIDIA A100-SXM4-80GB", "A100-SXM-80GB"), ("NVIDIA L40S", "L40S"),
     ("NVIDIA GeForce RTX 4090", "RTX-4090"), ("NVIDIA H200", "H200"), ("Tesla T4", None)],
)  # fmt: skip
def test_device_names_map_to_catalog_gpus(device: str, name: str | None) -> None:
    assert catalog_gpu(device) == name


def test_cpu_runs_contradict_gpu_topologies_and_gpu_logs_other_gpus() -> None:
    cpu = gloo_run()
    assert measured_device(cpu) == "cpu" and not contradictions([cpu], load_topology("cpu-host"))
    (why,) = contradictions([cpu], load_topology("dgx-h100"))
    assert "ran on a CPU" in why and "H100-SXM" in why
    rtx = Measurements("collectives", Meta("rtx.txt", CREATED, gpu_model="NVIDIA GeForce RTX 4090",
                                           backend="nccl"))  # fmt: skip
    assert "ran on RTX-4090" in contradictions([rtx], load_topology("dgx-h100"))[0]
    assert "has CPU-HOST" in contradictions([rtx], load_topology("cpu-host"))[0]
    unknown = Measurements("collectives", Meta("x.txt", CREATED, backend="nccl"))
    assert contradictions([unknown], load_topology("dgx-h100")) == []


# --- fit refusals ----------------------------------------------------------------------------


def test_cpu_measurements_fitted_to_dgx_h100_are_refused(tmp_path: Path, capsys) -> None:
    """The issue's case: gloo CPU measurements fitted to dgx-h100 used to exit 0."""
    meas, out = save(gloo_run(), tmp_path / "g.json"), tmp_path / "p.yaml"
    argv = ["calibrate", "fit", meas, "--topology", "dgx-h100", "--out", str(out)]
    err = one_line_error(capsys, argv)
    assert "contradict the topology" in err and "ran on a CPU" in err and "--force" in err
    assert not out.exists()
    assert main([*argv, "--force", "--created", CREATED]) == 0
    notes = yaml.safe_load(out.read_text())["provenance"]["notes"]
    assert any(
        n.startswith("written with --force although the measurements contradict") for n in notes
    )
    assert "warning: written with --force" in capsys.readouterr().out


def test_a_poor_fit_is_refused_naming_r2(tmp_path: Path, capsys) -> None:
    """Times that do not depend on size at all (noise): R2 of log time far below 0.5."""
    noise = list(np.random.default_rng(0).uniform(1e-4, 1e-2, 14))
    meas, out = save(gloo_run(times=noise), tmp_path / "n.json"), tmp_path / "p.yaml"
    err = one_line_error(
        capsys, ["calibrate", "fit", meas, "--topology", "cpu-host", "--out", str(out)]
    )
    assert "the fit is poor: collectives R2(log time)" in err and "< 0.5 and median APE" in err
    assert not out.exists()


def test_parameters_at_a_bound_are_named(tmp_path: Path, capsys) -> None:
    """Data 50x faster than the loopback line rate allows: link efficiency stuck at 1."""
    meas, out = save(gloo_run(scale=0.02), tmp_path / "f.json"), tmp_path / "p.yaml"
    err = one_line_error(
        capsys, ["calibrate", "fit", meas, "--topology", "cpu-host", "--out", str(out)]
    )
    assert "stuck at a bound of their range" in err and "link_efficiency.pcie = 1.0" in err
    assert not out.exists()


def test_a_good_gloo_fit_records_hardware_holdout_and_error_bars(tmp_path: Path, capsys) -> None:
    meas, out = save(gloo_run(), tmp_path / "g.json"), tmp_path / "g.yaml"
    assert main(["calibrate", "fit", meas, "--topology", "cpu-host", "--out", str(out),
                 "--created", CREATED]) == 0  # fmt: skip
    assert "error bar: collectives ±" in capsys.readouterr().out
    tree = yaml.safe_load(out.read_text())
    assert tree["collectives"]["backend"] == "gloo"
    assert tree["hardware"] == {"gpu": "CPU-HOST", "links": {"pcie": "loopback"}, "gpus": 2,
                                "nodes": 1, "backend": "gloo", "device": "Test CPU"}  # fmt: skip
    hold = tree["provenance"]["fit"]["collectives"]["holdout"]
    assert hold["cases"] == 14 and hold["median_ape_pct"] < 5
    bars = {(b["what"], b["metric"]): b for b in tree["error_bars"]}
    assert bars[("collectives", "median_ape_pct")]["value"] == hold["median_ape_pct"]
    assert "hold-out of live run on box" in bars[("collectives", "max_ape_pct")]["source"]
    assert load_profile(str(out)).hardware.links == {"pcie": "loopback"}


# --- step records through fit and validate --------------------------------------------------


STEP_MODEL = {"layers": 2, "hidden": 128, "heads": 4, "ffn_hidden": 512, "vocab": 1024,
              "seq": 128, "batch": 4, "dtype": "bfloat16", "lr": 1e-4, "norm": "layernorm",
              "bias": True, "tied_embeddings": False, "activation": "gelu"}  # fmt: skip


def step_file(time_s: float) -> Measurements:
    r = StepRecord(STEP_MODEL, "cpu", "AdamW", 675328, 512, 1.8e9, 1, time_s, None, (time_s,),
                   512 / time_s, 1.8e9 / time_s)  # fmt: skip
    meta = Meta("live run", CREATED, hosts=("box",), details={"device": "cpu"})
    return Measurements("step", meta, (r,))


def compute_file() -> Measurements:
    """bf16 GEMMs on the curve eff_max 0.5, F_half 1e8 of a 2 TFLOP/s CPU-HOST (square
    shapes, 2e7 to 1.7e10 FLOP), and a copy."""
    recs = [ComputeRecord("gemm", (n, n, n), "bfloat16", 2.0 * n**3, 0.0,
                          (2.0 * n**3 + 1e8) / (2e12 * 0.5), None, 0.0, 0.0, 10, "cpu")
            for n in (216, 464, 1000, 2048)]  # fmt: skip
    recs.append(
        ComputeRecord("copy", (1,), "float32", 0.0, 1e8, 1e8 / 3e10, None, 0.0, 3e10, 10, "cpu")
    )
    meta = Meta("live run", CREATED, hosts=("box",), details={"device": "cpu"})
    return Measurements("compute", meta, tuple(recs))


def test_step_jobs_are_simulated_on_the_one_device_topology() -> None:
    assert one_device_topology(load_topology("cpu-host")) == "cpu-single"
    assert one_device_topology(load_topology("h100-ib-ndr", nodes=2)) == "single-h100"
    scenario, note = step_scenario(step_file(0.02).steps[0], "cpu-single")
    m = scenario.model
    assert (m.layers, m.hidden, m.heads, m.ffn_hidden, m.vocab, m.max_seq) == (
        2,
        128,
        4,
        512,
        1024,
        128,
    )
    assert (scenario.training.global_batch, scenario.training.precision, note) == (4, "bf16", "")


def test_fit_predicts_step_records_with_the_fitted_compute(tmp_path: Path) -> None:
    """compute + step files: the step job's error under the fitted compute section is in
    the provenance and is the profile's step error bar."""
    comp, out = save(compute_file(), tmp_path / "c.json"), tmp_path / "cpu.yaml"
    step = save(step_file(0.02), tmp_path / "s.json")
    assert main(["calibrate", "fit", comp, step, "--topology", "cpu-single", "--out", str(out),
                 "--created", CREATED]) == 0  # fmt: skip
    tree = yaml.safe_load(out.read_text())
    (row,) = tree["provenance"]["fit"]["step"]["rows"]
    scenario, _ = step_scenario(step_file(0.02).steps[0], "cpu-single")
    predicted = simulate_step(scenario, network="analytical", compute=tree["compute"]).step_time_s
    assert row["predicted_us"] == pytest.approx(predicted * 1e6, rel=1e-3)
    assert row["ape_pct"] == pytest.approx(abs(predicted / 0.02 - 1) * 100, rel=1e-3)
    assert {(b["what"], b["metric"]) for b in tree["error_bars"]} >= {("step", "median_ape_pct"),
                                                                      ("compute", "mean_ape_pct")}  # fmt: skip
    assert tree["hardware"]["gpu"] == "CPU-HOST" and tree["hardware"]["links"] == {}


def test_validate_json_rows_carry_ape_for_step_records(tmp_path: Path, capsys) -> None:
    comp, prof = save(compute_file(), tmp_path / "c.json"), tmp_path / "cpu.yaml"
    assert main(["calibrate", "fit", comp, "--topology", "cpu-single", "--out", str(prof)]) == 0
    steps = [save(step_file(t), tmp_path / f"s{i}.json") for i, t in enumerate((0.01, 0.02))]
    capsys.readouterr()
    assert (
        main(["calibrate", "validate", str(prof), *steps, "--topology", "cpu-host", "--json"]) == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert [r["kind"] for r in out["rows"]] == ["step", "step"]
    a, b = out["rows"]
    assert a["predicted_us"] == b["predicted_us"] and a["topology"] == "cpu-single"
    for r, t in zip(out["rows"], (0.01, 0.02), strict=True):
        # predicted_us has 4 significant digits: 0.05 points of APE at a 10 ms step
        assert r["ape_pct"] == pytest.approx(abs(r["predicted_us"] / (t * 1e6) - 1) * 100,
                                             rel=1e-3, abs=0.05)  # fmt: skip
    assert out["summary"]["cases"] == 2
    assert main(["calibrate", "validate", str(prof), steps[0], "--topology", "cpu-single"]) == 0
    assert "step job" in capsys.readouterr().out


def test_step_files_alone_have_nothing_to_fit(tmp_path: Path, capsys) -> None:
    step, out = save(step_file(0.02), tmp_path / "s.json"), tmp_path / "p.yaml"
    err = one_line_error(
        capsys, ["calibrate", "fit", step, "--topology", "cpu-single", "--out", str(out)]
    )
    assert "nothing to fit" in err and "compute" in err and not out.exists()


# --- real CPU runs ---------------------------------------------------------------------------


def test_threads_are_set_and_recorded() -> None:
    """--threads N: torch uses N threads, the file says so; 0 is refused."""
    torch = pytest.importorskip("torch", reason="real runs need torch (clustersim[calibrate])")
    from calibrate.stepjob import StepJobConfig, run_step_job
    from sim.errors import CalibrationError

    before = torch.get_num_threads()
    try:
        tiny = StepJobConfig(layers=1, hidden=16, heads=2, ffn_hidden=32, vocab=32, seq=8, batch=2)
        m = run_step_job("cpu", config=tiny, steps=1, warmup=0, threads=1)
        assert m.meta.details["cpu_threads"] == 1
        with pytest.raises(CalibrationError, match="--threads 0: must be >= 1"):
            run_step_job("cpu", config=tiny, steps=1, warmup=0, threads=0)
    finally:
        torch.set_num_threads(before)


@pytest.mark.slow
def test_a_profile_fitted_from_compute_alone_predicts_the_step_job(tmp_path: Path) -> None:
    """The README's shared-host recipe, as the commands run it (each in its own process,
    so that no earlier test's command settings are in force): calibrate compute, then
    calibrate step, one thread timed by the thread's CPU clock, each record the fastest of
    its iterations; the profile fitted from the compute file alone predicts the step job
    within 25% (issue 8 part 5, issue 20 part 5). The step job is held out: nothing in the
    profile comes from it."""
    pytest.importorskip("torch", reason="real runs need torch (clustersim[calibrate])")
    shared = ["--device", "cpu", "--quick", "--threads", "1", "--clock", "thread",
              "--statistic", "min"]  # fmt: skip
    comp, step = tmp_path / "c.json", tmp_path / "s.json"
    # 11 steps: more chances than the quick default's 5 of a step no neighbour slowed
    for argv in (["compute", *shared, "--out", str(comp)],
                 ["step", *shared, "--steps", "11", "--out", str(step)]):  # fmt: skip
        subprocess.run([sys.executable, "-m", "sim", "calibrate", *argv], check=True,
                       capture_output=True, cwd=ROOT)  # fmt: skip
    files = [load_measurements(comp), load_measurements(step)]
    assert {m.meta.time_statistic for m in files} == {"min"}
    tree = fit_profile(files, load_topology("cpu-single"), name="cpu", force=True)
    (row,) = tree["provenance"]["fit"]["step"]["rows"]
    assert row["ape_pct"] <= 25.0, row
    # every term of the CPU step fitted from the compute file (issue 20 part 5: attention
    # and the compute-bound elementwise kernels were catalog guesses before)
    assert {"sm_count", "fp32_matmul_eff_max", "optimizer_tensor_overhead_s", "attn_eff_max",
            "attn_bwd_ratio", "mem_eff", "vector_eff", "launch_overhead_s"} <= set(tree["compute"])  # fmt: skip


def test_more_local_gloo_ranks_than_cores_is_noted(monkeypatch: pytest.MonkeyPatch) -> None:
    """--local N above the host's cores: the file says its times include scheduler stalls."""
    pytest.importorskip("torch", reason="real runs need torch (clustersim[calibrate])")
    import calibrate.collectives

    monkeypatch.setattr(calibrate.collectives.os, "cpu_count", lambda: 1)
    m = calibrate.collectives.run_collectives("gloo", ["all_reduce"], 1024, 1024, iters=2,
                                              warmup=0, local=2)  # fmt: skip
    assert any(n.startswith("oversubscribed: 2 ranks on 1 CPU cores") for n in m.meta.notes)
