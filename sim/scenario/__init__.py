"""Scenario files: the study as data (model, cluster, parallel plan, training settings, knobs).

The file format and its validation live here: :mod:`.load` (read, ``--set`` overrides,
validate into a frozen :class:`Scenario`), :mod:`.models` (the sections' pydantic models),
:mod:`.readers` (caps, choices, values with their own syntax), :mod:`.sections` (the
sections as frozen dataclasses) and :mod:`.layer_list` (scenarios whose model is a layer
list, such as a CNN preset). The opt-in sections of the layers over a step are parsed by
the packages that own them (:mod:`sim.variability.config`, :mod:`sim.reliability.config`,
:mod:`sim.cost.config`). This package sits under the training step, which reads scenarios,
and over the workload description and the owners of the opt-in sections.
"""

from __future__ import annotations

from sim.scenario.layer_list import (
    LayerScenario,
    any_scenario_from_dict,
    is_layer_model,
    load_any_scenario,
)
from sim.scenario.load import (
    Scenario,
    apply_overrides,
    load_scenario,
    read_raw,
    resolve_plan,
    scenario_from_dict,
    scenario_names,
)

__all__ = [
    "LayerScenario",
    "Scenario",
    "any_scenario_from_dict",
    "apply_overrides",
    "is_layer_model",
    "load_any_scenario",
    "load_scenario",
    "read_raw",
    "resolve_plan",
    "scenario_from_dict",
    "scenario_names",
]
