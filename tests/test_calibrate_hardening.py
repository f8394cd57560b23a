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
