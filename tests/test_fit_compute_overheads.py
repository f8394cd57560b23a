"""What eager CPU training adds, measured by `calibrate compute` and fitted into a profile:
per-kernel dispatch, AdamW per tensor and per parameter, the fp32 GEMM ceiling, one SM per
thread; and how the simulator and the step model use them (issue 8 part 5)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calibrate.compute import check_clock
from calibrate.fit_compute import fit_compute
from calibrate.measurements import ComputeRecord, Measurements, Meta, StepRecord
from calibrate.step_model import fp32_as_bf16, step_rows, step_scenario
from calibrate.stepjob import StepJobConfig
from sim.catalog import gpu_spec
from sim.errors import CalibrationError, ConfigError
from sim.topology.presets import load_topology
from sim.training.compute.kernels import gemm_time_s
from sim.training.compute.params import compute_params
from sim.training.graph.optimizer import optimizer_bytes_per_param, param_tensors
from sim.training.step import simulate_step
from sim.workload.models import ModelSpec

CREATED = "2025-01-01T00:00:00Z"
CPU = gpu_spec("CPU-HOST")
#: Transformer GEMMs of hidden 128 and 256 at 512 tokens, and their weight gradients.
SHAPES = [(512, n, k) for h in (128, 256) for n, k in ((3 * h, h), (h, h), (4 * h, h), (h, 4 * h))]
SHAPES += [(k, n, m) for m, n, k in SHAPES]


def rec(op: str, shape: tuple[int, ...], t: float, dtype: str = "float32", flops: float = 0.0,
        nbytes: float = 0.0, device: str = "cpu") -> ComputeRecord:  # fmt: skip
    return ComputeRecord(op, shape, dtype, flops, nbytes, t, None, flops / t, nbytes / t, 9, device)


def cpu_gemms(dtype: str, key: str, **values: Any) -> list[ComputeRecord]:
    """GEMMs timed by the simulator's model on a one-thread CPU-HOST with ``values``."""
    p = replace(compute_params("CPU-HOST"), sm_count=1, matmul_training_factor=1.0, **values)
    return [rec("gemm", s, gemm_time_s(*s, 1, key, CPU, p), dtype, 2.0 * s[0] * s[1] * s[2])
            for s in SHAPES]  # fmt: skip


def cpu_file(overhead_s: float = 2e-5, per_param_s: float = 2e-9, device: str = "cpu",
             threads: int = 1) -> Measurements:  # fmt: skip
    """bf16 GEMMs (eff 0.8, F_half 2e7), fp32 GEMMs (eff 0.15), launch 2 us, dispatch
    12 us per kernel, AdamW with ``overhead_s`` per tensor and ``per_param_s``."""
    recs = cpu_gemms("bfloat16", "bf16", matmul_eff_max=0.8, matmul_half_flops=2e7,
                     launch_overhead_s=2e-6)  # fmt: skip
    recs += cpu_gemms("float32", "fp32", matmul_half_flops=2e7, fp32_matmul_eff_max=0.15,
                      launch_overhead_s=2e-6)  # fmt: skip
    recs += [rec("launch", (1,), 2e-6), rec("dispatch", (3,), 36e-6), rec("dispatch", (4,), 48e-6)]
    for n, e in ((64, 16), (16, 65536)):
        recs.append(
            rec("optimizer", (n, e), n * overhead_s + n * e * per_param_s, nbytes=28.0 * n * e)
        )
    recs = [dataclasses.replace(r, device=device) for r in recs]
    meta = Meta("live run", CREATED, details={"device": device, "cpu_threads": threads})
    return Measurements("compute", meta, tuple(recs))


