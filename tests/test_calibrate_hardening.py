"""Calibration runs that fail keep what they measured and never hang the parent (issue 12).

Real runs use gloo on CPU with 2 local ranks and tiny sizes (a few seconds each).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from calibrate import spawn
from calibrate.collectives import MAX_SIZES, message_sizes, run_collectives
from calibrate.measurements import load_measurements
from sim.errors import CalibrationError

torch = pytest.importorskip("torch", reason="real runs need torch (clustersim[calibrate])")

FIXED = "2025-01-01T00:00:00Z"


def test_sweep_size_count_is_capped() -> None:
    """A step factor barely above 1 is refused with the count it would give, not looped."""
    with pytest.raises(CalibrationError, match=f"at most {MAX_SIZES}"):
        message_sizes(8, 16 * 2**30, 1.0000001)
    with pytest.raises(CalibrationError, match="finite number > 1"):
        message_sizes(8, 64, float("nan"))
    assert message_sizes(8, 64, 2) == [8, 16, 32, 64]


def test_a_stopped_rank_is_killed_not_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 1 stops itself; rank 0 exits; the parent kills rank 1 after timeout + grace."""
    import spawn_workers

    monkeypatch.setattr(spawn, "GRACE_S", 0.5)
    start = time.monotonic()
    with pytest.raises(CalibrationError, match=r"rank\(s\) 1 did not finish"):
        spawn.run_ranks(torch, spawn_workers.stop_rank_one, (), 2, timeout_s=0.5)
    assert time.monotonic() - start < 30


def test_a_failed_run_keeps_its_records_and_resume_skips_them(tmp_path: Path) -> None:
    """1 KiB is measured, then both ranks fail to allocate 2**60 bytes: the 1 KiB record
    stays in ``out`` (the error says so), and ``resume`` measures only what is missing."""
    out = tmp_path / "c.json"
    kw = dict(iters=2, warmup=0, local=2, created=FIXED, out=str(out))
    with pytest.raises(CalibrationError, match=r"can't allocate.*1 records kept in .*--resume"):
        run_collectives("gloo", ["all_reduce"], 1024, 2**60, step_factor=2.0**50, **kw)  # type: ignore[arg-type]
    kept = load_measurements(out)
    assert [(r.op, r.size_bytes) for r in kept.collectives] == [("all_reduce", 1024)]
    assert any(n.startswith("partial: 1 records") for n in kept.meta.notes)
    first = json.loads(out.read_text())["records"][0]
    again = run_collectives("gloo", ["all_reduce"], 1024, 2048, resume=True, **kw)  # type: ignore[arg-type]
    assert [r.size_bytes for r in again.collectives] == [1024, 2048]
    assert json.loads(out.read_text())["records"][0] == first  # kept, not re-measured
    assert "resumed: 1 records from an earlier run" in again.meta.notes


def test_a_gloo_run_keeps_the_fastest_call_under_statistic_min() -> None:
    """``--statistic min`` on a real 2-rank gloo run: every size is recorded and the file
    says which statistic its times are (the statistic itself: tests/test_timing_statistic.py);
    an unknown statistic is refused before any rank starts."""
    m = run_collectives("gloo", ["all_reduce"], 1024, 2048, iters=5, warmup=1, local=2,
                        created=FIXED, statistic="min")  # fmt: skip
    assert m.meta.time_statistic == "min" and len(m.collectives) == 2
    assert all(r.time_s > 0 and r.iters == 5 for r in m.collectives)
    with pytest.raises(
        CalibrationError, match="--statistic 'mean' is unknown; allowed: median, min"
    ):
        run_collectives("gloo", ["all_reduce"], local=2, statistic="mean")


def test_resume_refuses_a_file_of_another_kind(tmp_path: Path) -> None:
    """--resume on a measurement file of another backend is refused before any rank starts."""
    from calibrate.measurements import Measurements, Meta, save_measurements

    out = tmp_path / "c.json"
    save_measurements(Measurements("compute", Meta(source="x", created=FIXED)), out)
    with pytest.raises(CalibrationError, match=r"--resume: .* holds compute measurements"):
        run_collectives("gloo", ["all_reduce"], local=2, out=str(out), resume=True)
    with pytest.raises(CalibrationError, match="--resume needs --out"):
        run_collectives("gloo", ["all_reduce"], local=2, resume=True)
    with pytest.raises(CalibrationError, match="--timeout"):
        run_collectives("gloo", ["all_reduce"], local=2, timeout_s=float("nan"))


def _gloo_file(out: Path, ranks: int = 2, iters: int = 2, dtype: str = "float32") -> None:
    from calibrate.measurements import CollectiveRecord, Measurements, Meta, save_measurements

    rec = CollectiveRecord("all_reduce", 1024, 256, dtype, 1e-4, 0.0, 0.01, 0.01, False,
                           ranks, iters)  # fmt: skip
    meta = Meta(source="live run", created=FIXED, backend="gloo", world_size=ranks,
                details={"iters": iters})  # fmt: skip
    save_measurements(Measurements("collectives", meta, (rec,)), out)


@pytest.mark.parametrize(
    "change, words",
    [
        (dict(local=3), "ranks 2, this run has 3"),
        (dict(iters=5), "iterations per size 2, this run has 5"),
        (dict(dtype="float64"), "dtype float32, this run has float64"),
        (dict(statistic="min"), "--statistic median, this run has min"),
    ],
)
def test_resume_refuses_records_of_another_run(
    tmp_path: Path, change: dict[str, object], words: str
) -> None:
    """Records of another world size, iteration count or dtype are not mixed into one
    file (a fit would treat them as one run); refused before any rank starts, file kept."""
    out = tmp_path / "c.json"
    _gloo_file(out)
    before = out.read_bytes()
    kw: dict[str, object] = dict(iters=2, warmup=0, local=2, out=str(out), resume=True)
    kw.update(change)
    with pytest.raises(CalibrationError, match=words):
        run_collectives("gloo", ["all_reduce"], 1024, 2048, **kw)  # type: ignore[arg-type]
    assert out.read_bytes() == before


def test_one_local_rank_is_refused_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    """A calibration of one rank measures no communication: --local needs 2 (the API
    keeps local=1 for tests of a backend's unsupported ops)."""
    from sim.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["calibrate", "collectives", "--backend", "gloo", "--local", "1", "--out", "c.json"])
    assert stop.value.code == 2
    assert (
        "argument --local: 1 is not allowed: expected a whole number >= 2"
        in capsys.readouterr().err
    )


def test_the_cli_never_replaces_a_measurement_file_without_force(tmp_path: Path) -> None:
    """``calibrate compute/import --out`` on a collectives file: refused, file unchanged;
    with ``--force`` it is replaced."""
    from sim.cli import main
    from tests.fuzz_cases import _GOOD_ROWS, nccl_log

    out = tmp_path / "m.json"
    _gloo_file(out)
    before = out.read_bytes()
    log = tmp_path / "x.log"
    log.write_text(nccl_log(_GOOD_ROWS[:4]))
    for argv in (
        ["calibrate", "compute", "--device", "cpu", "--quick", "--out", str(out)],
        ["calibrate", "import-nccl-tests", str(log), "--out", str(out)],
        ["calibrate", "collectives", "--backend", "gloo", "--local", "2", "--out", str(out)],
    ):
        assert main(argv) == 2
        assert out.read_bytes() == before
    assert main(["calibrate", "import-nccl-tests", str(log), "--out", str(out), "--force"]) == 0
    assert load_measurements(out).meta.world_size == 8
