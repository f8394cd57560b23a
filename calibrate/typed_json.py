"""Typed JSON: check a parsed JSON document against a frozen dataclass's type hints.

Used by the measurement files (:mod:`calibrate.measurements`): every key must be known,
every value of the annotated type (finite floats, ints that are not bools, tuples from
lists, optional fields), and each error names where it is, e.g. ``m.json: records[3].time_s``.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Union

from sim.errors import CalibrationError

__all__ = ["build_dataclass", "fail"]


def fail(where: str, what: str) -> CalibrationError:
    """The one-line error for a bad value at ``where``."""
    return CalibrationError(f"{where}: {what}")


def _convert(value: Any, hint: Any, where: str) -> Any:
    """Check ``value`` against the type ``hint``; return it in the dataclass's shape."""
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        for arg in (a for a in args if a is not type(None)):
            try:
                return _convert(value, arg, where)
            except CalibrationError:
                continue
        names = " or ".join(getattr(a, "__name__", str(a)) for a in args)
        raise fail(where, f"expected {names}, got {value!r}")
    if origin is tuple:
        if not isinstance(value, list):
            raise fail(where, f"expected a list, got {value!r}")
        item = typing.get_args(hint)[0]
        return tuple(_convert(v, item, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise fail(where, f"expected an object, got {value!r}")
        item = typing.get_args(hint)[1]
        return {str(k): _convert(v, item, f"{where}.{k}") for k, v in value.items()}
    return _scalar(value, hint, where)


def _scalar(value: Any, hint: Any, where: str) -> Any:
    if hint is type(None) and value is None:
        return None
    if hint is bool and isinstance(value, bool):
        return value
    if hint is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise fail(where, f"must be a finite number, got {value!r}")
        return float(value)
    if hint is str and isinstance(value, str):
        return value
    name = getattr(hint, "__name__", str(hint))
    raise fail(where, f"expected {name}, got {value!r}")


def build_dataclass(cls: type, data: Any, where: str) -> Any:
    """Build ``cls`` from the JSON object ``data``, checking keys and value types."""
    if not isinstance(data, dict):
        raise fail(where, f"expected an object, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise fail(where, f"unknown key {unknown[0]!r}; allowed: {', '.join(sorted(fields))}")
    kwargs = {}
    for name, f in fields.items():
        if name not in data:
            has_default = f.default is not dataclasses.MISSING
            if has_default or f.default_factory is not dataclasses.MISSING:
                continue
            raise fail(where, f"missing key {name!r}")
        kwargs[name] = _convert(data[name], hints[name], f"{where}.{name}")
    return cls(**kwargs)
