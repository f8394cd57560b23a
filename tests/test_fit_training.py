"""The training fit (calibrate/fit_training.py): its pieces, its command line, and that it
reproduces the catalog's fitted values."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from calibrate.fit_training import (
    CATALOG,
    DATA,
    FITS,
    ParamSpec,
    fit_rows,
    fragmentation_bound,
    main,
    rows_for,
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
