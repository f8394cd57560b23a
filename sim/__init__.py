"""clustersim: a discrete-event simulator of multi-GPU training clusters.

The public API, in the order a study uses it::

    from sim import load_topology, CollectiveSetup, simulate_collective
    from sim import load_scenario, simulate_step, load_profile

Names are imported on first use (PEP 562), so ``import sim`` and the command line's
``--help`` do not load numpy, scipy and networkx until something needs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sim.lazy import lazy_attr
from sim.version import __version__ as __version__

if TYPE_CHECKING:
    from sim.collectives.simulate import (
        CollectiveResult,
        CollectiveSetup,
        simulate_collective,
        sweep_sizes,
    )
    from sim.errors import CalibrationError, ClusterSimError, ConfigError, TopologyError
    from sim.profile import Profile, load_profile
    from sim.result import StepResult
    from sim.scenario.load import Scenario, load_scenario, scenario_names
    from sim.studies.frame import results_frame
    from sim.topology.model import Topology
    from sim.topology.presets import load_topology, preset_names
    from sim.training.step import simulate_step


_HOMES = {
    "sim.collectives.simulate": (
        "CollectiveResult",
        "CollectiveSetup",
        "simulate_collective",
        "sweep_sizes",
    ),
    "sim.errors": ("CalibrationError", "ClusterSimError", "ConfigError", "TopologyError"),
    "sim.profile": ("Profile", "load_profile"),
    "sim.studies.frame": ("results_frame",),
    "sim.topology.model": ("Topology",),
    "sim.topology.presets": ("load_topology", "preset_names"),
    "sim.result": ("StepResult",),
    "sim.scenario.load": ("Scenario", "load_scenario", "scenario_names"),
    "sim.training.step": ("simulate_step",),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "CalibrationError",
    "ClusterSimError",
    "CollectiveResult",
    "CollectiveSetup",
    "ConfigError",
    "Profile",
    "Scenario",
    "StepResult",
    "Topology",
    "TopologyError",
    "load_profile",
    "load_scenario",
    "load_topology",
    "preset_names",
    "results_frame",
    "scenario_names",
    "simulate_collective",
    "simulate_step",
    "sweep_sizes",
]


def __getattr__(name: str) -> Any:
    """Import a public name from its home module on first access, then keep it here."""
    return lazy_attr("sim", name, _HOME_OF, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
