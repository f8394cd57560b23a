"""Profiles: small, versioned, schema-checked parameter files written by calibration.

A profile is YAML::

    schema: clustersim.profile/1
    name: h100-nvlink
    hardware:            # what it was measured on (sim.profile_select checks it)
      gpu: H100-SXM      # catalog accelerator of the topology it was fitted on
      links: {nvlink: nvlink4}   # link kind per scope whose efficiency was fitted
      gpus: 8            # GPUs of the largest measured group
      nodes: 1
      backend: nccl
      device: NVIDIA H100 80GB HBM3   # as the measurements name it
    error_bars:          # validated error of these parameters on real data
    - {what: collectives, metric: median_ape_pct, value: 3.1, cases: 32, source: ...}
    provenance: {source: ..., created: ..., fit: {...}}
    collectives: {...}   # any subset of sim/collectives/defaults.yaml, same shape
    compute: {...}       # compute-model parameters (efficiencies, launch overhead)

``hardware`` and ``error_bars`` are optional (profiles written before them still load;
such a profile is never chosen automatically). The simulator only reads profiles;
``calibrate fit`` writes them. ``load_profile("none")`` gives the shipped defaults.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.collectives.params import CollectiveParams, default_params
from sim.errors import ConfigError
from sim.files import load_yaml, read_text

__all__ = [
    "PROFILE_SCHEMA",
    "ErrorBar",
    "Hardware",
    "Profile",
    "load_profile",
    "profile_names",
]

PROFILE_SCHEMA = "clustersim.profile/1"
_KEYS = {"schema", "name", "hardware", "error_bars", "provenance", "collectives", "compute"}
_HARDWARE_KEYS = ("gpu", "links", "gpus", "nodes", "backend", "device")
_BAR_KEYS = ("what", "metric", "value", "cases", "source")
#: ``load_profile`` names that mean "no profile": the shipped defaults.
NO_PROFILE = "none"


@dataclass(frozen=True)
class ErrorBar:
    """One validated error of a parameter set on real data.

    Attributes
    ----------
    what : str
        What the parameters predict: ``collectives``, ``compute``, ``step``.
    metric : str
        ``median_ape_pct``, ``mean_ape_pct`` or ``max_ape_pct`` (absolute percentage error).
    value : float
        The error, in percent.
    cases : int
        Measured cases it was computed over.
    source : str
        The data and method (hold-out, leave-one-out, in-sample), e.g. a log's name.

    Examples
    --------
    >>> ErrorBar("collectives", "median_ape_pct", 3.1, 32, "hold-out").label
    'collectives ±3.1% median over 32 cases (hold-out)'
    """

    what: str
    metric: str
    value: float
    cases: int
    source: str

    @property
    def label(self) -> str:
        """One line for text output."""
        kind = self.metric.removesuffix("_ape_pct")
        return f"{self.what} ±{self.value:.3g}% {kind} over {self.cases} cases ({self.source})"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict with the five keys."""
        return {k: getattr(self, k) for k in _BAR_KEYS}


@dataclass(frozen=True)
class Hardware:
    """What a profile was measured on (see the module docstring for the keys)."""

    gpu: str
    links: Mapping[str, str] = field(default_factory=dict)
    gpus: int | None = None
    nodes: int | None = None
    backend: str | None = None
    device: str | None = None

    @property
    def label(self) -> str:
        """E.g. ``H100-SXM, nvlink: nvlink4, 8 GPUs on 1 node(s), nccl``."""
        parts = [self.gpu, *(f"{s}: {k}" for s, k in sorted(self.links.items()))]
        if self.gpus:
            parts.append(f"{self.gpus} GPUs" + (f" on {self.nodes} node(s)" if self.nodes else ""))
        if self.backend:
            parts.append(self.backend)
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """The YAML mapping (None fields left out)."""
        out = {k: getattr(self, k) for k in _HARDWARE_KEYS}
        out["links"] = dict(self.links)
        return {k: v for k, v in out.items() if v is not None}


@dataclass(frozen=True)
class Profile:
    """Parameters read from a profile, merged over the shipped defaults."""

    name: str
    collectives: CollectiveParams
    compute: Mapping[str, Any] = field(default_factory=dict)
    provenance: Mapping[str, Any] = field(default_factory=dict)
    hardware: Hardware | None = None
    error_bars: tuple[ErrorBar, ...] = ()


def _profiles_dir() -> Path | None:
    """``calibrate/profiles`` located without importing ``calibrate`` (sim never does)."""
    try:
        spec = importlib.util.find_spec("calibrate")
    except (ImportError, ValueError):
        return None
    for root in (spec.submodule_search_locations or []) if spec else []:
        folder = Path(root) / "profiles"
        if folder.is_dir():
            return folder
    return None


