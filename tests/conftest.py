"""Fixtures shared by test modules (one rendering of the example report per session)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def result_files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """One result file of each kind, from real simulations (see tests/report_inputs.py)."""
    from tests.report_inputs import write_inputs

    return write_inputs(tmp_path_factory.mktemp("results"))


@pytest.fixture(scope="session")
def report_file(result_files: list[Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The HTML report of :func:`result_files` (needs the [plot] extra)."""
    pytest.importorskip(
        "matplotlib", reason="reports need the [plot] extra: pip install 'clustersim[plot]'"
    )
    from sim.report import load_results, render_report

    return render_report(
        [load_results(p) for p in result_files], tmp_path_factory.mktemp("report") / "report.html"
    )
