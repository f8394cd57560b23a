"""Scenario files: load, override with ``--set``, validate into a frozen :class:`Scenario`.

A scenario is YAML with the sections ``model``, ``cluster``, ``parallel``, ``training``,
``price``, the optional ``variability`` (:mod:`sim.variability.config`) and the scalars
``network``, ``profile``, ``seed``; the optional ``reliability``, ``spot`` and ``energy``
sections feed the layers over the step and are read by the packages that own them
(:mod:`sim.reliability.config`, :mod:`sim.cost.config`, :mod:`sim.variability.config`). Every section
is validated by a strict pydantic model (:mod:`sim.scenario.models`); unknown keys
and bad values are rejected in one line naming their place (``parallel.foo``). Presets ship in the ``scenarios`` package
and are found by name; anything else is read as a path.

>>> raw = {"model": {"preset": "gpt2-124m"}, "cluster": {"topology": "single-h100"},
...        "training": {"global_batch": 8, "seq_len": 1024}}
>>> s = scenario_from_dict(apply_overrides(raw, ["parallel.micro_batch=4"]))
>>> s.parallel.micro_batch, resolve_plan(s, 1, 1).num_microbatches
(4, 2)
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.resources
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from sim.cost.config import EnergyConfig, read_energy
from sim.cost.prices import check_price
from sim.errors import ConfigError
from sim.files import load_shipped_yaml, load_yaml, read_text
from sim.reliability.config import ReliabilityConfig, SpotConfig, read_reliability, read_spot
from sim.scenario.models import SECTION_MODELS, read_section
from sim.scenario.readers import GRAD_DTYPES, PRECISIONS, check_seq_len
from sim.scenario.sections import (
    NETWORKS,
    ClusterSection,
    ParallelSection,
    PriceSection,
    Scenario,
    TrainingSection,
)
from sim.variability.config import VariabilityConfig, read_variability
from sim.workload.context import check_context
from sim.workload.framework_section import framework_semantics
from sim.workload.frameworks import (
    BEHAVIOURS,
    FRAMEWORKS,
    Semantics,
    grad_bucket_bytes,
    overlaps_grad_reduce,
)
from sim.workload.models import ModelSpec, model_preset
from sim.workload.plan import DEFAULT_BUCKET_BYTES, ParallelPlan
from sim.workload.plan_checks import validate_plan
from sim.workload.zero import FSDP_STRATEGIES

__all__ = [
    "GRAD_DTYPES",
    "NETWORKS",
    "PRECISIONS",
    "SECTION_KEYS",
    "TOP_KEYS",
    "ClusterSection",
    "ParallelSection",
    "PriceSection",
    "Scenario",
    "TrainingSection",
    "apply_overrides",
    "load_scenario",
    "read_raw",
    "resolve_plan",
    "scenario_from_dict",
    "scenario_names",
]


#: The opt-in sections, each validated by the package that owns it (its pydantic model).
OPT_IN_MODELS: dict[str, type[BaseModel]] = {
    "variability": VariabilityConfig,
    "reliability": ReliabilityConfig,
    "spot": SpotConfig,
    "energy": EnergyConfig,
}
SECTION_KEYS: dict[str, tuple[str, ...]] = {
    **{name: tuple(model.model_fields) for name, model in SECTION_MODELS.items() if name},
    "framework": BEHAVIOURS,
    **{name: tuple(model.model_fields) for name, model in OPT_IN_MODELS.items()},
}
SCALARS = ("network", "profile", "force_profile", "seed")
TOP_KEYS = (*SECTION_KEYS, *SCALARS)


def _section(raw: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The keys given in section ``name``, validated by its pydantic model."""
    return read_section(name, raw.get(name))


