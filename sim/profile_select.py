"""Which profile a simulation uses: chosen by hardware, guarded against other hardware.

A profile records the hardware it was measured on (:class:`~sim.profile.Hardware`): the
topology's accelerator and, per link scope whose efficiency it fitted, the link kind. It
*fits* a topology when the accelerator is the same and every such scope that the
topology has uses the same link kind (a scope the topology lacks is simply unused: an
8-GPU NVLink profile fits a cluster of those servers, whose network then keeps the
shipped defaults).

- :func:`select_profile`: the shipped profile that fits best (most fitted scopes present
  in the topology, then fewest absent, then name), or None.
- :func:`resolve_profile`: what ``clustersim run`` and ``collective`` use (a
  :class:`Resolved`). No request:
  :func:`select_profile` (defaults when none fits); ``"none"``: the shipped defaults; a
  name or path: that profile, refused with one line (:class:`~sim.errors.ConfigError`)
  when it was measured on other hardware, unless ``force``.
- :func:`error_bars`: the validated error bars of what a result used, for text and JSON.

>>> from sim.topology.presets import load_topology
>>> select_profile(load_topology("dgx-h100")).name
'h100-nvlink'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sim.errors import ConfigError
from sim.profile import NO_PROFILE, ErrorBar, Hardware, Profile, load_profile, profile_names
from sim.topology.model import Topology

__all__ = [
    "Resolved",
    "describe",
    "error_bars",
    "mismatch",
    "resolve_profile",
    "select_profile",
    "text_lines",
    "topology_links",
]


def topology_links(topology: Topology) -> dict[str, tuple[str, ...]]:
    """Link kinds of every scope present in ``topology`` (sorted).

    >>> from sim.topology.presets import load_topology
    >>> topology_links(load_topology("dgx-h100"))
    {'nvlink': ('nvlink4',), 'pcie': ('pcie-gen5',)}
    """
    kinds: dict[str, set[str]] = {}
    # the distinct pairs first (a C-level pass): a 16k-GPU fabric has ~370k links
    for scope, kind in set(zip(topology.link_scope, topology.link_kind, strict=True)):
        kinds.setdefault(scope, set()).add(kind)
    return {s: tuple(sorted(kinds[s])) for s in sorted(kinds)}


def _topology_label(topology: Topology) -> str:
    links = ", ".join(f"{s}: {'/'.join(k)}" for s, k in topology_links(topology).items())
    return f"{topology.gpu.name} ({links})"


def mismatch(hardware: Hardware, topology: Topology) -> str | None:
    """Why a profile measured on ``hardware`` does not fit ``topology``; None when it fits.

    >>> from sim.topology.presets import load_topology
    >>> mismatch(Hardware("L40S", {"pcie": "pcie-gen4"}), load_topology("dgx-h100"))
    'it was measured on L40S, not H100-SXM'
    """
    if hardware.gpu != topology.gpu.name:
        return f"it was measured on {hardware.gpu}, not {topology.gpu.name}"
    if topology.heterogeneous:
        mixed = ", ".join(sorted({g.name for g in topology.gpu_models}))
        return f"it was measured on {hardware.gpu} alone; this cluster mixes {mixed}"
    links = topology_links(topology)
    for scope, kind in sorted(hardware.links.items()):
        have = links.get(scope)
        if have is not None and kind not in have:
            return f"its {scope} parameters were measured on {kind}, not {'/'.join(have)}"
    return None


def _score(hardware: Hardware, topology: Topology) -> tuple[int, int]:
    links = topology_links(topology)
    present = sum(1 for s in hardware.links if s in links)
    return present, len(hardware.links) - present


@dataclass(frozen=True)
class Resolved:
    """The profile a simulation uses: ``key`` loads it (a shipped name, a path, or
    ``"none"``); ``how`` says how it was chosen (see :func:`describe`)."""

    key: str
    profile: Profile
    how: str


def _select(topology: Topology) -> tuple[str, Profile] | None:
    best: tuple[tuple[int, int, str], Profile] | None = None
    for name in profile_names():
        profile = load_profile(name)
        hw = profile.hardware
        if hw is None or mismatch(hw, topology) is not None:
            continue
        present, absent = _score(hw, topology)
        key = (-present, absent, name)
        if best is None or key < best[0]:
            best = (key, profile)
    return (best[0][2], best[1]) if best else None


def select_profile(topology: Topology) -> Profile | None:
    """The shipped profile that fits ``topology`` best (see the module docstring), or None."""
    found = _select(topology)
    return found[1] if found else None


def resolve_profile(request: str | None, topology: Topology, *, force: bool = False) -> Resolved:
    """The profile a simulation of ``topology`` uses (see the module docstring).

    Raises
    ------
    ConfigError
        An unknown profile, or one measured on other hardware without ``force``.

    Examples
    --------
    >>> from sim.topology.presets import load_topology
    >>> r = resolve_profile(None, load_topology("h100-ib-ndr", nodes=2))
    >>> r.key, r.how
    ('h100-ib-2node', 'selected')
    """
    if request is None:
        found = _select(topology)
        if found is None:
            return Resolved(NO_PROFILE, load_profile(None), "defaults")
        return Resolved(found[0], found[1], "selected")
    profile = load_profile(request)
    if request == NO_PROFILE:
        return Resolved(NO_PROFILE, profile, "defaults")
    why = mismatch(profile.hardware, topology) if profile.hardware else None
    if why is None:
        return Resolved(request, profile, "requested")
    if not force:
        assert profile.hardware is not None
        raise ConfigError(
            f"profile {profile.name!r} does not fit topology {topology.name!r}: {why} "
            f"(measured on {profile.hardware.label}; the topology has "
            f"{_topology_label(topology)}); pass --force-profile to use it anyway, "
            "or --profile none"
        )
    return Resolved(request, profile, "forced")


def error_bars(profile: Profile, extra: Sequence[ErrorBar] = ()) -> list[ErrorBar]:
    """Validated error bars of ``profile`` (and ``extra``, e.g. a catalog entry's)."""
    return [*profile.error_bars, *extra]


def describe(resolved: Resolved, topology: Topology) -> dict[str, Any]:
    """JSON-ready facts of the profile a result used: name, how it was chosen (``selected``
    by hardware, ``requested`` by name, ``forced`` onto other hardware, or ``defaults``),
    the hardware it was measured on, the topology's link scopes it did not measure (they
    keep the shipped defaults), and its error bars."""
    profile = resolved.profile
    measured = set(profile.hardware.links) if profile.hardware else set()
    return {
        "name": profile.name,
        "how": resolved.how,
        "hardware": profile.hardware.to_dict() if profile.hardware else None,
        "scopes_at_defaults": sorted(set(topology_links(topology)) - measured),
        "error_bars": [b.to_dict() for b in error_bars(profile)],
    }


def text_lines(info: dict[str, Any]) -> list[str]:
    """Text-output lines for :func:`describe`'s facts: the profile, then its error bars."""
    name, how = info["name"], info["how"]
    head = {
        "defaults": "profile          none (shipped defaults; no validated error bar)",
        "selected": f"profile          {name} (selected: measured on this hardware)",
        "requested": f"profile          {name}",
        "forced": f"profile          {name} (FORCED: measured on other hardware)",
    }[how]
    lines = [head]
    if how != "defaults" and info["scopes_at_defaults"]:
        lines.append(f"                 {', '.join(info['scopes_at_defaults'])}: shipped defaults")
    bars = [ErrorBar(**b) for b in info["error_bars"]]
    lines += [f"error bar        {b.label}" for b in bars]
    if how != "defaults" and not bars:
        lines.append("error bar        none recorded in this profile")
    return lines