def test_cpu_fit_recovers_what_the_records_were_made_with() -> None:
    """GEMMs through the simulator's own model, dispatch per kernel, AdamW's two terms."""
    tree, info = fit_compute([cpu_file()], CPU)
    assert tree["sm_count"] == 1
    assert math.isclose(tree["matmul_eff_max"], 0.8, rel_tol=1e-3)
    assert math.isclose(tree["matmul_half_flops"], 2e7, rel_tol=1e-2)
    assert math.isclose(tree["fp32_matmul_eff_max"], 0.15, rel_tol=1e-3)
    assert info["gemm_mape_pct"] < 0.1 and info["fp32_gemm_mape_pct"] < 0.1
    assert tree["launch_overhead_s"] == 12e-6  # 36/3 and 48/4 us per simulated kernel
    assert math.isclose(tree["optimizer_tensor_overhead_s"], 2e-5, rel_tol=1e-3)
    assert math.isclose(tree["stream_eff"], 38 / 2e-9 / CPU.hbm_Bps, rel_tol=1e-3)


def test_gpu_files_keep_launch_and_stream_eff_from_their_own_records() -> None:
    """On a GPU the host dispatches ahead of the kernels: dispatch records become the
    host's bound (host_dispatch_s), not the per-kernel gap; AdamW records are reported,
    not applied; no sm_count from a GPU run."""
    tree, info = fit_compute([cpu_file(device="cuda")], CPU)
    assert tree["launch_overhead_s"] == 2e-6
    assert tree["host_dispatch_s"] == info["dispatch_per_kernel_s"] == 12e-6
    assert not {"sm_count", "stream_eff", "optimizer_tensor_overhead_s"} & set(tree)
    assert "stream_eff" in info["optimizer_not_applied"]


def test_cpu_threads_become_the_sm_count() -> None:
    assert fit_compute([cpu_file(threads=4)], CPU)[0]["sm_count"] == 4


@settings(max_examples=25, deadline=None)
@given(st.floats(1e-6, 1e-4), st.floats(1e-10, 1e-8))
def test_optimizer_terms_come_back_for_any_overhead_and_rate(overhead: float, per: float) -> None:
    tree, _ = fit_compute([cpu_file(overhead, per)], CPU)
    assert math.isclose(tree["optimizer_tensor_overhead_s"], overhead, rel_tol=2e-3)
    stream = min(1.0, optimizer_bytes_per_param(4) / per / CPU.hbm_Bps)
    assert math.isclose(tree["stream_eff"], stream, rel_tol=2e-3)


def test_param_tensors_of_the_step_job_match_torch() -> None:
    """The simulator's count of the quick CPU step job's tensors is torch's."""
    pytest.importorskip("torch", reason="needs torch (clustersim[calibrate])")
    from calibrate.stepjob import _build_model

    c = StepJobConfig()
    spec = ModelSpec("gpt", c.layers, c.hidden, c.ffn_hidden, c.heads, c.heads, c.vocab,
                     max_seq=c.seq)  # fmt: skip
    assert param_tensors(spec, c.layers, True, True) == len(list(_build_model(c).parameters()))


def step_record(dtype: str = "float32") -> StepRecord:
    model = {**dataclasses.asdict(StepJobConfig()), "dtype": dtype}
    return StepRecord(model, "cpu", "AdamW", 1, 512, 1.8e9, 1, 0.02, None, (0.02,), 1.0, 1.0)


def test_per_tensor_optimizer_overhead_adds_tensors_times_overhead() -> None:
    """Closed form: the step grows by exactly 29 tensors x the overhead; 0 changes nothing."""
    scenario, _ = step_scenario(step_record(), "cpu-single")
    base = simulate_step(scenario, network="analytical").step_time_s
    zero = simulate_step(scenario, network="analytical",
                         compute={"optimizer_tensor_overhead_s": 0.0}).step_time_s  # fmt: skip
    more = simulate_step(scenario, network="analytical",
                         compute={"optimizer_tensor_overhead_s": "100us"}).step_time_s  # fmt: skip
    assert zero == base
    assert more - base == pytest.approx(29 * 1e-4, rel=1e-9)


