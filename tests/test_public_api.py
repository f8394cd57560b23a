"""The public API is pinned, and the simulator never imports torch."""

from __future__ import annotations

import subprocess
import sys

import sim

PINNED = [
    "CalibrationError", "ClusterSimError", "CollectiveResult", "CollectiveSetup", "ConfigError", "Profile",
    "Scenario", "StepResult", "Topology", "TopologyError", "load_profile", "load_scenario", "load_topology",
    "preset_names", "scenario_names", "simulate_collective", "simulate_step", "sweep_sizes",
]  # fmt: skip


def test_all_is_pinned() -> None:
    assert sorted(sim.__all__) == sorted(PINNED)
    assert all(hasattr(sim, name) for name in sim.__all__)


def test_simulating_never_imports_torch() -> None:
    """Layering: sim/ runs a whole study without torch being imported."""
    code = (
        "import sys, sim\n"
        "r = sim.simulate_step(sim.load_scenario('llama3-8b-dgx'), network='analytical')\n"
        "s = sim.CollectiveSetup(sim.load_topology('dgx-h100'))\n"
        "sim.simulate_collective(s, 'all_reduce', 2**20)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert p.returncode == 0, p.stderr
