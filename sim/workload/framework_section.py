"""Reading a framework choice and its per-behaviour overrides from a scenario.

A scenario names a framework preset (``training.framework: torchtitan``) and may
override any behaviour of :class:`~sim.workload.frameworks.Semantics` by its
key (``overlap_param_gather: false``). :class:`FrameworkKeys` is the strict pydantic
model of those keys (unknown keys refused, no coercion, names checked against their
choices); :func:`framework_semantics` and :func:`read_framework` turn them into a
:class:`Semantics` or one line naming the bad key and what is allowed.

>>> framework_semantics("megatron-core", {"grad_reduce_dtype": "bf16"}).grad_reduce_dtype
'bf16'
>>> framework_semantics("megatron", {})
Traceback (most recent call last):
...
sim.errors.ConfigError: training.framework: 'megatron' is not one of megatron-core, nemo, \
torchtitan, deepspeed, fsdp, ddp
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from sim.errors import ConfigError
from sim.workload.frameworks import (
    BEHAVIOURS,
    CHOICES,
    FRAMEWORKS,
    PRESETS,
    Semantics,
)

__all__ = ["FrameworkKeys", "framework_semantics", "read_framework"]

_FRACTION = Annotated[float, Field(ge=0.0, le=1.0)]
_COUNT = Annotated[float, Field(gt=0.0)]

#: Type and wording of each behaviour key (strict: a bool is no number, an int no bool).
_TYPES: dict[str, tuple[Any, str]] = {
    "fp32_grad_copy": (bool, "true or false"),
    "default_zero": (Annotated[int, Field(ge=0, le=3)], "a ZeRO stage 0-3"),
    "overlap_grad_reduce": (
        list[Annotated[int, Field(ge=0, le=3)]],
        "a list of ZeRO stages 0-3",
    ),
    "grad_bucket_elements": (_COUNT | None, "a positive number of elements or null"),
    "grad_bucket_per_dp_rank": (Annotated[float, Field(ge=0.0)], "a number >= 0"),
    "allgather_bucket_elements": (_COUNT | None, "a positive number of elements or null"),
    "gathered_units": (Annotated[int, Field(ge=1)], "an integer >= 1"),
    "prefetch_elements": (_COUNT | None, "a positive number of elements or null"),
    "max_live_elements": (_COUNT | None, "a positive number of elements or null"),
    "max_reuse_elements": (_COUNT | None, "a positive number of elements or null"),
    "tp_overlap_hidden": (_FRACTION, "a fraction in [0, 1]"),
    "tp_overlap_slowdown": (_FRACTION, "a fraction in [0, 1]"),
    **{key: (str, "one of " + ", ".join(CHOICES[key])) for key in CHOICES},
}


def _type(key: str) -> tuple[Any, str]:
    return _TYPES.get(key, (bool, "true or false"))


#: The scenario keys: ``framework`` and every behaviour, all optional.
FrameworkKeys: type[BaseModel] = create_model(  # type: ignore[call-overload]
    "FrameworkKeys",
    __config__=ConfigDict(extra="forbid", strict=True, frozen=True),
    framework=(str | None, None),
    **{key: (_type(key)[0] | None, None) for key in BEHAVIOURS},
)


def _check_choice(key: str, value: Any, where: str) -> None:
    allowed = CHOICES.get(key)
    if allowed is not None and value not in allowed:
        raise ConfigError(f"{where}.{key}: {value!r} is not one of {', '.join(allowed)}")


def framework_semantics(
    name: str, overrides: Mapping[str, Any] | None = None, where: str = "training"
) -> Semantics:
    """The preset ``name`` with ``overrides`` (behaviour key -> value) applied.

    Parameters
    ----------
    name : str
        A preset of :data:`~sim.workload.frameworks.PRESETS`.
    overrides : mapping, optional
        Behaviour keys of :class:`Semantics` and their values, as written.
    where : str
        Section the keys were read from, for messages (``training``).

    Raises
    ------
    ConfigError
        One line naming the unknown framework, unknown key or bad value and what is
        allowed.
    """
    if name not in PRESETS:
        raise ConfigError(f"{where}.framework: {name!r} is not one of {', '.join(FRAMEWORKS)}")
    given = dict(overrides or {})
    for key in given:
        if key not in BEHAVIOURS:
            raise ConfigError(
                f"{where}.{key}: unknown framework behaviour; known: {', '.join(BEHAVIOURS)}"
            )
    try:
        checked = FrameworkKeys.model_validate(given).model_dump(include=set(given))
    except ValidationError as err:
        key = str(err.errors()[0]["loc"][0])
        raise ConfigError(f"{where}.{key}: expected {_type(key)[1]}, got {given[key]!r}") from None
    for key, value in checked.items():
        _check_choice(key, value, where)
    if "overlap_grad_reduce" in checked:
        checked["overlap_grad_reduce"] = tuple(sorted(set(checked["overlap_grad_reduce"])))
    base = PRESETS[name]
    return replace(base, **checked) if checked else base


def read_framework(section: Mapping[str, Any], where: str = "training") -> Semantics | None:
    """The :class:`Semantics` a scenario section asks for: its ``framework`` key and any
    behaviour keys beside it; None when it names no framework (and overrides nothing).

    >>> read_framework({"framework": "nemo", "expandable_segments": False}).expandable_segments
    False
    >>> read_framework({}) is None
    True
    """
    name = section.get("framework")
    overrides = {k: v for k, v in section.items() if k != "framework"}
    if name is None:
        if overrides:
            first = next(iter(overrides))
            raise ConfigError(f"{where}.{first}: a framework behaviour needs {where}.framework")
        return None
    if not isinstance(name, str):
        raise ConfigError(f"{where}.framework: expected a preset name, got {name!r}")
    return framework_semantics(name, overrides, where)
