"""The data-parallel step of a layer-list model (CNN presets, users' own layer lists).

:func:`simulate_any` simulates a scenario of either kind (transformer or layer list), so the
commands and the studies take both; the scenarios themselves are read by
:func:`sim.scenario.load_any_scenario`.
"""

from __future__ import annotations

from sim.result import StepResult
from sim.scenario.layer_list import LayerScenario
from sim.scenario.load import Scenario
from sim.training.layers.step import simulate_layer_step

__all__ = ["simulate_any", "simulate_layer_step"]


def simulate_any(
    scenario: Scenario | LayerScenario,
    network: str | None = None,
    *,
    profile: str | None = None,
    force_profile: bool = False,
) -> StepResult:
    """One training step of either kind of scenario (see :func:`sim.simulate_step`); the
    profile is resolved the same way for both (:func:`sim.training.setup.prepare_step`)."""
    if isinstance(scenario, LayerScenario):
        return simulate_layer_step(scenario, network, profile=profile, force_profile=force_profile)
    from sim.training.step import simulate_step

    return simulate_step(scenario, network, profile=profile, force_profile=force_profile)
