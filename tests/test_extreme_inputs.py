"""Inputs at the edge of the float range and files that are not what they claim: each is
one clear error (exit status 2), never a traceback, and no output file is touched."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from calibrate import stepjob
from sim.cli import main
from sim.errors import CalibrationError, ConfigError
from sim.reliability.interruptions import Cause, Interruptions
from sim.reliability.plan import job_plan
from sim.reliability.renewal import expected_interruptions, expected_wall_s, segment_breakdown
from sim.studies.grid import sweep_spec
from sim.studies.runner import run_sweep


def test_a_restart_that_never_survives_gives_an_infinite_wall_time() -> None:
    """q = exp(-lambda R) underflows to 0 (R = 1e308 s at an MTBI of an hour): every
    restart is itself interrupted, so a segment never completes: inf, not a division by
    zero."""
    job = Interruptions((Cause("any", 1 / 3600.0, 1e308),))
    assert job.restart_survival() == 0.0
    assert expected_wall_s(100.0, job) == math.inf
    assert expected_interruptions(100.0, job) == math.inf
    assert segment_breakdown(100.0, 5.0, job)["restart"] == math.inf


def test_a_job_that_never_completes_is_refused_with_its_numbers() -> None:
    job = Interruptions((Cause("any", 1 / 3600.0, 1e308),))
    with pytest.raises(ConfigError, match=r"never completes: interruptions every 3\.6e\+03 s"):
        job_plan(job, step_time_s=1.0, checkpoint_s=10.0, steps=1000, policy="daly")


@pytest.mark.parametrize(
    "sets",
    [
        ["reliability.restart_s=1e308", "training.tokens=1e12"],
        ["reliability.gpu_mtbf_h=1e-300", "training.tokens=1e12"],
        ["spot.discount=0.5", "reliability.restart_s=0", "spot.preemptions_per_node_hour=1e300"],
    ],
)
def test_run_refuses_a_job_that_never_completes(
    sets: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "gpt2-1gpu", "--network", "analytical"]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("clustersim: error: reliability: the job never completes")
    assert len(err.splitlines()) == 1


def test_a_step_time_past_the_float_range_names_the_part(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An NVMe bandwidth of 1e-300 B/s makes the offloaded optimizer infinite: refused,
    naming the step's parts that overflowed, instead of an assertion on a NaN breakdown."""
    argv = ["run", "gpt2-1gpu", "--network", "analytical", "--set", "training.offload=nvme",
            "--set", "training.nvme_bandwidth=1e-300"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "the step time overflows (inf s) in optimizer" in err


def test_resuming_onto_a_file_that_is_not_parquet_keeps_it(tmp_path: Path) -> None:
    out = tmp_path / "foreign.parquet"
    out.write_text("not parquet")
    spec = sweep_spec("gpt2-1gpu", ["parallel.micro_batch=1,2"])
    with pytest.raises(ConfigError, match="is not a readable Parquet file"):
        run_sweep(spec, out, resume=True, progress=False)
    assert out.read_text() == "not parquet"


@pytest.mark.parametrize(
    ("command", "bad"),
    [
        (["run", "gpt2-1gpu", "--network", "analytical"], "x.gif"),
        (["sweep", "gpt2-1gpu", "--grid", "parallel.micro_batch=1,2", "--no-progress"], "x.jpg"),
        (["collective", "--topology", "dgx-h100", "-b", "1M", "-e", "1M"], "x"),
    ],
)
def test_a_bad_plot_file_is_refused_before_any_simulation(
    command: list[str], bad: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*command, "--plot", str(tmp_path / bad)]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # nothing was simulated, so nothing was printed
    assert "unknown image type" in err and "allowed: .png, .svg" in err


def test_a_step_job_too_large_for_memory_is_a_calibration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """torch reports a failed allocation as a RuntimeError (CPU: "can't allocate memory",
    CUDA: its OutOfMemoryError); the step job names the config instead. Other runtime
    errors are not swallowed."""
    pytest.importorskip("torch")

    def oom(*_: object) -> None:
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't "
                           "allocate memory: you tried to allocate 120000000000 bytes")  # fmt: skip

    monkeypatch.setattr(stepjob, "_time_steps", oom)
    with pytest.raises(CalibrationError, match=r"does not fit the cpu memory"):
        stepjob.run_step_job("cpu", quick=True)

    def other(*_: object) -> None:
        raise RuntimeError("shape mismatch")

    monkeypatch.setattr(stepjob, "_time_steps", other)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        stepjob.run_step_job("cpu", quick=True)


def test_local_gloo_ranks_are_capped_by_the_host_s_cpus() -> None:
    """100,000 local gloo ranks would fork until the host gives out: refused up front."""
    pytest.importorskip("torch")
    from calibrate.collectives import max_gloo_ranks, run_collectives

    with pytest.raises(CalibrationError, match=rf"at most {max_gloo_ranks()} gloo ranks"):
        run_collectives("gloo", ["all_reduce"], local=100_000)
