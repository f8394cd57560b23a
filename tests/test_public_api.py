"""The public API is pinned, and the simulator never imports torch."""

from __future__ import annotations

import subprocess
import sys

import sim

PINNED = [
    "CalibrationError", "ClusterSimError", "CollectiveResult", "CollectiveSetup", "ConfigError", "Profile",
    "Scenario", "StepResult", "Topology", "TopologyError", "load_profile", "load_scenario", "load_topology",
    "preset_names", "results_frame", "scenario_names", "simulate_collective", "simulate_step", "sweep_sizes",
]  # fmt: skip


def test_all_is_pinned() -> None:
    assert sorted(sim.__all__) == sorted(PINNED)
    assert all(hasattr(sim, name) for name in sim.__all__)


# A whole study through the public API, run in a fresh interpreter by the layering tests.
STUDY = (
    "import sys, sim\n"
    "r = sim.simulate_step(sim.load_scenario('llama3-8b-dgx'), network='analytical')\n"
    "s = sim.CollectiveSetup(sim.load_topology('dgx-h100'))\n"
    "sim.simulate_collective(s, 'all_reduce', 2**20)\n"
)


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)


def test_simulating_never_imports_torch() -> None:
    """Layering: sim/ runs a whole study without torch being imported."""
    p = run_python(STUDY + "assert 'torch' not in sys.modules, 'torch was imported'\n")
    assert p.returncode == 0, p.stderr


def test_simulating_never_imports_calibrate() -> None:
    """Layering: the simulator and its own subcommands run without ``calibrate`` imported.

    ``clustersim calibrate`` reaches ``sim.cli`` through an entry point, so running the
    built-in commands must not load it either.
    """
    code = STUDY + (
        "from sim.cli import main\n"
        "assert main(['run', 'gpt2-1gpu', '--network', 'analytical', '--json']) == 0\n"
        "assert main(['collective', '--topology', 'dgx-h100', '-b', '1M', '-e', '1M']) == 0\n"
        "loaded = sorted(m for m in sys.modules if m == 'calibrate' or m.startswith('calibrate.'))\n"
        "assert not loaded, f'calibrate was imported: {loaded}'\n"
    )
    p = run_python(code)
    assert p.returncode == 0, p.stderr


def test_no_sim_module_imports_calibrate() -> None:
    """No import statement under sim/ names ``calibrate`` (the dependency runs one way)."""
    import ast
    from pathlib import Path

    offenders = []
    for path in sorted(Path(sim.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            if any(n == "calibrate" or n.startswith("calibrate.") for n in names):
                offenders.append(f"{path.name}:{node.lineno}")
    assert not offenders, offenders