def _model(raw: Mapping[str, Any]) -> ModelSpec:
    if not raw.get("model"):
        raise ConfigError("model: missing; give model.preset or model.layers, hidden, heads, vocab")
    data = _section(raw, "model")
    preset = data.pop("preset", None)
    if preset is not None:
        return dataclasses.replace(model_preset(preset), **data)
    for key in ("layers", "hidden", "heads", "vocab"):
        if key not in data:
            raise ConfigError(f"model.{key}: missing (needed when model.preset is not given)")
    data.setdefault("ffn_hidden", 4 * data["hidden"])
    data.setdefault("kv_heads", data["heads"])
    return ModelSpec(name="custom", **data)


def _require(data: Mapping[str, Any], place: str, key: str) -> None:
    if key not in data:
        raise ConfigError(f"{place}.{key}: missing")


def scenario_from_dict(raw: Mapping[str, Any], name: str = "scenario", *,
                       convolutions: bool = False) -> Scenario:  # fmt: skip
    """Validate a parsed scenario mapping into a :class:`Scenario`; ``convolutions``: the
    model is a layer list (:mod:`sim.scenario.layer_list`), which may name a
    ``training.conv_stack``."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{name}: a scenario must be a mapping of sections, got {raw!r}")
    for key in raw:
        if key not in TOP_KEYS:
            raise ConfigError(f"{key}: unknown top-level key; allowed: {', '.join(TOP_KEYS)}")
    cluster, training = _section(raw, "cluster"), _section(raw, "training")
    if "conv_stack" in training and not convolutions:
        raise ConfigError("training.conv_stack: only CNN (layer-list) models run convolutions; "
                          "remove it for a transformer")  # fmt: skip
    parallel = _section(raw, "parallel")
    framework = _framework(raw, training)
    if framework is not None:  # the framework's defaults where the scenario is silent
        parallel.setdefault("zero", framework.default_zero)
        parallel.setdefault("overlap_tp", framework.tp_comm_overlap)
        parallel.setdefault("overlap_dp", overlaps_grad_reduce(framework, parallel["zero"]))
        training.setdefault("grad_dtype", framework.grad_reduce_dtype)
        training.setdefault("cross_entropy", _CROSS_ENTROPY[framework.cross_entropy])
        training.setdefault("grad_accum_fusion", framework.grad_accum_fusion)
        training.setdefault("attention_kernel", framework.attention_kernel)
    _require(cluster, "cluster", "topology")
    _require(training, "training", "global_batch")
    _require(training, "training", "seq_len")
    scalars = read_section("", {k: raw[k] for k in SCALARS if k in raw})
    model = _model(raw)
    check_seq_len(model.max_seq, training["seq_len"], raw["model"])
    price = PriceSection(**_section(raw, "price"))
    check_price(price.gpu_hour_usd, price.preset)
    scenario = Scenario(
        name=name,
        model=model,
        cluster=ClusterSection(**cluster),
        parallel=ParallelSection(**parallel),
        training=TrainingSection(**training),
        price=price,
        **scalars,
        framework=framework,
        **_opt_in(raw),
    )
    scenario.training.techniques.check(scenario.model, scenario.training.precision)
    return scenario


#: The step's cross-entropy kernel for a framework's (its memory model tells ``upcast``,
#: torchtitan's fp32 upcast of the logits, from eager fp32: the same kernels).
_CROSS_ENTROPY = {"fp32": "fp32", "fused": "fused", "upcast": "fp32"}


def _framework(raw: Mapping[str, Any], training: Mapping[str, Any]) -> Semantics | None:
    """The framework preset ``training.framework`` with the ``framework:`` section's
    behaviour overrides (:mod:`sim.workload.framework_section`); None without one."""
    overrides = raw.get("framework") or {}
    if not isinstance(overrides, Mapping):
        raise ConfigError(f"framework: expected a mapping of behaviours, got {overrides!r}")
    name = training.get("framework")
    if name is None:
        if overrides:
            first = next(iter(overrides))
            raise ConfigError(
                f"framework.{first}: a framework behaviour needs training.framework "
                f"(one of {', '.join(FRAMEWORKS)})"
            )
        return None
    return framework_semantics(name, overrides, "framework")


def _opt_in(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The opt-in sections given in ``raw``, each read by its owner (absent: None)."""
    reliability = read_reliability(raw["reliability"]) if "reliability" in raw else None
    return {
        "variability": read_variability(raw["variability"]) if "variability" in raw else None,
        "reliability": reliability,
        "spot": read_spot(raw["spot"], reliability) if "spot" in raw else None,
        "energy": read_energy(raw["energy"]) if "energy" in raw else None,
    }


