"""The leave-one-table-out protocol (calibrate/loto.py) and its prediction cache.

Fast tests use a stand-in predictor (a row's prediction is ``matmul_training_factor``
times a per-row constant), so what each fit must find is known in closed form. The
slow tests run the real protocol on the shared tables and hold today's numbers as guards
(mean and max |error| per table, shipped, all-tables fit and LOTO), each with a stated
tolerance; ``python benchmarks/validate_training.py --jobs 2`` prints them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

import calibrate.loto as loto
from calibrate.fit_training import DATA, FITS, TrainingRow
from calibrate.loto import (
    RULES,
    TABLES,
    command_for,
    fit_local,
    format_results,
    gpu_of,
    run_protocol,
)
from calibrate.prediction_cache import PredictionCache, code_fingerprint, row_key
from sim.errors import CalibrationError


@dataclass(frozen=True)
class _Row:
    """What the protocol reads of a row when prediction is stubbed."""

    table: str
    label: str
    measured: float
    k: float = 1.0
    metric: str = "tokens_per_gpu"
    group: str = "g"
    scenario: Any = None


def _fake_predict(rows: Sequence[_Row], compute: Mapping[str, float] | None = None) -> np.ndarray:
    f = (compute or {}).get("matmul_training_factor", 0.9)
    return np.array([f * r.k for r in rows])


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[_Row]]:
    """Tables 'a' (published at 0.5) and 'b' (0.7), 'c' (0.6); predictions stubbed."""
    tables = {
        "a": [_Row("a", f"a{i}", 0.5) for i in range(3)],
        "b": [_Row("b", f"b{i}", 0.7) for i in range(3)],
        "c": [_Row("c", f"c{i}", 0.6) for i in range(3)],
    }
    monkeypatch.setattr(loto, "predict", _fake_predict)
    monkeypatch.setattr(loto, "table_rows", lambda t, data: tables[t])
    monkeypatch.setattr(loto, "compute_params", lambda gpu: _Catalog())
    return tables


class _Catalog:
    """Catalog values the all-tables fits start from."""

    matmul_training_factor = 0.9
    attn_eff_max = 0.3
    mem_eff = 0.3
    mem_training_factor = 0.4
    comm_interference = 0.1
    attn_odd_head_dim_eff = 0.9
    matmul_k_half = 128.0
    stream_eff = 0.8


def test_every_shared_table_belongs_to_one_gpu_type() -> None:
    seen = [t for ts in TABLES.values() for t in ts]
    assert len(seen) == len(set(seen)) == 7
    assert all(gpu_of(t) in FITS for t in seen)
    with pytest.raises(CalibrationError, match="not a shared table; known: llm-foundry"):
        gpu_of("nope.csv")


@pytest.mark.skipif(not DATA.exists(), reason=f"published data absent: {DATA}")
def test_every_shared_training_table_is_in_the_protocol() -> None:
    """Every published training table under ../shared/data (llm-foundry and Megatron tables
    of model throughput) is validated: none sits unread beside the protocol."""
    shared = sorted(p.name for p in DATA.glob("*.csv")
                    if p.name.startswith(("llm-foundry-", "megatron-")))  # fmt: skip
    assert shared and set(shared) <= {t for ts in TABLES.values() for t in ts}, shared


def test_the_command_of_a_table_names_it() -> None:
    cmd = command_for("megatron-core-h100-weak-scaling.csv", jobs=2)
    assert cmd == ("python benchmarks/validate_training.py --table "
                   "megatron-core-h100-weak-scaling.csv --rows --jobs 2")  # fmt: skip


def test_a_fit_finds_the_log_mean_of_its_rows(stub: dict[str, list[_Row]]) -> None:
    """Prediction f for every row, published 0.5 and 0.7: soft-L1 in log with a weak prior
    ends near the geometric mean sqrt(0.35) = 0.5916 (the residuals, +-17%, are past the
    5% scale, so soft-L1 is close to L1 there: anywhere between is near optimal; the prior
    pulls toward 1.0)."""
    specs = FITS["H100-SXM"][2]
    rows = cast(list[TrainingRow], stub["a"] + stub["b"])
    prior = {s.key: 1.0 if s.key == "matmul_training_factor" else s.low for s in specs}
    start = {s.key: 0.9 if s.key == "matmul_training_factor" else s.low for s in specs}
    params, ok = fit_local(rows, specs, prior, start)
    assert ok and 0.5 < params["matmul_training_factor"] < 0.7


def test_loto_refits_on_the_other_tables(stub: dict[str, list[_Row]]) -> None:
    """Three tables of one GPU type: leaving 'a' out fits 'b' and 'c' (0.6-0.7), so 'a',
    published at 0.5, is predicted 20-40% high; its fitted error is smaller."""
    fits, results = run_protocol({"H100-SXM": ("a", "b", "c")}, Path("."))
    (fit,) = fits
    assert fit.converged and set(fit.loto) == {"a", "b", "c"}
    a = next(r for r in results if r.table == "a")
    assert 0.2 < float(a.loto.mean()) < 0.4
    assert abs(float(a.fitted.mean())) < float(a.loto.mean())
    assert a.loto_basis == "refit on b, c"
    assert np.allclose(a.shipped, 0.9 / 0.5 - 1)


def test_a_single_table_gpu_type_is_predicted_by_the_rule(stub: dict[str, list[_Row]]) -> None:
    """One table per GPU type: 'transfer' predicts A100's table with H100's fitted
    matmul_training_factor (~0.5: table a), 'op-level' with the unfitted default (1.0)."""
    tables = {"H100-SXM": ("a",), "A100-SXM": ("b",)}
    fits, results = run_protocol(tables, Path("."), rule="transfer")
    h100 = next(f for f in fits if f.gpu == "H100-SXM")
    b = next(r for r in results if r.table == "b")
    assert b.loto_basis.startswith("transfer from H100-SXM (")
    assert "matmul_training_factor" in b.loto_basis
    assert fits[1].loto["b"]["matmul_training_factor"] == pytest.approx(
        h100.all_tables["matmul_training_factor"], rel=1e-9
    )
    _, results = run_protocol(tables, Path("."), rule="op-level")
    b = next(r for r in results if r.table == "b")
    assert b.loto_basis == "op-level: unfitted defaults"
    assert np.allclose(b.loto, 1.0 / 0.7 - 1)


def test_only_runs_the_tables_asked_for(stub: dict[str, list[_Row]]) -> None:
    fits, results = run_protocol({"H100-SXM": ("a", "b"), "A100-SXM": ("c",)}, Path("."),
                                 only=["b"])  # fmt: skip
    assert [f.gpu for f in fits] == ["H100-SXM"] and [r.table for r in results] == ["b"]


def test_an_unknown_rule_is_refused() -> None:
    with pytest.raises(CalibrationError, match="allowed: transfer, op-level"):
        run_protocol(rule="nearest")
    assert set(RULES) == {"transfer", "op-level"}


def test_the_report_has_a_line_and_a_command_per_table(stub: dict[str, list[_Row]]) -> None:
    fits, results = run_protocol({"H100-SXM": ("a", "b")}, Path("."))
    text = format_results(fits, results, rows=True)
    assert "H100-SXM all-tables fit (converged): matmul_training_factor=" in text
    assert text.count("refit on") == 2
    assert f"  a: {command_for('a')}" in text and f"  b: {command_for('b')}" in text
    assert "  a0 " in text  # the rows


# --- the prediction cache ---------------------------------------------------------------------


def test_cached_predictions_round_trip_exactly(tmp_path: Path) -> None:
    c = PredictionCache(tmp_path, fingerprint="f" * 64)
    key = row_key("scenario", "tokens_per_gpu", {"mem_eff": 0.1 + 0.2})
    c.put(key, 1 / 3)
    c.save()
    again = PredictionCache(tmp_path, fingerprint="f" * 64)
    assert again.get(key) == 1 / 3 and (again.hits, again.misses) == (1, 0)
    assert PredictionCache(tmp_path, fingerprint="e" * 64).get(key) is None


def test_the_key_changes_with_the_scenario_metric_and_every_parameter() -> None:
    base = row_key("s", "m", {"a": 0.5, "b": 1.0})
    assert base == row_key("s", "m", {"b": 1.0, "a": 0.5})
    others = {row_key("t", "m", {"a": 0.5, "b": 1.0}), row_key("s", "n", {"a": 0.5, "b": 1.0}),
              row_key("s", "m", {"a": 0.5 + 1e-16, "b": 1.0}), row_key("s", "m", {"a": 0.5})}  # fmt: skip
    assert base not in others and len(others) == 4


def test_a_damaged_cache_file_is_an_empty_cache(tmp_path: Path) -> None:
    c = PredictionCache(tmp_path, fingerprint="d" * 64)
    c.path.write_text("{not json")
    assert PredictionCache(tmp_path, fingerprint="d" * 64).get("k") is None


def test_the_fingerprint_covers_the_simulator_and_catalogs() -> None:
    fp = code_fingerprint()
    assert len(fp) == 64 and fp == code_fingerprint()


# --- the real protocol on the shared tables ---------------------------------------------------

needs_data = pytest.mark.skipif(not DATA.exists(), reason=f"published data absent: {DATA}")

#: Per table: (shipped, all-tables fit, LOTO) as (mean, max) |error|, measured 2026-11-26
#: (after the framework presets, PXN and the aligned gathers; the H100 tables again
#: 2026-12-01 after Megatron-Core's bucketed parameter all-gather: the all-tables fit's
#: matmul_training_factor left its bound, 1.0 -> 0.93, raising two fitted maxima) with
#: ``python benchmarks/validate_training.py --jobs 1 --rows``. Guards: each may not grow by
#: more than 0.5 points of mean and 1 point of max (the lead tightens them as accuracy work
#: lands; a drop is welcome and should be written in).
TODAY: dict[str, tuple[tuple[float, float], tuple[float, float], tuple[float, float]]] = {
    "llm-foundry-mpt-h100-bf16.csv": ((0.022, 0.138), (0.023, 0.159), (0.038, 0.166)),
    "llm-foundry-mpt-h100-fp8.csv": ((0.024, 0.078), (0.021, 0.068), (0.027, 0.080)),
    "megatron-core-h100-weak-scaling.csv": ((0.048, 0.115), (0.036, 0.127), (0.051, 0.113)),
    # The A100 tables again 2026-12-04, after the 2022 selective-recompute runs got their
    # code's asynchronous column-parallel backward (tp_async_backward): that table 9.0% ->
    # 7.1% shipped, 4.9% -> 3.6% LOTO; refitted with it, the Megatron SC21 table's LOTO
    # falls 5.4% -> 3.4% mean (10.7% -> 7.5% max; 9.0% / 13.8% before the 2022 table
    # joined) and its all-tables fit 3.7% -> 2.7% (matmul_training_factor 0.986 in the
    # all-tables fit).
    "megatron-lm-a100-weak-scaling.csv": ((0.021, 0.051), (0.027, 0.068), (0.034, 0.075)),
    "llm-foundry-mpt-a100-80gb.csv": ((0.066, 0.211), (0.056, 0.253), (0.058, 0.254)),
    "llm-foundry-mpt-a100-40gb.csv": ((0.044, 0.229), (0.041, 0.258), (0.047, 0.333)),
    "megatron-mfu-hfu-a100.csv": ((0.071, 0.123), (0.029, 0.061), (0.036, 0.070)),
}


@needs_data
@pytest.mark.slow
@pytest.mark.parametrize("gpu", sorted(TABLES))
def test_today_s_errors_are_guarded(gpu: str, tmp_path: Path) -> None:
    from calibrate.fit_training import use_cache
    from calibrate.prediction_cache import default_folder

    cache = PredictionCache(default_folder())
    use_cache(cache)
    try:
        _, results = run_protocol({gpu: TABLES[gpu]})
    finally:
        cache.save()
        use_cache(None)
    for r in results:
        got = [
            (float(np.abs(e).mean()), float(np.abs(e).max())) for e in (r.shipped, r.fitted, r.loto)
        ]
        for (mean, worst), (m0, w0) in zip(got, TODAY[r.table], strict=True):
            assert mean <= m0 + 0.005 and worst <= w0 + 0.01, (r.table, got, TODAY[r.table])
    (tmp_path / "summary.json").write_text(json.dumps([r.summary() for r in results]))
