"""The trace-driven calibration on a real GPU trace: one H200 step job profiled with
PyTorch's Kineto (calibrate/measurements/h200-2026-11-26), read and compared."""

from __future__ import annotations

from pathlib import Path

import pytest

from calibrate.trace_reader import kernel_table, read_trace, trace_measurements

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "calibrate" / "measurements" / "h200-2026-11-26"
TRACE = DATA / "step_trace.json.gz"


def test_gemm_kernels_launched_through_the_driver_belong_to_their_op() -> None:
    """cuBLAS's Hopper GEMMs (nvjet) are launched by cuLaunchKernelEx (a ``cuda_driver``
    event): they are read as their aten op's kernels, with its shapes."""
    rows, step_s, _ = kernel_table(read_trace(TRACE))
    nvjet = [r for r in rows if r.name.startswith("nvjet")]
    assert nvjet and all(r.op.startswith("aten::") and r.dims for r in nvjet)
    assert 0.1 < step_s < 0.3


def test_gemm_records_are_the_gemm_kernels_not_their_memsets() -> None:
    """Each GEMM record is timed by its kernel (hundreds of microseconds for these shapes at
    ~750 TFLOP/s), not by the workspace memset cuBLAS launches beside it (~1 us)."""
    recs = [r for r in trace_measurements(TRACE).records if r.op == "gemm"]
    assert recs
    for r in recs:
        assert 300e12 < r.achieved_flops_per_s < 989.5e12, r


@pytest.mark.parametrize("shipped", ["h200-ops"])
def test_the_shipped_h200_profile_names_its_hardware_and_error(shipped: str) -> None:
    from sim.profile import load_profile

    p = load_profile(shipped)
    assert p.hardware is not None and p.hardware.gpu == "H200"
    assert any(b.what == "step" for b in p.error_bars)


def test_compare_takes_a_profile_by_shipped_name_file_or_none(capsys) -> None:
    """``calibrate compare --profile`` reads profiles as every simulating command does: the
    shipped name gives what the file gives, ``none`` the catalog's values (the H200 step job:
    +5.1% with h200-ops, +13.3% with the catalog, docs/compute.md)."""
    import json

    from sim.cli import main

    base = ["calibrate", "compare", str(DATA / "step.json"), "--trace",
            str(DATA / "step_trace.json.gz"), "--topology", "single-h200", "--json"]  # fmt: skip
    steps = {}
    for profile in ("h200-ops", "calibrate/profiles/h200-ops.yaml", "none"):
        assert main([*base, "--profile", str(REPO / profile) if "/" in profile else profile]) == 0
        steps[profile] = json.loads(capsys.readouterr().out)
    assert steps["h200-ops"] == steps["calibrate/profiles/h200-ops.yaml"]
    assert steps["none"] != steps["h200-ops"]
    assert main([*base, "--profile", "no-such-profile"]) == 2
    assert "unknown profile 'no-such-profile'" in capsys.readouterr().err


def test_the_h200_profile_carries_its_out_of_sample_error_and_it_is_current() -> None:
    """h200-ops's ``training`` error bars are torchtitan's two H200 runs predicted through
    it (calibrate/published_throughput.yaml): what `run` prints on H200 is what those runs
    give today (within 0.5 points), so the bar cannot go stale when the model moves."""
    from calibrate.published_throughput import predicted_tokens_per_gpu, throughput_rows
    from sim.profile import load_profile

    bars = {b.metric: b for b in load_profile("h200-ops").error_bars if b.what == "training"}
    runs = [r for r in throughput_rows() if r.source == "titan-h200-2025"]
    errors = [100 * abs(predicted_tokens_per_gpu(r) / r.measured - 1) for r in runs]
    assert bars["mean_ape_pct"].cases == len(runs) == 2
    assert abs(bars["mean_ape_pct"].value - sum(errors) / len(errors)) <= 0.5
    assert abs(bars["max_ape_pct"].value - max(errors)) <= 0.5
