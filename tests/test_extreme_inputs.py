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


def test_an_event_simulation_of_a_billion_interruptions_is_refused_up_front(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """GPU MTBF 300 h on 16,384 GPUs: ~1e9 interruptions per simulated run. The budget
    counts interruptions, not only checkpoint segments, so the run is refused with its
    estimate instead of running for days."""
    argv = ["run", "llama3-405b-16k", "--network", "analytical",
            "--set", "reliability.gpu_mtbf_h=300"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "interruptions per run would take about" in err and "CLUSTERSIM_TIME_LIMIT" in err


def test_the_event_estimate_grows_with_the_interruptions() -> None:
    from sim.budget import EVENT_S_PER_INTERRUPTION, estimate_events

    quiet, busy = estimate_events(1000, 20), estimate_events(1000, 20, 1e6)
    assert busy.time_s - quiet.time_s == pytest.approx(20 * 1e6 * EVENT_S_PER_INTERRUPTION)


@pytest.mark.parametrize(
    ("content", "name"),
    [("a,b\n1,2", "d1.csv"), ('{"important": 1}\n{"more": "data"', "d2.jsonl"),
     ("hello world", "d3.jsonl")],
)  # fmt: skip
def test_resuming_onto_a_file_that_is_not_this_sweep_s_leaves_it_whole(
    content: str, name: str, tmp_path: Path
) -> None:
    """Its last line has no newline, as a row cut by a kill has; but the file is not this
    sweep's (other columns, or no row of ours at all), so nothing of it is cut."""
    out = tmp_path / name
    out.write_text(content)
    spec = sweep_spec("gpt2-1gpu", ["parallel.micro_batch=1,2"])
    with pytest.raises(ConfigError, match=r"not this sweep's|does not hold this sweep's rows"):
        run_sweep(spec, out, resume=True, progress=False)
    assert out.read_text() == content


def test_a_sweep_none_of_whose_points_runs_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "s.csv"
    argv = ["sweep", "gpt2-1gpu", "--grid", "parallel.micro_batch=1,2", "--set",
            "parallel.tp=0", "--no-progress", "--out", str(out)]  # fmt: skip
    assert main(argv) == 2
    assert "no point of the sweep could be simulated: parallel.tp" in capsys.readouterr().err
    assert out.read_text().count("parallel.tp: expected") == 2  # the rows are kept


def test_a_failed_run_leaves_an_existing_trace_file_alone(tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    trace.write_text("precious")
    argv = ["run", "gpt2-1gpu", "--trace", str(trace), "--set", "reliability.gpu_mtbf_h=1e-5",
            "--set", "training.tokens=1e12"]  # fmt: skip
    assert main(argv) == 2
    assert trace.read_text() == "precious"


def test_report_refuses_to_write_over_one_of_its_inputs(tmp_path: Path) -> None:
    run = tmp_path / "run.json"
    run.write_text('{"kind": "run"}')
    link = tmp_path / "link.html"
    link.symlink_to(run)
    for out in (run, link):
        assert main(["report", "--out", str(out), str(run)]) == 2
    assert run.read_text() == '{"kind": "run"}'


@pytest.mark.parametrize("profile", ["nosuch", "l40s-tcp"])
def test_plan_refuses_a_bad_profile_like_run(
    profile: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "gpt2-1gpu", "--profile", profile]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_a_closed_standard_output_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    monkeypatch.setattr("sys.stdout", None)
    assert main(["schema", "scenario"]) == 2
    assert "standard output is closed" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["run", "gpt2-1gpu", "--set", "variability.compute_cv=1e300", "--samples", "5"],
         "variability.compute_cv: Input should be less than or equal to 10"),
        (["run", "gpt2-1gpu", "--set", "variability.straggler_probability=1", "--set",
          "variability.straggler_slowdown=1e308", "--samples", "5"],
         "variability.straggler_slowdown: Input should be less than or equal to 1000"),
        (["run", "gpt2-1gpu", "--set", "training.tokens=1e300"],
         "training.tokens: expected a number of tokens in (0, 1e+18]"),
        (["topologies", "--show", "h100-ib-ndr", "--lifetime-years", "1e-300"],
         "--lifetime-years: must be between 0.00274 (a day) and 100"),
    ],
)  # fmt: skip
def test_numbers_past_any_physical_meaning_are_refused(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """They used to print 300-digit times and costs (or overflow warnings) with status 0."""
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert says in err and out == ""


@pytest.mark.parametrize("created", ["yesterday", "2025-13-45T99:00:00Z"])
def test_a_created_stamp_must_be_an_iso_time(created: str) -> None:
    from calibrate.measurements import utc_now

    with pytest.raises(CalibrationError, match="expected a UTC ISO-8601 time"):
        utc_now(created)
    assert utc_now("2025-01-01T00:00:00Z") == "2025-01-01T00:00:00Z"  # kept as given


def test_interleaving_with_one_chunk_per_stage_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """It ran as 1F1B but counted interleaved memory at v = 1 (about twice 1F1B's
    activations on the first stage); Megatron interleaves only with virtual stages."""
    argv = ["run", "llama2-70b-256-ib", "--network", "analytical",
            "--set", "parallel.schedule=interleaved"]  # fmt: skip
    assert main(argv) == 2
    assert "needs parallel.virtual_stages >= 2" in capsys.readouterr().err