def test_fp32_gemms_use_their_own_ceiling_only_where_measured() -> None:
    p = replace(compute_params("CPU-HOST"), sm_count=1)
    args = (512, 512, 128, 1)
    assert gemm_time_s(*args, "fp32", CPU, p) == gemm_time_s(*args, "bf16", CPU, p)
    p32 = replace(p, fp32_matmul_eff_max=p.matmul_eff_max / 4)
    work = gemm_time_s(*args, "fp32", CPU, p32) - p.launch_overhead_s
    assert work == pytest.approx(4 * (gemm_time_s(*args, "bf16", CPU, p) - p.launch_overhead_s))


def test_an_fp32_step_job_runs_at_fp32_rates_and_says_so() -> None:
    """fp32 GEMM ceiling and half mem_eff for the fp32 job; a bf16 job keeps the profile."""
    compute = {"fp32_matmul_eff_max": 0.15, "matmul_eff_max": 0.8, "mem_eff": 0.3}
    rates, note = fp32_as_bf16(compute, CPU)
    assert rates["matmul_eff_max"] == 0.15 and rates["mem_eff"] == 0.15 and "fp32 rates" in note
    _, note = fp32_as_bf16({"mem_eff": 0.3}, CPU)
    assert "no fp32 GEMM ceiling" in note
    topo = load_topology("cpu-single")
    meta = Meta("live run", CREATED, details={"device": "cpu"})
    rows = {d: step_rows([Measurements("step", meta, (step_record(d),))], topo, compute)[0]
            for d in ("float32", "bfloat16")}  # fmt: skip
    assert rows["float32"]["predicted_us"] > rows["bfloat16"]["predicted_us"]
    assert "fp32 rates" in rows["float32"]["note"] and rows["bfloat16"]["note"] == ""


@pytest.mark.parametrize(
    ("clock", "device", "threads", "needle"),
    [("cpu", "cpu", 1, "--clock 'cpu' is unknown; allowed: wall, thread"),
     ("thread", "cuda", 1, "--clock thread needs --device cpu and --threads 1"),
     ("thread", "cpu", 2, "--clock thread needs --device cpu and --threads 1"),
     ("thread", "cpu", None, "--clock thread needs")],
)  # fmt: skip
def test_the_thread_clock_needs_one_cpu_thread(clock: str, device: str, threads: int | None,
                                               needle: str) -> None:  # fmt: skip
    with pytest.raises(CalibrationError, match=needle.replace("(", r"\(")):
        check_clock(clock, device, threads)


@pytest.mark.parametrize("bad", [0, True, 1.5])
def test_a_profile_sm_count_must_be_a_positive_integer(bad: object) -> None:
    with pytest.raises(ConfigError, match="sm_count"):
        compute_params("CPU-HOST", {"sm_count": bad})


@pytest.mark.parametrize(("compute", "step", "noted"),
                         [("min", "median", True), ("min", "min", False), ("median", "median", False)])  # fmt: skip
def test_a_fit_notes_compute_and_step_files_of_different_statistics(
    compute: str, step: str, noted: bool
) -> None:
    """``calibrate fit`` of a compute file timed with one ``--statistic`` and a step file
    with another: the step error mixes two estimators, and the profile's notes say so."""
    from calibrate.profile_io import fit_profile

    comp = cpu_file()
    comp = replace(comp, meta=replace(comp.meta, time_statistic=compute))
    job = Measurements("step", Meta("live run", CREATED, time_statistic=step), (step_record(),))
    tree = fit_profile([comp, job], load_topology("cpu-single"), name="cpu", force=True)
    notes = [n for n in tree["provenance"]["notes"] if "mixes two estimators" in n]
    assert notes == ([f"step files give the {step} of their iterations, compute files the "
                      f"{compute}: the step error mixes two estimators (give calibrate compute "
                      "and step the same --statistic)"] if noted else [])  # fmt: skip
