"""Fixtures shared by test modules (one rendering of the example report per session), and
the versions a run used, printed at its start so that a red run elsewhere can be compared."""

from __future__ import annotations

import os
import platform
from importlib import metadata
from pathlib import Path

import pytest

#: Not test modules: ``device_stub/sitecustomize.py`` hides pydantic and simpy from any
#: process that imports it, so ``--doctest-modules`` must never collect (import) it.
collect_ignore = ["device_stub"]

#: Packages whose versions can change results (printed in the test run's header).
VERSIONED = ("numpy", "scipy", "networkx", "simpy", "pydantic", "PyYAML", "torch", "matplotlib")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Print :func:`version_lines` first, also under ``-q`` (which hides report headers)."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        for line in version_lines():
            reporter.write_line(line)


def version_lines() -> list[str]:
    """Python, the numerical packages, the BLAS build and thread settings of this run."""
    versions = []
    for name in VERSIONED:
        try:
            versions.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{name} -")
    blas = "unknown"
    try:
        import numpy as np

        info = np.show_config(mode="dicts")["Build Dependencies"]["blas"]  # type: ignore[index]
        blas = f"{info.get('name')} {info.get('version')}"
    except Exception:  # numpy's config layout differs between versions: informative only
        pass
    threads = {v: os.environ.get(v, "-") for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    return [
        f"clustersim versions: Python {platform.python_version()} ({platform.machine()}, "
        f"{os.cpu_count()} CPUs), " + ", ".join(versions),
        f"BLAS: {blas}; " + ", ".join(f"{k}={v}" for k, v in threads.items()),
    ]


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
