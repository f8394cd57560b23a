"""The command's process settings (sim.cli.runtime): the C heap pad and one BLAS thread,
set by ``clustersim`` and not by the Python API."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from sim.cli import runtime


def _python(code: str, **env: str) -> str:
    """stdout of ``python -c code`` with OPENBLAS_NUM_THREADS unset (plus ``env``)."""
    base = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**base, **env}, check=True)  # fmt: skip
    return out.stdout.strip()


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
def test_numpy_loads_with_one_blas_thread_and_the_environment_is_kept() -> None:
    """After settle(), the process runs one thread (OpenBLAS started no helper) and the
    environment has no OPENBLAS_NUM_THREADS; a value the user set is used as given."""
    code = ("import os; from sim.cli.runtime import settle; settle(); "
            "print(len(os.listdir('/proc/self/task')), "
            "os.environ.get('OPENBLAS_NUM_THREADS', 'unset'))")  # fmt: skip
    assert _python(code) == "1 unset"
    assert _python(code, OPENBLAS_NUM_THREADS="2").split()[1] == "2"


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_the_heap_pad_is_set_on_glibc() -> None:
    """glibc accepts the pad (mallopt returns 1)."""
    assert runtime.keep_heap() is True


def test_the_api_leaves_the_process_alone() -> None:
    """Importing the simulator and simulating sets nothing: only the command does."""
    code = (
        "import os; from sim.scenario.load import load_scenario; "
        "from sim.training.step import simulate_step; "
        "simulate_step(load_scenario('gpt2-1gpu'), network='analytical'); "
        "print(os.environ.get('OPENBLAS_NUM_THREADS', 'unset'))"
    )
    assert _python(code) == "unset"


@pytest.mark.parametrize(
    ("argv", "padded"),
    [(["calibrate", "compute", "--device", "cpu"], False),
     (["calibrate", "step", "--device", "cpu"], False),
     (["calibrate", "collectives", "--backend", "gloo", "--local", "2"], False),
     (["calibrate", "import-nccl-tests", "missing.log"], True),
     (["run", "missing.yaml"], True)],
)  # fmt: skip
def test_commands_that_time_kernels_keep_the_c_heap_as_a_training_job_has_it(
    argv: list[str], padded: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The heap pad changes how torch's temporaries are placed (``calibrate compute`` timed
    AdamW 3x slow under it), so the commands that time real kernels leave it unset; the
    others set it. Each command here stops after the settings are made (its ``--out``
    exists, or its input is missing), before it measures anything."""
    from sim.cli import main

    calls: list[str] = []
    monkeypatch.setattr(runtime, "keep_heap", lambda: calls.append("heap") or True)
    monkeypatch.setattr(runtime, "one_blas_thread", lambda: calls.append("blas"))
    (tmp_path / "m.json").write_text("{}")
    out = ["--out", str(tmp_path / "m.json")] if argv[0] == "calibrate" else []
    monkeypatch.chdir(tmp_path)
    assert main([*argv, *out]) == 2
    assert calls == (["heap", "blas"] if padded else ["blas"])  # settled either way
