"""Preset tables shipped as YAML package data, and validation of the optional scenario sections.

The layers over a simulated step (``sim.reliability``, ``sim.cost``) keep their presets as
YAML beside their code, so they work from a non-editable install. Each table maps a preset
name to an entry; every entry carries its source. Their scenario sections are pydantic
models; :func:`validate_section` turns a validation failure into one :class:`ConfigError`
line naming the key (``energy.pue``) and what is allowed.

>>> from pydantic import BaseModel, ConfigDict
>>> class Demo(BaseModel):
...     model_config = ConfigDict(extra="forbid")
...     pue: float = 1.5
>>> validate_section(Demo, {"pue": 1.2}, "energy").pue
1.2
>>> validate_section(Demo, {"pvu": 1.2}, "energy")
Traceback (most recent call last):
...
sim.errors.ConfigError: energy.pvu: unknown key; allowed: pue
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from sim.errors import ConfigError
from sim.files import load_shipped_yaml

__all__ = ["lookup", "read_table", "validate_section"]

M = TypeVar("M", bound=BaseModel)


@cache
def read_table(package: str, filename: str) -> dict[str, Any]:
    """Read ``filename`` from ``package`` as a mapping of preset names to entries.

    Parameters
    ----------
    package : str
        Dotted package holding the file, e.g. ``"sim.cost"``.
    filename : str
        The YAML file, e.g. ``"prices.yaml"``.

    Returns
    -------
    dict
        The parsed mapping (cached; do not mutate).

    Raises
    ------
    ConfigError
        The file is not a mapping.
    """
    text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
    data = load_shipped_yaml(text, f"{package}/{filename}")
    if not isinstance(data, dict):
        raise ConfigError(f"{package}/{filename}: expected a mapping of preset names to entries")
    return data


def lookup(table: Mapping[str, Any], name: str, what: str) -> Any:
    """Return ``table[name]``, or raise a ConfigError naming ``what`` and the allowed names.

    >>> lookup({"a": 1, "b": 2}, "b", "grid")
    2
    >>> lookup({"a": 1, "b": 2}, "c", "grid")
    Traceback (most recent call last):
    ...
    sim.errors.ConfigError: grid: unknown preset 'c'; allowed: a, b
    """
    if name not in table:
        raise ConfigError(f"{what}: unknown preset {name!r}; allowed: {', '.join(sorted(table))}")
    return table[name]


def validate_section(model: type[M], raw: object, section: str) -> M:
    """Validate one scenario section (a mapping) into ``model``; errors name the key.

    Parameters
    ----------
    model : type[pydantic.BaseModel]
        The section's model (``extra="forbid"``).
    raw : object
        The parsed YAML value of the section (``None`` means an empty section).
    section : str
        The section's name, for messages.

    Raises
    ------
    ConfigError
        One line: ``section.key: problem (got value)`` or the unknown key with the allowed ones.
    """
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{section}: expected a mapping of keys, got {raw!r}")
    try:
        return model.model_validate(dict(raw))
    except ValidationError as err:
        e = err.errors()[0]
        loc = [str(p) for p in e["loc"] if not str(p).startswith(("literal[", "function-"))]
        key = ".".join([section, *loc])
        if e["type"] == "extra_forbidden":
            return _raise_unknown(model, loc, key)
        if e["type"] == "missing":
            raise ConfigError(f"{key}: missing") from None
        msg = str(e["msg"]).removeprefix("Value error, ")
        if not loc:  # a check across keys: the message names them
            raise ConfigError(f"{section}: {msg}") from None
        raise ConfigError(f"{key}: {msg} (got {e.get('input')!r})") from None


def _raise_unknown(model: type[BaseModel], loc: list[str], key: str) -> Any:
    allowed = ", ".join(model.model_fields) if len(loc) == 1 else "see the section's docs"
    raise ConfigError(f"{key}: unknown key; allowed: {allowed}") from None
