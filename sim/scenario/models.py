"""Pydantic models of the core scenario sections: model, cluster, parallel, training, price.

Each section is a strict model (``extra="forbid"``: unknown keys refused; no bool where a
count or a number belongs; integers where counts; finite floats; the counts capped by
:data:`~sim.scenario.readers.CAPS`). Values with their own syntax (``zero:
FULL_SHARD``, ``bucket_bytes: 25MiB``, ``placement: tp,pp,dp``, ``nccl_algo: ^nvls``,
``lora_targets``, ``tokens: "15.6e12"``) go through their parsers. :func:`read_section`
validates one raw section and turns the first failure into one line naming the key path
(``parallel.tp: expected an integer >= 1, got 0``); an explicit null on a key of
:data:`~sim.scenario.readers.NULLABLE` means "not given".

>>> read_section("parallel", {"tp": 2, "zero": "FULL_SHARD"})
{'tp': 2, 'zero': 3, 'fsdp': 'FULL_SHARD'}
>>> read_section("parallel", {"tp": True})
Traceback (most recent call last):
...
sim.errors.ConfigError: parallel.tp: expected an integer >= 1, got True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any

from pydantic import (
    AllowInfNan,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)
from pydantic import ValidationInfo as Info
from pydantic_core import ErrorDetails

from sim.errors import ConfigError
from sim.scenario.readers import CAPS, CHOICES, NULLABLE, SPECIAL, short
from sim.scenario.sections import (
    ClusterSection,
    ParallelSection,
    PriceSection,
    TrainingSection,
)

__all__ = ["SECTION_MODELS", "read_section"]


def _parsed(key: str) -> BeforeValidator:
    """Run ``key``'s own parser (units, FSDP names, lists) with the key path in its errors."""
    parse: Callable[[object, str], Any] = SPECIAL[key]
    return BeforeValidator(lambda v, info: parse(v, f"{_title(info)}{info.field_name}"))


def _title(info: Info) -> str:
    title = info.config.get("title", "") if info.config else ""
    return f"{title}." if title else ""


def _count(default: int | None, key: str, low: int = 1) -> Any:
    return Field(default, ge=low, le=CAPS.get(key))


def _number(default: float | None, what: str, **bounds: float) -> Any:
    """A finite float (an int is accepted) in ``bounds``; ``what`` is the error's wording."""
    gt, ge, lt, le = (bounds.get(k) for k in ("gt", "ge", "lt", "le"))
    return Field(default, description=what, gt=gt, ge=ge, lt=lt, le=le)


Float = Annotated[float, AllowInfNan(False)]
#: The default of a model key: not given (defaults are not validated; a written null is).
_UNSET: Any = None
Choice = str  # checked against CHOICES[key] (the error lists them)


class _Section(BaseModel):
    """Strict, closed section: unknown keys refused, no coercion; choices checked."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    @field_validator("*")
    @classmethod
    def _one_of(cls, value: Any, info: Info) -> Any:
        allowed = CHOICES.get(str(info.field_name))
        if allowed is not None and value not in allowed:
            raise ValueError("not an allowed choice")
        return value


class ModelKeys(_Section):
    """``model``: a preset and/or the transformer's sizes (:class:`ModelSpec` fields)."""

    model_config = ConfigDict(title="model")
    preset: Annotated[str, Field(min_length=1)] | None = None
    layers: int = _count(None, "layers")
    hidden: int = _count(None, "hidden")
    ffn_hidden: int = _count(None, "ffn_hidden")
    heads: int = _count(None, "heads")
    kv_heads: int = _count(None, "kv_heads")
    vocab: int = _count(None, "vocab")
    experts: int = _count(None, "experts")
    top_k: int = _count(None, "top_k")
    gated_mlp: bool = _UNSET
    tied_embeddings: bool = _UNSET
    norm: Annotated[str, Field(min_length=1)] = _UNSET
    position: Annotated[str, Field(min_length=1)] = _UNSET
    max_seq: int = _count(None, "max_seq")
    bias: bool = _UNSET
    dropout: Float = _number(None, "a number in [0, 1)", ge=0, lt=1)


class ClusterKeys(_Section):
    """``cluster``: the topology (preset name or path) and an optional node count."""

    model_config = ConfigDict(title="cluster")
    topology: Annotated[str, Field(min_length=1)]
    nodes: int | None = _count(ClusterSection.nodes, "nodes")


