"""Scenarios whose model is a layer list (a CNN preset or the user's ``layer_list``).

The cluster, parallel, training and price sections are validated by the transformer
scenario's own readers (:func:`sim.scenario.load.scenario_from_dict`, given a
stand-in model), so every key means the same thing; the model section and the
precisions a layer list may use (``fp32``, ``fp16``, ``bf16``) are checked here.
``training.seq_len`` is always 1 for a layer list (a sample is one image), whatever the
file says, so that ``tokens_per_s`` counts samples and a sweep may switch ``model.preset``
between a transformer and a CNN.

:func:`load_any_scenario` and :func:`any_scenario_from_dict` are the front door for both
kinds: they return a :class:`~sim.scenario.load.Scenario` for a transformer and a
:class:`LayerScenario` for a layer list.

>>> s = any_scenario_from_dict({"model": {"preset": "resnet50"}, "cluster": {"topology": "dgx-h100"},
...     "training": {"global_batch": 256, "precision": "fp32"}})
>>> type(s).__name__, s.model.name, s.training.seq_len
('LayerScenario', 'resnet50', 1)
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.cost.config import EnergyConfig
from sim.errors import ConfigError
from sim.reliability.config import ReliabilityConfig, SpotConfig
from sim.scenario.load import (
    ClusterSection,
    ParallelSection,
    PriceSection,
    Scenario,
    TrainingSection,
    apply_overrides,
    read_raw,
    scenario_from_dict,
)
from sim.variability.config import VariabilityConfig
from sim.workload.cnn import CNN_PRESETS, cnn_preset
from sim.workload.layer_model import LayerModel, read_layer_list

__all__ = [
    "LAYER_PRECISIONS",
    "LayerScenario",
    "any_scenario_from_dict",
    "is_layer_model",
    "load_any_scenario",
]

LAYER_PRECISIONS = ("fp32", "fp16", "bf16")
_STAND_IN = {"layers": 1, "hidden": 8, "heads": 1, "vocab": 8}


@dataclass(frozen=True)
class LayerScenario:
    """A validated study of a layer-list model (same sections as :class:`Scenario`)."""

    name: str
    model: LayerModel
    cluster: ClusterSection
    parallel: ParallelSection
    training: TrainingSection
    price: PriceSection
    network: str = "flow"
    profile: str | None = None
    force_profile: bool = False
    seed: int = 0
    variability: VariabilityConfig | None = None
    reliability: ReliabilityConfig | None = None
    spot: SpotConfig | None = None
    energy: EnergyConfig | None = None


def is_layer_model(raw: Mapping[str, Any]) -> bool:
    """Whether a parsed scenario's model is a layer list (or a CNN preset)."""
    model = raw.get("model")
    if not isinstance(model, Mapping):
        return False
    return "layer_list" in model or model.get("preset") in CNN_PRESETS


def _layer_model(section: Mapping[str, Any], folder: Path | None) -> LayerModel:
    unknown = sorted(set(section) - {"preset", "layer_list"})
    if unknown:
        raise ConfigError(
            f"model.{unknown[0]}: unknown key for a layer-list model; allowed: preset, layer_list"
        )
    if "layer_list" in section and "preset" in section:
        raise ConfigError("model: give model.preset or model.layer_list, not both")
    if "layer_list" in section:
        return read_layer_list(section["layer_list"], folder)
    return cnn_preset(str(section["preset"]))


def _layer_scenario(raw: Mapping[str, Any], name: str, folder: Path | None) -> LayerScenario:
    data = copy.deepcopy(dict(raw))
    model = _layer_model(data["model"], folder)
    training = dict(data.get("training") or {})
    precision = training.get("precision", "fp32")
    if precision not in LAYER_PRECISIONS:
        raise ConfigError(
            f"training.precision: {precision!r} is not one of {', '.join(LAYER_PRECISIONS)} "
            "(layer-list models)"
        )
    training["seq_len"] = 1
    training["precision"] = "bf16"  # checked above; the transformer reader knows bf16 and fp8
    data.update(model=dict(_STAND_IN), training=training)
    checked = scenario_from_dict(data, name, convolutions=True)
    _no_techniques(checked.training)
    return LayerScenario(
        name=name,
        model=model,
        cluster=checked.cluster,
        parallel=checked.parallel,
        training=dataclasses.replace(checked.training, precision=str(precision)),
        price=checked.price,
        network=checked.network,
        profile=checked.profile,
        force_profile=checked.force_profile,
        seed=checked.seed,
        variability=checked.variability,
        reliability=checked.reliability,
        spot=checked.spot,
        energy=checked.energy,
    )


def _no_techniques(training: TrainingSection) -> None:
    """Layer-list models train full-parameter AdamW on the GPU: refuse the other settings."""
    default = TrainingSection(training.global_batch, training.seq_len)
    for key in ("optimizer", "momentum", "finetune", "lora_rank", "lora_targets", "offload",
                "offload_overlap", "cpu_adam_rate", "nvme_bandwidth"):  # fmt: skip
        if getattr(training, key) != getattr(default, key):
            raise ConfigError(
                f"training.{key}: not modelled for layer-list models (full-parameter AdamW "
                "on the GPU); remove it or use a transformer model"
            )


def any_scenario_from_dict(
    raw: Mapping[str, Any], name: str = "scenario", folder: Path | None = None
) -> Scenario | LayerScenario:
    """Validate a parsed scenario of either kind (``folder``: where relative files are)."""
    if is_layer_model(raw):
        return _layer_scenario(raw, name, folder)
    return scenario_from_dict(raw, name)


def load_any_scenario(source: str | Path, sets: Sequence[str] = ()) -> Scenario | LayerScenario:
    """Load a scenario of either kind by preset name or path, with ``--set`` overrides."""
    raw, name = read_raw(source)
    path = Path(source)
    folder = path.parent if path.is_file() else None
    return any_scenario_from_dict(apply_overrides(raw, sets), name, folder)