def apply_overrides(raw: Mapping[str, Any], sets: Sequence[str]) -> dict[str, Any]:
    """Apply ``--set section.key=value`` overrides (values parsed as YAML) to a copy.

    >>> apply_overrides({"parallel": {"tp": 8}}, ["parallel.tp=4", "seed=3"])
    {'parallel': {'tp': 4}, 'seed': 3}
    """
    out = copy.deepcopy(dict(raw))
    for item in sets:
        path, eq, text = item.partition("=")
        if not eq or not path:
            raise ConfigError(f"--set {item!r}: expected section.key=value, e.g. parallel.tp=4")
        value = load_yaml(text, f"--set {path}") if text.strip() else None
        _set(out, path.strip(), value)
    return out


def _set(raw: dict[str, Any], path: str, value: object) -> None:
    parts = path.split(".")
    if len(parts) == 1 and parts[0] in TOP_KEYS and parts[0] not in SECTION_KEYS:
        raw[parts[0]] = value
        return
    if len(parts) != 2 or parts[0] not in SECTION_KEYS:
        scalars = [k for k in TOP_KEYS if k not in SECTION_KEYS]
        raise ConfigError(
            f"--set {path}: unknown key; use section.key with a section among "
            f"{', '.join(SECTION_KEYS)}, or one of {', '.join(scalars)}"
        )
    section, key = parts
    if key not in SECTION_KEYS[section]:
        raise ConfigError(
            f"--set {path}: unknown key {key!r} in {section}; "
            f"allowed: {', '.join(SECTION_KEYS[section])}"
        )
    current = raw.get(section)
    if not isinstance(current, dict):
        current = raw[section] = {}
    current[key] = value


def scenario_names() -> list[str]:
    """Names of the scenario presets shipped in the ``scenarios`` package."""
    root = importlib.resources.files("scenarios")
    return sorted(p.name.rsplit(".", 1)[0] for p in root.iterdir() if p.name.endswith(".yaml"))


def read_raw(source: str | Path) -> tuple[dict[str, Any], str]:
    """Read a scenario preset (by name) or file (by path): (raw mapping, scenario name)."""
    text_source = str(source)
    path = Path(text_source)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.exists():  # a FIFO or a device is named as what it is by read_text
            raise ConfigError(f"scenario file not found: {text_source}")
        text, name = read_text(path, "scenario file"), path.stem
        raw = load_yaml(text, text_source)
    else:
        entry = importlib.resources.files("scenarios").joinpath(f"{text_source}.yaml")
        if not entry.is_file():
            raise ConfigError(
                f"scenario {text_source!r}: no such preset or file; presets: "
                f"{', '.join(scenario_names())}"
            )
        text, name = entry.read_text(encoding="utf-8"), text_source
        raw = load_shipped_yaml(text, text_source)
    if not isinstance(raw, dict):
        raise ConfigError(f"{text_source}: a scenario must be a mapping of sections")
    return raw, name


def load_scenario(source: str | Path, sets: Sequence[str] = ()) -> Scenario:
    """Load a scenario by preset name or path, apply ``--set`` overrides, validate.

    >>> load_scenario("llama2-70b-256-roce", ["parallel.tp=4"]).parallel.tp
    4
    """
    raw, name = read_raw(source)
    return scenario_from_dict(apply_overrides(raw, sets), name)


