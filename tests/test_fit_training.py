"""The training fit (calibrate/fit_training.py): its pieces, its command line, and that it
reproduces the catalog's fitted values."""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

import calibrate.fit_training as fit_training
from calibrate.fit_training import (
    BALANCED,
    CATALOG,
    DATA,
    FITS,
    ParamSpec,
    TrainingRow,
    fit_rows,
    fragmentation_bound,
    main,
    rows_for,
    table_weights,
    validation,
    write_catalog,
)
from sim.errors import CalibrationError
from sim.training.compute.params import compute_params
from sim.training.memory.report import MemoryParams

needs_data = pytest.mark.skipif(not DATA.exists(), reason=f"published data absent: {DATA}")


@given(u=st.floats(0, 1), log=st.booleans())
def test_param_spec_maps_the_unit_box_onto_its_bounds(u: float, log: bool) -> None:
    spec = ParamSpec("k", 0.1, 10.0, log=log)
    v = spec.value(u)
    assert 0.1 * (1 - 1e-12) <= v <= 10.0 * (1 + 1e-12)
    assert spec.unit(v) == pytest.approx(u, abs=1e-9)


def test_unknown_gpu_type_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--gpu", "H900"]) == 2
    err = capsys.readouterr().err
    assert "H900" in err and "H100-SXM" in err and len(err.strip().splitlines()) == 1


def test_missing_tables_are_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--gpu", "H100-SXM", "--data", str(tmp_path)]) == 2
    assert "absent" in capsys.readouterr().err


def test_write_catalog_changes_only_the_fitted_lines(tmp_path: Path) -> None:
    path = tmp_path / "compute.yaml"
    shutil.copy(CATALOG, path)
    before = path.read_text().splitlines()
    write_catalog("H100-SXM", {"mem_eff": 0.5, "attn_eff_max": 0.25}, {"rows": 3}, path)
    after = path.read_text().splitlines()
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert {b.strip().split(":")[0] for _, b in changed} <= {
        "mem_eff",
        "attn_eff_max",
        "validation",
    }
    entry = yaml.safe_load(path.read_text())["H100-SXM"]
    assert entry["mem_eff"] == 0.5 and entry["validation"] == {"rows": 3}
    with pytest.raises(CalibrationError, match="H900"):
        write_catalog("H900", {"mem_eff": 0.5}, {}, path)


@needs_data
def test_every_published_run_fits_with_the_default_fragmentation() -> None:
    """The default fragmentation is the bound fitted to the llm-foundry runs (they ran)."""
    for gpu in FITS:
        bound, over = fragmentation_bound(
            [r for r in rows_for(gpu) if r.metric == "tokens_per_gpu"]
        )
        assert not over and bound >= MemoryParams().fragmentation


@needs_data
@pytest.mark.slow
def test_refit_reproduces_the_catalog_h100_values() -> None:
    """Deterministic: refitting the H100 tables gives the catalog's values (4 digits kept)."""
    _, _, specs = FITS["H100-SXM"]
    catalog = compute_params("H100-SXM")
    start = {s.key: float(getattr(catalog, s.key)) for s in specs}
    fit = fit_rows(rows_for("H100-SXM"), specs, start)
    got = np.array([fit.params[s.key] for s in specs])
    assert got == pytest.approx(np.array(list(start.values())), rel=2e-3)


@dataclass(frozen=True)
class _Row:
    """What fit_rows and table_weights read of a row: its table and published value."""

    table: str
    measured: float


def _rows(tables: Sequence[str], measured: Sequence[float] | None = None) -> list[TrainingRow]:
    values = measured or [1.0] * len(tables)
    return cast(list[TrainingRow], [_Row(t, m) for t, m in zip(tables, values, strict=True)])


@given(sizes=st.lists(st.integers(1, 40), min_size=1, max_size=5))
def test_table_weights_give_each_table_an_equal_share(sizes: list[int]) -> None:
    """Weights sum to the row count, each table's to rows / tables, equal within a table."""
    tables = [f"t{i}" for i, n in enumerate(sizes) for _ in range(n)]
    w = table_weights(_rows(tables))
    assert w.sum() == pytest.approx(len(tables), rel=1e-12)
    for i, n in enumerate(sizes):
        mine = w[[j for j, t in enumerate(tables) if t == f"t{i}"]]
        assert mine == pytest.approx(np.full(n, len(tables) / (len(sizes) * n)), rel=1e-12)


def test_table_weights_are_one_when_the_tables_are_the_same_size() -> None:
    assert table_weights(_rows(["a", "b", "a", "b"])).tolist() == [1.0, 1.0, 1.0, 1.0]


def _fit_one_scale(
    monkeypatch: pytest.MonkeyPatch, rows: list[TrainingRow], balance: bool
) -> float:
    """Fit a model predicting ``x`` for every row (no simulation) and return ``x``."""

    def fake(rows: Sequence[TrainingRow], compute: Mapping[str, float] | None = None) -> np.ndarray:
        return np.full(len(rows), (compute or {"x": 1.0})["x"])

    monkeypatch.setattr(fit_training, "predict", fake)
    spec = ParamSpec("x", 0.9, 1.1)
    return fit_rows(rows, [spec], {"x": 1.01}, screen_log2=0, balance=balance).params["x"]


def test_balanced_fit_meets_the_tables_half_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """One row published at 1.00 and nine at 1.02, residuals well inside f_scale (the
    quadratic part of soft-L1): unweighted, the nine win (log-mean 0.9 log 1.02, x ~ 1.018);
    with the tables balanced each counts half (x ~ sqrt(1.02) = 1.00995)."""
    rows = _rows(["small"] + ["big"] * 9, [1.0] + [1.02] * 9)
    plain = _fit_one_scale(monkeypatch, rows, balance=False)
    even = _fit_one_scale(monkeypatch, rows, balance=True)
    assert plain == pytest.approx(1.02**0.9, abs=1e-3)
    assert even == pytest.approx(1.02**0.5, abs=1e-3)


def test_balance_changes_nothing_for_tables_of_equal_size(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = _rows(["a", "b", "a", "b"], [1.0, 1.03, 0.99, 1.05])
    assert _fit_one_scale(monkeypatch, rows, True) == _fit_one_scale(monkeypatch, rows, False)


def test_only_a100_weighs_its_tables_and_its_record_says_so() -> None:
    """Opt-in per GPU type: the H100 fit (and its catalog numbers) keep equal row weights."""
    assert {"A100-SXM"} == BALANCED and set(BALANCED) <= set(FITS)
    rows = _rows(["a", "b"], [1.0, 2.0])
    pred = np.array([1.1, 2.0])
    assert "weights" not in validation(rows, pred, None)
    assert "each table equally" in validation(rows, pred, None, balance=True)["weights"]
