"""Models given as layer lists (CNN presets, users' own) and their data-parallel step.

:func:`load_any_scenario` / :func:`any_scenario_from_dict` read a scenario of either kind
(transformer or layer list) and :func:`simulate_any` simulates it, so the commands and
the studies take both.
"""

from __future__ import annotations

from sim.training.layers.cnn import CNN_PRESETS, cnn_preset
from sim.training.layers.model import Layer, LayerModel, layer_model_from_list
from sim.training.layers.scenario import (
    LayerScenario,
    any_scenario_from_dict,
    is_layer_model,
    load_any_scenario,
)
from sim.training.layers.step import simulate_layer_step
from sim.training.result import StepResult
from sim.training.scenario import Scenario

__all__ = [
    "CNN_PRESETS",
    "Layer",
    "LayerModel",
    "LayerScenario",
    "any_scenario_from_dict",
    "cnn_preset",
    "is_layer_model",
    "layer_model_from_list",
    "load_any_scenario",
    "simulate_any",
    "simulate_layer_step",
]


def simulate_any(scenario: Scenario | LayerScenario, network: str | None = None) -> StepResult:
    """One training step of either kind of scenario (see :func:`sim.simulate_step`)."""
    if isinstance(scenario, LayerScenario):
        return simulate_layer_step(scenario, network)
    from sim.training.step import simulate_step

    return simulate_step(scenario, network)
