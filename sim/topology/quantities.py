"""Quantities in topology files: bandwidths and times need their unit, ratios read ``2:1``.

A topology file is read by people who cable clusters; a bare ``nic_bandwidth: 200`` would
be 200 bytes/s (a 1 GiB all-reduce then "takes" days) and an unquoted ``2:1`` is, to a
YAML 1.1 reader, the sexagesimal number 121 (clustersim reads YAML 1.2, where it is the
text ``"2:1"``). So the schema refuses bare numbers where a unit is needed (``200Gb/s``,
``450GB/s``, ``1.2us``) and reads a ratio written ``2.0``, ``2`` or ``2:1`` as the number 2.

>>> from pydantic import TypeAdapter
>>> TypeAdapter(Ratio).validate_python("2:1"), TypeAdapter(Ratio).validate_python(1.5)
(2.0, 1.5)
>>> from pydantic import ValidationError
>>> try:
...     TypeAdapter(Bandwidth).validate_python(200)
... except ValidationError as e:
...     print(e.errors()[0]["msg"])
Value error, needs a unit, e.g. 200Gb/s (bits) or 25GB/s (bytes); a bare number is ambiguous
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BeforeValidator, WithJsonSchema

from sim.errors import ConfigError
from sim.units import parse_bandwidth, parse_time

__all__ = ["Bandwidth", "Duration", "Ratio", "ratio_value"]

_RATIO = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*:\s*([0-9]*\.?[0-9]+)\s*")


def ratio_value(value: Any) -> float:
    """A ratio written ``2``, ``2.0``, ``"2"`` or ``"2:1"`` as a float (ValueError otherwise).

    >>> ratio_value("3:2"), ratio_value(4)
    (1.5, 4.0)
    """
    if isinstance(value, bool):
        raise ValueError("a ratio is a number (2.0) or 'a:b' ('2:1'), not a boolean")
    if isinstance(value, (int, float)):
        x = float(value)
    elif isinstance(value, str):
        m = _RATIO.fullmatch(value)
        if m is not None:
            a, b = float(m.group(1)), float(m.group(2))
            if b == 0:
                raise ValueError(f"{value!r} divides by zero")
            x = a / b
        else:
            try:
                x = float(value)
            except ValueError:
                raise ValueError("write a ratio as a number (2.0) or as 'a:b' ('2:1')") from None
    else:
        raise ValueError("write a ratio as a number (2.0) or as 'a:b' ('2:1')")
    if not math.isfinite(x):
        raise ValueError("a ratio must be finite")
    return x


def _with_unit(parse: Callable[[object, str], float], example: str) -> Callable[[Any], Any]:
    """A validator: refuse bare numbers (naming ``example``) and text ``parse`` cannot read."""

    def check(value: Any) -> Any:
        if isinstance(value, (bool, int, float)):
            raise ValueError(f"needs a unit, e.g. {example}; a bare number is ambiguous")
        if isinstance(value, str):
            try:
                parse(value, "quantity")
            except ConfigError as e:
                raise ValueError(str(e).split(": ", 1)[-1]) from None
        return value

    return check


_bandwidth = _with_unit(parse_bandwidth, "200Gb/s (bits) or 25GB/s (bytes)")
_time = _with_unit(parse_time, "1.2us, 500ns or 2ms")


Bandwidth = Annotated[str, BeforeValidator(_bandwidth)]
"""A line rate with its unit (``400Gb/s`` is bits, ``450GB/s`` bytes); bare numbers refused."""

Duration = Annotated[str, BeforeValidator(_time)]
"""A time with its unit (``1.2us``, ``500ns``); bare numbers refused."""

Ratio = Annotated[
    float,
    BeforeValidator(ratio_value),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "minimum": 1},
                {"type": "string", "pattern": r"^\s*[0-9]*\.?[0-9]+\s*(:\s*[0-9]*\.?[0-9]+\s*)?$"},
            ]
        }
    ),
]
"""A ratio: ``2.0``, ``2`` or ``"2:1"`` all mean 2."""
