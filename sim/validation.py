"""One validation layer for data files: pydantic models, one-line errors naming the key path.

Profile and measurement files are checked by pydantic models (``extra="forbid"``, strict
scalar types: no bool where a count belongs, no string where a number belongs, finite
floats). :func:`validate_model` runs one and turns the first failure into a single line,
in the same shape as :func:`sim.packaged.validate_section`'s scenario messages: the file,
the key path (``records[3].time_s``), what is wrong and what is allowed.

The strict field types below are shared by the models.

>>> from pydantic import BaseModel, ConfigDict
>>> class Bar(BaseModel):
...     model_config = ConfigDict(extra="forbid", strict=True)
...     cases: list[Count]
>>> validate_model(Bar, {"cases": [3]}, "p.yaml").cases
[3]
>>> validate_model(Bar, {"cases": [3, True]}, "p.yaml")
Traceback (most recent call last):
...
sim.errors.ConfigError: p.yaml: cases[1]: expected int, got True
>>> validate_model(Bar, {"cases": [3], "kases": 1}, "p.yaml")
Traceback (most recent call last):
...
sim.errors.ConfigError: p.yaml: unknown key 'kases'; allowed: cases
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, TypeVar, Union

from pydantic import (
    AfterValidator,
    AllowInfNan,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
)
from pydantic_core import ErrorDetails

from sim.errors import ClusterSimError, ConfigError

__all__ = [
    "STRICT_MODEL",
    "ByteCount",
    "Count",
    "Finite",
    "NonNegative",
    "Positive",
    "StrictText",
    "Text",
    "one_line",
    "validate_model",
]

M = TypeVar("M", bound=BaseModel)

#: A finite number (an int is accepted; a bool, a string, NaN or infinity is not).
Finite = Annotated[float, Strict(), AllowInfNan(False)]
#: A finite number > 0 (a time, a bandwidth, a size in bytes as a float).
Positive = Annotated[float, Strict(), AllowInfNan(False), Field(gt=0)]
#: A finite number >= 0.
NonNegative = Annotated[float, Strict(), AllowInfNan(False), Field(ge=0)]
#: A whole number >= 1 (a count: ranks, GPUs, nodes, cases); never a bool.
Count = Annotated[int, Strict(), Field(ge=1)]


def _whole_bytes(value: float) -> float:
    if value != int(value):
        raise ValueError(f"{value!r} is not a whole number of bytes")
    return value


#: A size in bytes: a whole number >= 1, written as an int or a float (``524288.0``);
#: a fraction of a byte (``0.3``) is refused. Never a bool.
ByteCount = Annotated[
    float, Strict(), AllowInfNan(False), Field(ge=1), AfterValidator(_whole_bytes)
]
#: A non-empty string.
Text = Annotated[str, Strict(), Field(min_length=1)]
#: Any string, strictly (no number read as text).
StrictText = Annotated[str, Strict()]
#: The model config of file formats: unknown keys refused, no type coercion.
#: Built when first used (``defer_build``): a command validates a few root models, and
#: pydantic built a validator for every nested one at import, unused (~1 ms each).
STRICT_MODEL = ConfigDict(extra="forbid", strict=True, defer_build=True)

#: Union-member tags pydantic puts into an error's location.
_TAGS = frozenset({"int", "float", "str", "bool", "none", "list", "dict"})
_TEXT = {
    "int_type": "expected int",
    "int_from_float": "expected int (a whole number)",
    "bool_type": "expected bool (true or false)",
    "float_type": "expected a number",
    "string_type": "expected str",
    "finite_number": "must be a finite number",
    "string_too_short": "expected a non-empty string",
    "dict_type": "expected a mapping",
    "model_type": "expected a mapping",
    "model_attributes_type": "expected a mapping",
    "list_type": "expected a list",
}


def validate_model(
    model: type[M],
    raw: object,
    where: str,
    error: type[ClusterSimError] = ConfigError,
    at: tuple[int | str, ...] = (),
) -> M:
    """Validate ``raw`` (parsed YAML/JSON) into ``model``; a failure is one line.

    Parameters
    ----------
    model : type[pydantic.BaseModel]
        The file's (or section's) model.
    raw : object
        The parsed value.
    where : str
        The file or section, first in every message (e.g. ``"m.json"``).
    error : type
        The :class:`~sim.errors.ClusterSimError` subclass to raise.
    at : tuple
        Where ``raw`` sits in its file (e.g. ``("records", 3)``), to prefix key paths.

    Raises
    ------
    ClusterSimError
        ``where: key.path: problem, got value`` or the unknown/missing key and the allowed ones.
    """
    if not isinstance(raw, Mapping):
        raise error(f"{_join(where, at)}: expected a mapping, got {_short(raw)}")
    try:
        return model.model_validate(dict(raw))
    except ValidationError as err:
        raise error(one_line(err, model, where, at)) from None


def one_line(
    err: ValidationError, model: type[BaseModel], where: str, at: tuple[int | str, ...] = ()
) -> str:
    """The first failure of ``err`` as ``where: path: problem`` (see :func:`validate_model`)."""
    errors = err.errors()
    first = _meant(errors)
    inner = _clean(first["loc"])
    if first["type"] == "extra_forbidden" and first["loc"]:  # the unknown key is the user's,
        inner = _clean(first["loc"][:-1]) + tuple(first["loc"][-1:])  # even "H100-SXM"
    loc = at + inner
    parent, last = loc[:-1], loc[-1] if loc else None
    if first["type"] in ("extra_forbidden", "missing") and isinstance(last, str):
        head = _join(where, parent)
        if first["type"] == "missing":
            return f"{head}: missing key {last!r}"
        allowed = _allowed(model, inner[:-1])
        return f"{head}: unknown key {last!r}" + (f"; allowed: {allowed}" if allowed else "")
    head = _join(where, loc)
    if first["type"] == "value_error" or not inner:  # a model validator: its own words
        return f"{head}: {str(first['msg']).removeprefix('Value error, ')}"
    same = [e for e in errors if _clean(e["loc"]) == inner]
    text = " or ".join(dict.fromkeys(_text(e) for e in same))
    return f"{head}: {text}, got {_short(first.get('input'))}"


def _meant(errors: list[ErrorDetails]) -> ErrorDetails:
    """The error to report: the first, unless a mapping failed a union's scalar member
    (``nvlink: {source: x}`` against ``number | {value, source}``): then the first error
    inside it, from the model member the mapping was meant for (``missing key 'value'``)."""
    first = errors[0]
    if not (first["type"].endswith("_type") and isinstance(first.get("input"), Mapping)):
        return first
    at = _clean(first["loc"])
    deeper = (e for e in errors[1:] if _clean(e["loc"])[: len(at)] == at != _clean(e["loc"]))
    return next(deeper, first)


def _text(e: ErrorDetails) -> str:
    ctx = e.get("ctx") or {}
    bounds = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<",
              "less_than_equal": "<="}  # fmt: skip
    if e["type"] in bounds:
        key = {">": "gt", ">=": "ge", "<": "lt", "<=": "le"}[bounds[e["type"]]]
        bound = ctx.get(key)
        return f"must be {bounds[e['type']]} {f'{bound:g}' if isinstance(bound, float) else bound}"
    if e["type"] == "literal_error":
        return f"expected one of {ctx.get('expected')}"
    return _TEXT.get(e["type"], str(e["msg"]))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _clean(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """The location without pydantic's union-member and validator tags.

    A union's members appear as type names (``float``) or model class names
    (``Efficiency``); file keys are lower-case, so a capitalised part is such a tag.
    """
    return tuple(
        p for p in loc
        if not (isinstance(p, str) and _is_tag(p))
    )  # fmt: skip


def _is_tag(part: str) -> bool:
    return part in _TAGS or "[" in part or part.startswith("constrained-") or part[:1].isupper()


def _join(where: str, loc: tuple[int | str, ...]) -> str:
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    return f"{where}: {path}" if path else where


def _allowed(model: type[BaseModel], parent: tuple[int | str, ...]) -> str:
    """Keys allowed at ``parent`` (the model reached by walking the fields), or ''."""
    current: Any = model
    keyed = False  # the last field was a mapping: the next part is one of its keys
    for part in parent:
        fields = getattr(current, "model_fields", None)
        named = {f.alias or n: f for n, f in (fields or {}).items()}
        if isinstance(part, int) or (keyed and part not in named):
            keyed = False
            continue
        if part not in named:
            return ""
        hint = named[part].annotation
        keyed = "dict[" in str(hint)
        current = _inner(hint)
    fields = getattr(current, "model_fields", None)
    return ", ".join(f.alias or name for name, f in fields.items()) if fields else ""


def _inner(hint: Any) -> Any:
    """The model inside ``X | None``, ``list[X]`` or ``dict[str, X]`` (else ``hint``); of
    a union, its first model member (``number | Efficiency``: ``Efficiency``)."""
    if isinstance(hint, type) and issubclass(hint, BaseModel):
        return hint
    origin = typing.get_origin(hint)
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if origin in (Union, types.UnionType, list, tuple) and args:
        found = [_inner(a) for a in args]
        models = [m for m in found if isinstance(m, type) and issubclass(m, BaseModel)]
        return (models or found)[0]
    if origin is dict and len(args) == 2:
        return _inner(args[1])
    return hint
