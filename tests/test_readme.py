"""The README's Quick start cannot rot: its commands are the ones CI and this test run."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

from tests.helpers import REPO


def quickstart_blocks() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(?:bash|sh|shell)\n(.*?)```", section, flags=re.S)


def test_quickstart_has_exactly_two_shell_blocks() -> None:
    assert len(quickstart_blocks()) == 2


def test_ci_runs_the_readme_test_block() -> None:
    """.ci/run installs what block 2 installs and runs the same pytest."""
    block = quickstart_blocks()[1]
    ci = (REPO / ".ci" / "run").read_text()
    assert "torch==2.13.0" in block and "torch==2.13.0" in ci
    assert ".[test,calibrate]" in block and ".[test,calibrate]" in ci
    assert "pytest" in block and "pytest" in ci


def test_main_job_runs() -> None:
    """Block 1's clustersim command (the install part is what CI already did)."""
    block = quickstart_blocks()[0].strip()
    cmd = block.split("&&", 1)[1].strip()
    argv = shlex.split(cmd)
    assert argv[0] == "clustersim"
    p = subprocess.run(
        [sys.executable, "-m", "sim.cli", *argv[1:]],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr
    rows = [line for line in p.stdout.splitlines() if line.strip() and not line.startswith("#")]
    assert rows, p.stdout


def test_readme_topology_example_loads(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Every YAML block in the README is a valid topology file (except the scenario sections
    of "Beyond the step", which tests/test_run_layers.py checks against the shipped preset)."""
    from sim.topology.presets import load_topology

    text = (REPO / "README.md").read_text()
    head, _, rest = text.partition("## Beyond the step")
    text = head + (rest.split("\n## ", 1)[1] if rest else "")
    blocks = re.findall(r"```yaml\n(.*?)```", text, flags=re.S)
    assert blocks
    for i, block in enumerate(blocks):
        f = tmp_path / f"example{i}.yaml"
        f.write_text(block)
        topo = load_topology(str(f))
        assert topo.num_gpus > 0
