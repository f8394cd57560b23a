"""Profiles: small, versioned, schema-checked parameter files written by calibration.

A profile is YAML::

    schema: clustersim.profile/1
    provenance: {source: ..., hardware: ..., created: ..., fit: {r2: ..., mape: ...}}
    collectives: {...}   # any subset of sim/collectives/defaults.yaml, same shape
    compute: {...}       # compute-model parameters (efficiencies, launch overhead)

The simulator only reads profiles; ``calibrate fit`` writes them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from sim.collectives.params import CollectiveParams, default_params
from sim.errors import ConfigError

__all__ = ["PROFILE_SCHEMA", "Profile", "load_profile", "profile_names"]

PROFILE_SCHEMA = "clustersim.profile/1"
_KEYS = {"schema", "name", "provenance", "collectives", "compute"}


@dataclass(frozen=True)
class Profile:
    """Parameters read from a profile, merged over the shipped defaults."""

    name: str
    collectives: CollectiveParams
    compute: Mapping[str, Any] = field(default_factory=dict)
    provenance: Mapping[str, Any] = field(default_factory=dict)


def profile_names() -> list[str]:
    """Names of the profiles shipped in ``calibrate/profiles``."""
    try:
        root = resources.files("calibrate").joinpath("profiles")
        return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".yaml"))
    except (ModuleNotFoundError, FileNotFoundError):
        return []


def _read(name_or_path: str) -> tuple[str, str]:
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise ConfigError(f"profile file {name_or_path!r} does not exist")
        return path.stem, path.read_text()
    if name_or_path in profile_names():
        res = resources.files("calibrate").joinpath("profiles", f"{name_or_path}.yaml")
        return name_or_path, res.read_text()
    known = ", ".join(profile_names()) or "none shipped"
    raise ConfigError(f"unknown profile {name_or_path!r}; give a YAML path or one of: {known}")


def load_profile(name_or_path: str | None) -> Profile:
    """Load a profile by shipped name or path; ``None`` gives the defaults.

    Loaded profiles are cached (a file by path and modification time), so repeated
    simulations share one parameter object and the caches keyed on it.
    """
    if name_or_path is None:
        return _load(None, None)
    path = Path(name_or_path)
    stamp = path.stat().st_mtime_ns if path.is_file() else None
    return _load(name_or_path, stamp)


@functools.lru_cache(maxsize=64)
def _load(name_or_path: str | None, _stamp: int | None) -> Profile:
    if name_or_path is None:
        return Profile("defaults", default_params())
    name, text = _read(name_or_path)
    try:
        tree = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(
            f"profile {name_or_path!r}: not valid YAML ({str(e).splitlines()[0]})"
        ) from None
    if not isinstance(tree, Mapping):
        raise ConfigError(f"profile {name_or_path!r}: expected a mapping at the top")
    for k in tree:
        if k not in _KEYS:
            raise ConfigError(
                f"profile {name_or_path!r}: unknown key {k!r}; allowed: {', '.join(sorted(_KEYS))}"
            )
    if tree.get("schema") != PROFILE_SCHEMA:
        raise ConfigError(
            f"profile {name_or_path!r}: schema {tree.get('schema')!r}; expected {PROFILE_SCHEMA!r}"
        )
    coll = default_params().merged(tree.get("collectives") or {}, f"profile {name}: collectives")
    return Profile(
        str(tree.get("name", name)),
        coll,
        dict(tree.get("compute") or {}),
        dict(tree.get("provenance") or {}),
    )
