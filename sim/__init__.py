"""clustersim: a discrete-event simulator of multi-GPU training clusters.

The public API, in the order a study uses it::

    from sim import load_topology, CollectiveSetup, simulate_collective
    from sim import load_scenario, simulate_step, load_profile
"""

from sim.collectives.simulate import (
    CollectiveResult,
    CollectiveSetup,
    simulate_collective,
    sweep_sizes,
)
from sim.errors import CalibrationError, ClusterSimError, ConfigError, TopologyError
from sim.profile import Profile, load_profile
from sim.topology.model import Topology
from sim.topology.presets import load_topology, preset_names
from sim.training.result import StepResult
from sim.training.scenario import Scenario, load_scenario, scenario_names
from sim.training.step import simulate_step

__version__ = "0.1.0"

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
    "scenario_names",
    "simulate_collective",
    "simulate_step",
    "sweep_sizes",
]
