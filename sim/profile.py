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
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.collectives.params import CollectiveParams, default_params
from sim.errors import ConfigError
from sim.files import (
    file_stamp,
    load_shipped_yaml,
    load_shipped_yaml_entry,
    load_yaml,
    read_text,
)
from sim.validation import validate_model

__all__ = [
    "PROFILE_SCHEMA",
    "ErrorBar",
    "Hardware",
    "Profile",
    "load_profile",
    "profile_names",
    "shipped_hardware",
]

PROFILE_SCHEMA = "clustersim.profile/1"
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


def _read(name_or_path: str) -> tuple[str, Any, bool]:
    """(name, parsed YAML, shipped?) of a profile file or a shipped profile's name."""
    path = Path(name_or_path)
    where = f"profile {name_or_path!r}"
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.exists():  # a FIFO or a device is named as what it is by read_text
            raise ConfigError(f"profile file {name_or_path!r} does not exist")
        return path.stem, load_yaml(read_text(path, "profile file"), where), False
    folder = _profiles_dir()
    if folder and name_or_path in profile_names():
        text = (folder / f"{name_or_path}.yaml").read_text()
        return name_or_path, load_shipped_yaml(text, where), True
    known = ", ".join(profile_names()) or "none shipped"
    raise ConfigError(
        f"unknown profile {name_or_path!r}; give a YAML path, 'none', or one of: {known}"
    )


@functools.lru_cache(maxsize=64)
def shipped_hardware(name: str) -> Hardware | None:
    """What shipped profile ``name`` was measured on (None: it does not say).

    Only the file's ``hardware`` section is read, so choosing among the shipped profiles
    (:mod:`sim.profile_select`) loads in full only the one chosen. Shipped files are not
    validated again (see :func:`load_profile`).
    """
    folder = _profiles_dir()
    if folder is None or name not in profile_names():
        raise ConfigError(f"unknown shipped profile {name!r}")
    where = f"profile {name!r}"
    raw = load_shipped_yaml_entry((folder / f"{name}.yaml").read_text(), "hardware", where)
    return None if raw is None else _hardware(raw)


def _hardware(raw: Mapping[str, Any]) -> Hardware:
    """The :class:`Hardware` of a validated ``hardware`` section (strict: the values as
    written, absent keys at their defaults)."""
    rest = {k: raw.get(k) for k in _HARDWARE_KEYS[2:]}  # gpus, nodes, backend, device
    return Hardware(raw["gpu"], dict(raw.get("links") or {}), **rest)


def load_profile(name_or_path: str | None) -> Profile:
    """Load a profile by shipped name or path; ``None`` or ``"none"`` gives the defaults.

    Loaded profiles are cached (a file by path, modification time and size:
    :func:`sim.files.file_stamp`), so repeated
    simulations share one parameter object and the caches keyed on it.
    """
    if name_or_path is None or name_or_path == NO_PROFILE:
        return _load(None, None)
    return _load(name_or_path, file_stamp(name_or_path))


@functools.lru_cache(maxsize=64)
def _load(name_or_path: str | None, _stamp: tuple[int, int] | None) -> Profile:
    if name_or_path is None:
        return Profile("defaults", default_params())
    name, tree, shipped = _read(name_or_path)
    if not shipped:  # the shipped files pass the same check in the test suite
        _validate(tree, f"profile {name_or_path!r}")
    coll = default_params().merged(
        tree.get("collectives") or {}, f"profile {name}: collectives", check=not shipped
    )
    hw = tree.get("hardware")
    return Profile(
        tree.get("name") or name,
        coll,
        dict(tree.get("compute") or {}),
        dict(tree.get("provenance") or {}),
        None if hw is None else _hardware(hw),
        tuple(ErrorBar(b["what"], b["metric"], float(b["value"]), b["cases"], b["source"])
              for b in tree.get("error_bars") or ()),
    )  # fmt: skip


def _validate(tree: Any, where: str) -> None:
    """Check a profile file against its schema (:class:`~sim.profile_models.ProfileModel`:
    strict, so a valid file's values are the values as written); ConfigError naming the
    first bad key.

    Shipped profiles skip this, and the check of their merged collective parameters, at
    load time: building the models' validators was about 40 ms of a cold command.
    ``tests/test_profile_select.py`` checks every shipped file through both, and that
    loading it by path (checked) and by name gives equal profiles.
    """
    from sim.profile_models import ProfileModel

    validate_model(ProfileModel, tree, where)
