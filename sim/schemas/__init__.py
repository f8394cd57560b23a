"""JSON Schemas of the files users write: scenarios, topologies and calibration profiles.

Generated from the same definitions the loaders use (the scenario's section dataclasses
and readers, the topology's and the profile's pydantic models), so an editor with
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
from dataclasses import fields
from importlib import resources
from typing import Any

from pydantic import TypeAdapter

__all__ = ["KINDS", "SCHEMA_COMMENT", "schema", "schema_text", "shipped_schema_text"]

KINDS = ("scenario", "topology", "profile")
#: First line of a shipped YAML file of ``kind`` that lives ``depth`` folders below the root.
SCHEMA_COMMENT = "# yaml-language-server: $schema={up}sim/schemas/{kind}.schema.json"

_COUNT = {"type": "integer", "minimum": 1}
_FSDP = ["FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2", "NO_SHARD"]
_BYTES = {"anyOf": [{"type": "number", "exclusiveMinimum": 0}, {"type": "string"}]}
_NULLABLE_COUNT = {"anyOf": [_COUNT, {"type": "null"}]}
#: A token budget: YAML 1.1 reads ``15.6e12`` (no exponent sign) as a string.
_TOKENS = {"anyOf": [{"type": "number", "exclusiveMinimum": 0},
                     {"type": "string", "pattern": r"^[0-9_]*\.?[0-9_]+([eE][+-]?[0-9]+)?$"},
                     {"type": "null"}]}  # fmt: skip


def _section(cls: type, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """Properties of a section dataclass, every key optional, no others allowed."""
    props = TypeAdapter(cls).json_schema().get("properties", {})
    keep = {f.name for f in fields(cls)} - set(skip)
    out = {k: {kk: vv for kk, vv in v.items() if kk != "title"} for k, v in props.items()
           if k in keep}  # fmt: skip
    return {"type": "object", "properties": out, "additionalProperties": False}


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
    """``training`` keys of the optimizer, LoRA/QLoRA and offload techniques."""
    from sim.training.workload import trainable as t

    names = {"type": "array", "items": _choices(t.ADAPTER_NAMES)}
    return {
        "optimizer": _choices(t.OPTIMIZERS), "finetune": _choices(t.FINETUNES),
        "offload": _choices(t.OFFLOADS), "lora_rank": _COUNT,
        "lora_targets": {"anyOf": [{"type": "string"}, names]},
        "cpu_adam_rate": {"type": "number", "exclusiveMinimum": 0},
        "nvme_bandwidth": _BYTES,
    }  # fmt: skip


def _scenario() -> dict[str, Any]:
    from sim.training.scenario import ClusterSection, ParallelSection, PriceSection, TrainingSection
    from sim.training.scenario_layers import LAYER_MODELS
    from sim.training.scenario_readers import GRAD_DTYPES, PRECISIONS
    from sim.training.workload.models import ModelSpec
    from sim.training.workload.techniques import COMPRESSIONS, DP_MODES

    model = _section(ModelSpec, skip=("name",))
    model["properties"].update(
        preset={"type": "string", "description": "a model preset (clustersim run --help)"},
        layer_list={"type": "array", "description": "layers of a layer-list (CNN) model"},
        dropout={"type": "number", "minimum": 0, "maximum": 1},
    )
    for key in ("layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab", "experts",
                "top_k", "max_seq"):  # fmt: skip
        model["properties"][key] = _COUNT
    par = _section(ParallelSection, skip=("fsdp",))
    par["properties"].update(
        {k: _COUNT for k in ("tp", "pp", "ep", "micro_batch", "virtual_stages")},
        dp=_NULLABLE_COUNT, shard_size=_NULLABLE_COUNT,
        cp=_COUNT,  # context parallelism (sim.training.workload.context)
        zero={"anyOf": [{"type": "integer", "minimum": 0, "maximum": 3}, _choices(_FSDP)]},
        schedule=_choices(("gpipe", "1f1b", "interleaved")),
        recompute=_choices(("none", "selective", "full")),
        bucket_bytes=_BYTES,
        placement={"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
        first_stage_layers={"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]},
        last_stage_layers={"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]},
        batch_split=_choices(("equal", "proportional")),
        stage_split=_choices(("equal", "speed")),
        grad_compression=_choices(COMPRESSIONS), dp_mode=_choices(DP_MODES),
        topk_ratio={"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        powersgd_rank=_COUNT, sync_every=_COUNT, ps_servers=_NULLABLE_COUNT,
        staleness={"type": "integer", "minimum": 0},
    )  # fmt: skip
    train = _section(TrainingSection)
    train["properties"].update(
        global_batch=_COUNT, seq_len=_COUNT, precision=_choices(PRECISIONS),
        grad_dtype=_choices(tuple(GRAD_DTYPES)), cross_entropy=_choices(("fp32", "fused")),
        **_technique_keys(),
        tokens=_TOKENS,
    )  # fmt: skip
    train["required"] = ["global_batch"]
    cluster = _section(ClusterSection)
    cluster["properties"]["nodes"] = _NULLABLE_COUNT
    cluster["required"] = ["topology"]
    price = _section(PriceSection)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "clustersim scenario",
        "type": "object",
        "properties": {
            "model": model,
            "cluster": cluster,
            "parallel": par,
            "training": train,
            "price": price,
            "variability": _variability(),
            "network": _choices(("flow", "analytical")),
            "profile": {"type": ["string", "null"]},
            "seed": {"type": "integer", "minimum": 0},
            **{name: _model_section(model) for name, model in LAYER_MODELS.items()},
        },
        "required": ["model", "cluster", "training"],
        "additionalProperties": False,
    }


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
    {'type': 'integer', 'minimum': 1}
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