def profile_names() -> list[str]:
    """Names of the profiles shipped in ``calibrate/profiles``."""
    folder = _profiles_dir()
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder else []


def _read(name_or_path: str) -> tuple[str, str]:
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise ConfigError(f"profile file {name_or_path!r} does not exist")
        return path.stem, read_text(path, "profile file")
    folder = _profiles_dir()
    if folder and name_or_path in profile_names():
        return name_or_path, (folder / f"{name_or_path}.yaml").read_text()
    known = ", ".join(profile_names()) or "none shipped"
    raise ConfigError(
        f"unknown profile {name_or_path!r}; give a YAML path, 'none', or one of: {known}"
    )


def load_profile(name_or_path: str | None) -> Profile:
    """Load a profile by shipped name or path; ``None`` or ``"none"`` gives the defaults.

    Loaded profiles are cached (a file by path and modification time), so repeated
    simulations share one parameter object and the caches keyed on it.
    """
    if name_or_path is None or name_or_path == NO_PROFILE:
        return _load(None, None)
    path = Path(name_or_path)
    stamp = path.stat().st_mtime_ns if path.is_file() else None
    return _load(name_or_path, stamp)


@functools.lru_cache(maxsize=64)
def _load(name_or_path: str | None, _stamp: int | None) -> Profile:
    if name_or_path is None:
        return Profile("defaults", default_params())
    name, text = _read(name_or_path)
    where = f"profile {name_or_path!r}"
    tree = load_yaml(text, where)
    if not isinstance(tree, Mapping):
        raise ConfigError(f"{where}: expected a mapping at the top")
    for k in tree:
        if k not in _KEYS:
            raise ConfigError(f"{where}: unknown key {k!r}; allowed: {', '.join(sorted(_KEYS))}")
    if tree.get("schema") != PROFILE_SCHEMA:
        raise ConfigError(f"{where}: schema {tree.get('schema')!r}; expected {PROFILE_SCHEMA!r}")
    for section in ("collectives", "compute", "provenance"):
        if not isinstance(tree.get(section) or {}, Mapping):
            raise ConfigError(f"{where}: {section}: expected a mapping, got {tree[section]!r:.60}")
    coll = default_params().merged(tree.get("collectives") or {}, f"profile {name}: collectives")
    hardware = tree.get("hardware")
    return Profile(
        str(tree.get("name", name)),
        coll,
        dict(tree.get("compute") or {}),
        dict(tree.get("provenance") or {}),
        None if hardware is None else _hardware(hardware, f"{where}: hardware"),
        _error_bars(tree.get("error_bars") or [], f"{where}: error_bars"),
    )


def _count(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}: expected a whole number >= 1, got {value!r}")
    return value


def _text(value: Any, where: str, optional: bool = True) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: expected a non-empty string, got {value!r}")
    return value


def _hardware(raw: Any, where: str) -> Hardware:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {raw!r}")
    for k in raw:
        if k not in _HARDWARE_KEYS:
            raise ConfigError(f"{where}: unknown key {k!r}; allowed: {', '.join(_HARDWARE_KEYS)}")
    links = raw.get("links") or {}
    if not isinstance(links, Mapping) or not all(
        isinstance(s, str) and isinstance(k, str) for s, k in links.items()
    ):
        raise ConfigError(f"{where}.links: expected a mapping of scope to link kind, got {links!r}")
    gpu = _text(raw.get("gpu"), f"{where}.gpu", optional=False)
    assert gpu is not None
    return Hardware(
        gpu, dict(links), _count(raw.get("gpus"), f"{where}.gpus"),
        _count(raw.get("nodes"), f"{where}.nodes"), _text(raw.get("backend"), f"{where}.backend"),
        _text(raw.get("device"), f"{where}.device"),
    )  # fmt: skip


def _error_bars(raw: Any, where: str) -> tuple[ErrorBar, ...]:
    if not isinstance(raw, Sequence) or isinstance(raw, str):
        raise ConfigError(f"{where}: expected a list of {{{', '.join(_BAR_KEYS)}}}, got {raw!r}")
    bars = []
    for i, entry in enumerate(raw):
        at = f"{where}[{i}]"
        if not isinstance(entry, Mapping) or set(entry) != set(_BAR_KEYS):
            raise ConfigError(
                f"{at}: expected exactly the keys {', '.join(_BAR_KEYS)}, got {entry!r}"
            )
        value = entry["value"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1e9:
            raise ConfigError(f"{at}.value: expected a finite percentage >= 0, got {value!r}")
        bars.append(ErrorBar(
            str(_text(entry["what"], f"{at}.what", optional=False)),
            str(_text(entry["metric"], f"{at}.metric", optional=False)), float(value),
            _count(entry["cases"], f"{at}.cases") or 0,
            str(_text(entry["source"], f"{at}.source", optional=False)),
        ))  # fmt: skip
    return tuple(bars)
