"""What a timed record keeps of its iterations: the median, or on a shared host the fastest
(``--statistic min``), and the checks on the choice (issue 20 part 5)."""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from calibrate.compute import _Bench
from calibrate.measurements import STATISTICS, check_statistic, summarize_times
from sim.errors import CalibrationError

TIMES = st.lists(st.floats(1e-9, 10.0, allow_nan=False), min_size=1, max_size=40)


@given(TIMES)
def test_min_is_the_fastest_iteration_and_the_spread_does_not_depend_on_the_statistic(
    xs: list[float],
) -> None:
    (med, spread_med), (low, spread_min) = (summarize_times(xs, s) for s in STATISTICS)
    assert low == min(xs) and med == statistics.median(xs)
    assert low <= med and spread_min == spread_med >= 0.0


@pytest.mark.parametrize("bad", ["mean", "", "MIN", "p10"])
def test_an_unknown_statistic_names_the_allowed_ones(bad: str) -> None:
    with pytest.raises(CalibrationError, match=r"--statistic .* is unknown; allowed: median, min"):
        check_statistic(bad)
    with pytest.raises(CalibrationError, match="allowed: median, min"):
        summarize_times([1.0, 2.0], bad)


def _clock(durations: list[float]) -> Iterator[float]:
    """A clock whose successive start/stop readings give ``durations``."""
    now = 0.0
    for d in durations:
        yield now
        now += d
        yield now


@pytest.mark.parametrize(("statistic", "expected"), [("median", 3.0), ("min", 1.0)])
def test_a_compute_record_keeps_the_chosen_statistic(statistic: str, expected: float) -> None:
    """Five timed calls of 5, 1, 3, 4 and 2 s (after two untimed warm-up calls): the record's
    time and rates are the median's or the fastest call's."""
    ticks = _clock([5.0, 1.0, 3.0, 4.0, 2.0, 9.0, 9.0, 9.0, 9.0])
    bench = _Bench(None, "cpu", quick=True, clock=lambda: next(ticks), statistic=statistic)
    bench.iters, bench.warmup = 5, 2
    bench.add("gemm", (2, 2, 2), "float32", 6.0, 12.0, lambda: None)
    (r,) = bench.records
    assert r.time_s == expected and r.achieved_flops_per_s == 6.0 / expected
    assert r.achieved_Bps == 12.0 / expected and r.time_spread_s == pytest.approx(3.2)


@pytest.mark.parametrize("statistic", STATISTICS)
def test_the_step_job_records_the_chosen_statistic(statistic: str) -> None:
    """A tiny step job: ``time_s`` is the median or the fastest of its timed steps, and the
    file says which (``meta.time_statistic``)."""
    pytest.importorskip("torch", reason="real runs need torch (clustersim[calibrate])")
    from calibrate.stepjob import StepJobConfig, run_step_job

    tiny = StepJobConfig(layers=1, hidden=16, heads=2, ffn_hidden=32, vocab=32, seq=8, batch=2)
    m = run_step_job("cpu", config=tiny, steps=5, warmup=1, statistic=statistic)
    (r,) = m.steps
    want = min(r.step_times_s) if statistic == "min" else statistics.median(r.step_times_s)
    assert m.meta.time_statistic == statistic and r.time_s == want


def test_a_bad_statistic_is_named_before_an_existing_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``calibrate compute --statistic p10 --out EXISTING``: the statistic is the error (one
    line, exit 2), and the file is left as it was."""
    from sim.cli import main

    out = tmp_path / "m.json"
    out.write_text("{}")
    assert main(["calibrate", "compute", "--device", "cpu", "--statistic", "p10",
                 "--out", str(out)]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["clustersim: error: --statistic 'p10' is unknown; allowed: median, min"]
    assert out.read_text() == "{}"