class ParallelKeys(_Section):
    """``parallel``: the plan as written (:class:`ParallelSection`, less ``fsdp``)."""

    model_config = ConfigDict(title="parallel")
    tp: int = _count(ParallelSection.tp, "tp")
    pp: int = _count(ParallelSection.pp, "pp")
    dp: int | None = _count(ParallelSection.dp, "dp")
    cp: int = _count(ParallelSection.cp, "cp")
    ep: int = _count(ParallelSection.ep, "ep")
    sp: bool = ParallelSection.sp
    zero: Annotated[tuple[int, str | None], _parsed("zero")] = (
        ParallelSection.zero,
        ParallelSection.fsdp,
    )
    micro_batch: int = _count(ParallelSection.micro_batch, "micro_batch")
    schedule: Choice = ParallelSection.schedule
    virtual_stages: int = _count(ParallelSection.virtual_stages, "virtual_stages")
    microbatch_group_size: int | None = _count(
        ParallelSection.microbatch_group_size, "microbatch_group_size"
    )
    recompute: Choice = ParallelSection.recompute
    overlap_tp: bool = ParallelSection.overlap_tp
    overlap_dp: bool = ParallelSection.overlap_dp
    bucket_bytes: Annotated[float, _parsed("bucket_bytes")] | None = ParallelSection.bucket_bytes
    placement: Annotated[tuple[str, ...], _parsed("placement")] = ParallelSection.placement
    shard_size: int | None = _count(ParallelSection.shard_size, "shard_size")
    first_stage_layers: int | None = _count(
        ParallelSection.first_stage_layers, "first_stage_layers", 0
    )
    last_stage_layers: int | None = _count(
        ParallelSection.last_stage_layers, "last_stage_layers", 0
    )
    embedding_as_layer: bool | None = ParallelSection.embedding_as_layer
    loss_as_layer: bool | None = ParallelSection.loss_as_layer
    nccl_algo: Annotated[str, _parsed("nccl_algo")] = ParallelSection.nccl_algo
    nccl_proto: Annotated[str, _parsed("nccl_proto")] = ParallelSection.nccl_proto
    batch_split: Choice = ParallelSection.batch_split
    stage_split: Choice = ParallelSection.stage_split
    grad_compression: Choice = ParallelSection.grad_compression
    topk_ratio: Float = _number(ParallelSection.topk_ratio, "a fraction in (0, 1]", gt=0, le=1)
    powersgd_rank: int = _count(ParallelSection.powersgd_rank, "powersgd_rank")
    dp_mode: Choice = ParallelSection.dp_mode
    ps_servers: int | None = _count(ParallelSection.ps_servers, "ps_servers")
    staleness: int = _count(ParallelSection.staleness, "staleness", 0)
    sync_every: int = _count(ParallelSection.sync_every, "sync_every")


class TrainingKeys(_Section):
    """``training``: batch, sequence, precision and techniques (:class:`TrainingSection`)."""

    model_config = ConfigDict(title="training")
    global_batch: int = _count(..., "global_batch")  # type: ignore[arg-type]
    seq_len: int = _count(..., "seq_len")  # type: ignore[arg-type]
    precision: Choice = TrainingSection.precision
    flash_attention: bool = TrainingSection.flash_attention
    grad_dtype: Choice = TrainingSection.grad_dtype
    cross_entropy: Choice = TrainingSection.cross_entropy
    fused_kernels: bool = TrainingSection.fused_kernels
    attention_kernel: Choice = TrainingSection.attention_kernel
    optimizer: Choice = TrainingSection.optimizer
    momentum: bool = TrainingSection.momentum
    finetune: Choice = TrainingSection.finetune
    lora_rank: int = _count(TrainingSection.lora_rank, "lora_rank")
    lora_targets: Annotated[tuple[str, ...], _parsed("lora_targets")] = TrainingSection.lora_targets
    offload: Choice = TrainingSection.offload
    offload_overlap: bool = TrainingSection.offload_overlap
    cpu_adam_rate: Float = _number(
        TrainingSection.cpu_adam_rate, "a positive number of parameters/s", gt=0
    )
    nvme_bandwidth: Annotated[float, _parsed("nvme_bandwidth")] = TrainingSection.nvme_bandwidth
    tokens: Annotated[float, _parsed("tokens")] | None = TrainingSection.tokens
    framework: Choice | None = TrainingSection.framework
    grad_accum_fusion: bool = TrainingSection.grad_accum_fusion
    conv_stack: Choice = TrainingSection.conv_stack


