"""JSON Schemas of the files users write: scenarios, topologies and calibration profiles.

Generated from the same definitions the loaders use (the scenario's section models of
:mod:`sim.scenario.models`, the topology's and the profile's pydantic models), so an editor with
the YAML language server validates a file as ``clustersim`` will. Shipped copies live
beside this module (``scenario.schema.json`` ...); shipped YAML files point at them with a
``# yaml-language-server: $schema=...`` first line, and a test keeps copies and generator
equal. ``clustersim schema KIND`` prints one.

The schemas check structure and types (unknown keys, strings where numbers belong);
cross-field rules (TP x PP x DP = GPUs, divisibility, known preset names) stay with the
loaders, which name the bad key in one line.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

__all__ = ["KINDS", "SCHEMA_COMMENT", "schema", "schema_text", "shipped_schema_text"]

KINDS = ("scenario", "topology", "profile")
#: First line of a shipped YAML file of ``kind`` that lives ``depth`` folders below the root.
SCHEMA_COMMENT = "# yaml-language-server: $schema={up}sim/schemas/{kind}.schema.json"

_FSDP = ["FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2", "NO_SHARD"]
_BYTES = {"anyOf": [{"type": "number", "exclusiveMinimum": 0}, {"type": "string"}]}
#: A token budget: YAML 1.1 reads ``15.6e12`` (no exponent sign) as a string.
_TOKENS = {"anyOf": [{"type": "number", "exclusiveMinimum": 0},
                     {"type": "string", "pattern": r"^[0-9_]*\.?[0-9_]+([eE][+-]?[0-9]+)?$"},
                     {"type": "null"}]}  # fmt: skip


def _model_section(model: Any) -> dict[str, Any]:
    """A pydantic section model's schema, without the generated titles."""
    out = model.model_json_schema()
    out.pop("title", None)
    for prop in out.get("properties", {}).values():
        prop.pop("title", None)
    return dict(out)


def _choices(values: tuple[str, ...] | list[str]) -> dict[str, Any]:
    return {"type": "string", "enum": list(values)}


def _technique_keys() -> dict[str, Any]:
    """``training`` keys of LoRA/QLoRA and offload read by their own parsers."""
    from sim.workload import trainable as t

    names = {"type": "array", "items": _choices(t.ADAPTER_NAMES)}
    return {"lora_targets": {"anyOf": [{"type": "string"}, names]}, "nvme_bandwidth": _BYTES}


def _core(name: str, **special: Any) -> dict[str, Any]:
    """A core section's schema from its pydantic model (:mod:`sim.scenario.models`):
    choices as enums; ``special`` replaces the keys read by their own parsers."""
    from sim.scenario.models import SECTION_MODELS
    from sim.scenario.readers import CHOICES

    out = _model_section(SECTION_MODELS[name])
    props = out["properties"]
    for key in props:
        if key in CHOICES:
            props[key] = {**_choices(CHOICES[key]), "default": props[key].get("default")}
    props.update(special)
    return out


def _scenario() -> dict[str, Any]:
    from sim.scenario.load import OPT_IN_MODELS

    model = _core(
        "model", layer_list={"type": "array", "description": "layers of a layer-list (CNN) model"}
    )
    model["properties"]["preset"]["description"] = "a model preset (clustersim run --help)"
    par = _core(
        "parallel",
        zero={"anyOf": [{"type": "integer", "minimum": 0, "maximum": 3}, _choices(_FSDP)]},
        bucket_bytes=_BYTES, nccl_algo={"type": "string"}, nccl_proto={"type": "string"},
        placement={"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
    )  # fmt: skip
    train = _core("training", tokens=_TOKENS, **_technique_keys())
    scalars = _core("")["properties"]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "clustersim scenario",
        "type": "object",
        "properties": {
            "model": model,
            "cluster": _core("cluster"),
            "parallel": par,
            "training": train,
            "price": _core("price"),
            "variability": _variability(),
            "framework": _framework(),
            **scalars,
            **{name: _model_section(model) for name, model in OPT_IN_MODELS.items()},
        },
        "required": ["model", "cluster", "training"],
        "additionalProperties": False,
    }


def _framework() -> dict[str, Any]:
    """The ``framework`` section: behaviour overrides of ``training.framework``'s preset
    (:mod:`sim.workload.framework_section`), every key optional."""
    from sim.workload.framework_section import FrameworkKeys

    out = _model_section(FrameworkKeys)
    out["properties"].pop("framework", None)
    out["description"] = "behaviours overriding the preset named by training.framework"
    return out


def _variability() -> dict[str, Any]:
    """The ``variability`` section (pydantic model), without titles or the class docstring."""
    from sim.variability.config import VariabilityConfig

    out = VariabilityConfig.model_json_schema()
    props = {k: {kk: vv for kk, vv in v.items() if kk != "title"}
             for k, v in out["properties"].items()}  # fmt: skip
    return {"type": "object", "properties": props, "additionalProperties": False}


def _topology() -> dict[str, Any]:
    from sim.topology.spec import TopologySpec

    out = TopologySpec.model_json_schema()
    out["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    out["title"] = "clustersim topology"
    return out


def _profile() -> dict[str, Any]:
    """The profile's pydantic model (``sim.profile_models``), with a title."""
    from sim.profile_models import ProfileModel

    out = ProfileModel.model_json_schema(by_alias=True)
    out["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    out["title"] = "clustersim calibration profile"
    return out


def schema(kind: str) -> dict[str, Any]:
    """The JSON Schema of a ``kind`` file (one of :data:`KINDS`).

    >>> schema("scenario")["properties"]["parallel"]["properties"]["tp"]
    {'default': 1, 'maximum': 131072, 'minimum': 1, 'type': 'integer'}
    """
    from sim.errors import ConfigError

    makers = {"scenario": _scenario, "topology": _topology, "profile": _profile}
    if kind not in makers:
        raise ConfigError(f"schema {kind!r} is unknown; allowed: {', '.join(KINDS)}")
    return makers[kind]()


def schema_text(kind: str) -> str:
    """:func:`schema` as the text of a shipped ``.schema.json`` file."""
    return json.dumps(schema(kind), indent=1, sort_keys=True) + "\n"


def shipped_schema_text(kind: str) -> str:
    """The shipped copy of the ``kind`` schema (package data)."""
    return resources.files("sim.schemas").joinpath(f"{kind}.schema.json").read_text("utf-8")