def resolve_plan(scenario: Scenario, num_gpus: int, gpus_per_node: int) -> ParallelPlan:
    """The validated :class:`ParallelPlan` of ``scenario`` on ``num_gpus`` GPUs.

    ``parallel.dp`` defaults to ``num_gpus / (tp * cp * pp)``.
    """
    par = scenario.parallel
    dp = par.dp
    if dp is None:
        if num_gpus % (par.tp * par.cp * par.pp):
            cp = f" x cp {par.cp}" if par.cp > 1 else ""
            raise ConfigError(
                f"parallel.tp x parallel.pp = {par.tp} x {par.pp}{cp} does not divide the "
                f"cluster's {num_gpus} GPUs, so parallel.dp cannot be derived"
            )
        dp = num_gpus // (par.tp * par.cp * par.pp)
    plan = ParallelPlan(
        tp=par.tp, pp=par.pp, dp=dp, ep=par.ep, sp=par.sp, zero=par.zero,
        micro_batch=par.micro_batch, global_batch=_plan_batch(scenario, dp),
        schedule=par.schedule, virtual_stages=par.virtual_stages, recompute=par.recompute,
        order=par.placement, gpus_per_node=gpus_per_node, overlap_tp=par.overlap_tp,
        overlap_dp=par.overlap_dp, bucket_bytes=_bucket_bytes(scenario, dp), fsdp=par.fsdp,
        shard_size=_shard_size(par, dp, gpus_per_node),
        grad_bytes=GRAD_DTYPES[scenario.training.grad_dtype],
        first_stage_layers=par.first_stage_layers, last_stage_layers=par.last_stage_layers,
        embedding_as_layer=par.embedding_as_layer, loss_as_layer=par.loss_as_layer, cp=par.cp,
        microbatch_group_size=par.microbatch_group_size,
    )  # fmt: skip
    check_context(plan, scenario.training.seq_len, scenario.training.flash_attention)
    return validate_plan(plan, scenario.model, num_gpus)


def _bucket_bytes(scenario: Scenario, dp: int) -> float:
    """``parallel.bucket_bytes``; unset, the framework's gradient bucket on ``dp`` ranks
    (:func:`sim.workload.frameworks.grad_bucket_bytes`), else DDP's 25 MiB."""
    given = scenario.parallel.bucket_bytes
    if given is not None:
        return given
    sem = scenario.framework
    framework = grad_bucket_bytes(sem, dp) if sem is not None else None
    return framework if framework is not None else DEFAULT_BUCKET_BYTES


def _plan_batch(scenario: Scenario, dp: int) -> int:
    """``training.global_batch``; with ``parallel.batch_split: proportional`` (replicas run
    different micro-batch counts, :mod:`sim.training.hetero`) it need only be a multiple of
    ``micro_batch`` with one micro-batch per replica, and the plan holds the even share."""
    batch, mb = scenario.training.global_batch, scenario.parallel.micro_batch
    if scenario.parallel.batch_split != "proportional":
        return batch
    if batch % mb or batch // mb < dp:
        raise ConfigError(
            f"parallel.batch_split: proportional needs training.global_batch ({batch}) to be a "
            f"multiple of parallel.micro_batch ({mb}) with one micro-batch per replica (dp={dp})"
        )
    return mb * dp * (batch // (mb * dp))


def _shard_size(par: ParallelSection, dp: int, gpus_per_node: int) -> int | None:
    """HYBRID_SHARD's shard group: given, or the data-parallel ranks of one node."""
    hybrid = par.fsdp is not None and FSDP_STRATEGIES[par.fsdp][1]
    if par.shard_size is not None:
        if par.fsdp is not None and not hybrid and par.shard_size != dp:
            raise ConfigError(
                f"parallel.shard_size: {par.shard_size} shards within a group smaller than "
                f"dp={dp}, which {par.fsdp} does not; use HYBRID_SHARD or _HYBRID_SHARD_ZERO2"
            )
        return par.shard_size
    if not hybrid:
        return None
    per_node = max(1, gpus_per_node // par.tp)
    return math.gcd(dp, per_node)