class PriceKeys(_Section):
    """``price``: a GPU-hour price in USD or a price preset (at most one; checked later)."""

    model_config = ConfigDict(title="price")
    gpu_hour_usd: Float | None = _number(
        PriceSection.gpu_hour_usd, "a non-negative number of USD", ge=0, lt=1e9
    )
    preset: Annotated[str, Field(min_length=1)] | None = PriceSection.preset


class ScalarKeys(_Section):
    """The top-level scalars: ``network``, ``profile`` (a calibration file), ``force_profile``
    (use it on hardware it was not measured on) and ``seed``."""

    model_config = ConfigDict(title="")
    network: Choice = "flow"
    profile: Annotated[str, Field(min_length=1)] | None = None
    force_profile: bool = False
    seed: int = _count(0, "seed", 0)


#: The core sections' models by section name.
SECTION_MODELS: dict[str, type[BaseModel]] = {
    "model": ModelKeys, "cluster": ClusterKeys, "parallel": ParallelKeys,
    "training": TrainingKeys, "price": PriceKeys, "": ScalarKeys,
}  # fmt: skip


def read_section(name: str, raw: object) -> dict[str, Any]:
    """Validate section ``name`` of a raw scenario: the keys given, as read.

    A missing or empty section reads as ``{}``; ``zero`` is split into ``zero`` (the
    stage) and ``fsdp`` (the strategy name, when one was given).

    Raises
    ------
    ConfigError
        One line: the key path (``parallel.tp``), what is wrong and what is allowed.
    """
    model = SECTION_MODELS[name]
    data = raw or {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{name}: expected a mapping of keys, got {data!r}")
    for key in data:
        if key not in model.model_fields:
            raise ConfigError(
                f"{name}.{key}: unknown key; allowed: {', '.join(model.model_fields)}"
            )
    given = {k: v for k, v in data.items() if not (v is None and k in NULLABLE)}
    try:
        out = model.model_validate(given).model_dump(include=set(given))
    except ValidationError as err:
        order = [(k,) for k in given]  # the first bad key as written; then missing keys
        first = min(err.errors(), key=lambda e: _rank(order, e["loc"][:1]))
        raise _one_line(model, name, given, first) from None
    if "zero" in out:
        out["zero"], fsdp = out["zero"]
        if fsdp is not None:
            out["fsdp"] = fsdp
    return out


def _rank(order: list[tuple[Any, ...]], key: tuple[Any, ...]) -> int:
    return order.index(key) if key in order else len(order)


def _one_line(
    model: type[BaseModel], name: str, data: Mapping[str, Any], e: ErrorDetails
) -> ConfigError:
    """Today's one-line message for the first failure ``e`` of section ``name``."""
    cause = (e.get("ctx") or {}).get("error")
    if isinstance(cause, ConfigError):  # a parser's own message, with the key path
        return cause
    key = str(e["loc"][0]) if e["loc"] else ""
    where, value = f"{name}.{key}" if name else key, data.get(key)
    if e["type"] == "missing":
        return ConfigError(f"{where}: missing")
    if key in CHOICES:
        return ConfigError(f"{where}: {value!r} is not one of {', '.join(CHOICES[key])}")
    field = model.model_fields[key]
    bounds = {type(m).__name__: m for m in field.metadata}
    if "bool" in str(field.annotation):
        return ConfigError(f"{where}: expected true or false, got {value!r}")
    if "int" in str(field.annotation):
        if e["type"] == "less_than_equal" and isinstance(value, int):
            return ConfigError(
                f"{where}: {short(value)} is above the largest allowed, {e['ctx']['le']:,}"
            )
        low = getattr(bounds.get("Ge"), "ge", 1)
        return ConfigError(f"{where}: expected an integer >= {low}, got {short(value)}")
    if field.description:
        return ConfigError(f"{where}: expected {field.description}, got {value!r}")
    return ConfigError(f"{where}: expected a non-empty string, got {value!r}")
