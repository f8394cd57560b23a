"""The network parts catalog: switches, NICs and cables with list price and power.

``topologies/catalog/network-parts.yaml`` holds dated, sourced entries (see its header);
a user's own file in the same format adds entries or replaces shipped ones by name
(:func:`parts_catalog` with ``extra``). The fabric planner takes a switch's radix and port
speed from here (:func:`switch_for`); the bill of materials takes prices and watts.

>>> cat = parts_catalog()
>>> s = switch_for(cat, "ib-ndr")
>>> (s.name, s.ports, s.port_Bps)
('nvidia-qm9700', 64, 50000000000.0)
>>> cable_for(cat, 400e9 / 8, "row").name
'optics-sr-400g'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sim.catalog import LinkSpec
from sim.errors import ConfigError, TopologyError
from sim.files import load_shipped_yaml, load_yaml, read_text
from sim.topology.quantities import Bandwidth
from sim.units import parse_bandwidth

__all__ = [
    "REACHES",
    "CablePart",
    "NicPart",
    "PartsCatalog",
    "SwitchPart",
    "cable_for",
    "nic_for",
    "parts_catalog",
    "switch_for",
]

REACHES = ("rack", "row", "hall")
"""Reach classes of a cable, shortest first: inside a rack (<= 3 m), across a row
(<= 50 m), across the hall (<= 500 m)."""

_FILE = "network-parts.yaml"
_UNSOURCED = frozenset({"description", "default_for", "transport", "reach", "sources", "as_of"})


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)  # built in _File's
    description: str = ""
    price_usd: float = Field(ge=0, allow_inf_nan=False)
    watts: float = Field(ge=0, allow_inf_nan=False)
    as_of: str = Field(min_length=1)
    sources: dict[str, str]


class _Switch(_Entry):
    ports: int = Field(ge=2)
    port_speed: Bandwidth
    transport: list[str] = []
    default_for: list[str] = []


class _Nic(_Entry):
    speed: Bandwidth
    default_for: list[str] = []


class _Cable(_Entry):
    speed: Bandwidth
    reach: Literal["rack", "row", "hall"]
    transceivers: int = Field(ge=0)


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")
    switches: dict[str, _Switch] = {}
    nics: dict[str, _Nic] = {}
    cables: dict[str, _Cable] = {}


@dataclass(frozen=True)
class _Part:
    """What every part has: a name, a list price (USD) and power (W), dated and sourced."""

    name: str
    description: str
    price_usd: float
    watts: float
    as_of: str
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def estimate(self) -> bool:
        """True when the price or the power is an estimate (its source says so)."""
        return any(self.sources.get(k, "").startswith("estimate") for k in ("price_usd", "watts"))


@dataclass(frozen=True)
class SwitchPart(_Part):
    """A switch: ``ports`` ports of ``port_Bps`` bytes/s each (per direction)."""

    ports: int = 0
    port_Bps: float = 0.0
    default_for: tuple[str, ...] = ()
    transport: tuple[str, ...] = ()


@dataclass(frozen=True)
class NicPart(_Part):
    """A NIC (adapter card) at ``speed_Bps`` bytes/s."""

    speed_Bps: float = 0.0
    default_for: tuple[str, ...] = ()


@dataclass(frozen=True)
class CablePart(_Part):
    """One link of ``speed_Bps`` bytes/s and reach class ``reach``, both ends included."""

    speed_Bps: float = 0.0
    reach: str = "rack"
    transceivers: int = 0


@dataclass(frozen=True)
class PartsCatalog:
    """Switches, NICs and cables by name; ``origin`` names the files read."""

    switches: dict[str, SwitchPart]
    nics: dict[str, NicPart]
    cables: dict[str, CablePart]
    origin: tuple[str, ...] = ()


def _check_sources(section: str, name: str, entry: _Entry, where: str) -> None:
    given = {k for k in type(entry).model_fields if getattr(entry, k) not in (None, [], "")}
    # a cable's speed and transceiver count define the part (its description says them)
    kinds = {"speed", "transceivers"} if section == "cables" else set()
    missing = sorted(given - _UNSOURCED - kinds - set(entry.sources))
    if missing:
        raise ConfigError(f"{where}: {section}.{name}.sources lacks {', '.join(missing)}")


def _parts(raw: Any, where: str) -> _File:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping with switches, nics, cables")
    try:
        parsed = _File.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        key = ".".join(str(p) for p in err["loc"] if not str(p).startswith("function-"))
        got = err.get("input")
        raise ConfigError(f"{where}: {key}: {err['msg']} (got {got!r})") from None
    for section in ("switches", "nics", "cables"):
        for name, entry in getattr(parsed, section).items():
            _check_sources(section, name, entry, where)
    return parsed


def _common(name: str, e: _Entry) -> dict[str, Any]:
    return {
        "name": name, "description": e.description, "price_usd": e.price_usd,
        "watts": e.watts, "as_of": e.as_of, "sources": dict(e.sources),
    }  # fmt: skip


def _merge(base: PartsCatalog, add: _File, origin: str) -> PartsCatalog:
    switches = dict(base.switches)
    nics = dict(base.nics)
    cables = dict(base.cables)
    for n, s in add.switches.items():
        switches[n] = SwitchPart(**_common(n, s), ports=s.ports,
                                 port_Bps=parse_bandwidth(s.port_speed),
                                 default_for=tuple(s.default_for),
                                 transport=tuple(s.transport))  # fmt: skip
    for n, c in add.nics.items():
        nics[n] = NicPart(**_common(n, c), speed_Bps=parse_bandwidth(c.speed),
                          default_for=tuple(c.default_for))  # fmt: skip
    for n, k in add.cables.items():
        cables[n] = CablePart(**_common(n, k), speed_Bps=parse_bandwidth(k.speed),
                              reach=k.reach, transceivers=k.transceivers)  # fmt: skip
    return PartsCatalog(switches, nics, cables, (*base.origin, origin))


@cache
def _shipped() -> PartsCatalog:
    text = resources.files("topologies.catalog").joinpath(_FILE).read_text(encoding="utf-8")
    where = f"catalog {_FILE}"
    try:
        return _merge(
            PartsCatalog({}, {}, {}), _parts(load_shipped_yaml(text, where), where), _FILE
        )
    except ConfigError as e:
        raise TopologyError(str(e)) from None


def parts_catalog(extra: str | Path | None = None) -> PartsCatalog:
    """The shipped parts, with the entries of the user's file ``extra`` added (same names
    replace shipped entries).

    Raises
    ------
    ConfigError
        ``extra`` missing, not a regular file (a folder, a FIFO, a device), not the
        catalog's format, or an entry without its sources.
    """
    base = _shipped()
    if extra is None:
        return base
    path = Path(extra)  # read_text names what a non-file is: a folder, a FIFO, /dev/zero
    where = str(path)
    return _merge(base, _parts(load_yaml(read_text(path, "--parts"), where), where), where)


def switch_for(
    catalog: PartsCatalog, link: LinkSpec | str, name: str | None = None, radix: int | None = None
) -> SwitchPart:
    """The switch a fabric of ``link`` uses: ``name`` when given, else the entry whose
    ``default_for`` lists the link kind, else the cheapest one of the link's transport
    whose ports are at least as fast; with only ``radix`` known, a generic switch of
    ``radix`` ports at the link's rate (priced 0: name one for a bill of materials).

    Raises
    ------
    TopologyError
        Unknown ``name``, or no switch fits and no ``radix`` is given.
    """
    if name is not None:
        if name not in catalog.switches:
            known = ", ".join(sorted(catalog.switches))
            raise TopologyError(f"network.switch: unknown switch {name!r}; known: {known}")
        return catalog.switches[name]
    kind = link if isinstance(link, str) else link.name
    for part in catalog.switches.values():
        if kind in part.default_for:
            return part
    if isinstance(link, LinkSpec):
        fit = [p for p in catalog.switches.values()
               if link.transport in p.transport and p.port_Bps >= link.bandwidth_Bps * (1 - 1e-9)]  # fmt: skip
        if fit:
            return min(fit, key=lambda p: (p.price_usd, p.name))
        if radix is not None:
            return SwitchPart(f"generic-{radix}-port", f"{radix} ports (network.radix)", 0.0,
                              0.0, "", {"price_usd": "not priced: name network.switch"},
                              ports=radix, port_Bps=link.bandwidth_Bps)  # fmt: skip
    raise TopologyError(
        f"network.link {kind!r}: no catalog switch fits it; set network.switch "
        f"(known: {', '.join(sorted(catalog.switches))}) or network.radix"
    )


def nic_for(catalog: PartsCatalog, link_kind: str, speed_Bps: float) -> NicPart | None:
    """The NIC a server with NICs of ``link_kind`` at ``speed_Bps`` holds: the default for
    the kind, else the cheapest NIC at least that fast; None when the catalog has none."""
    for part in catalog.nics.values():
        if link_kind in part.default_for:
            return part
    fast = [p for p in catalog.nics.values() if p.speed_Bps >= speed_Bps * (1 - 1e-9)]
    return min(fast, key=lambda p: (p.price_usd, p.name)) if fast else None


def cable_for(catalog: PartsCatalog, speed_Bps: float, reach: str) -> CablePart | None:
    """The cheapest cable of ``reach`` class (or longer) that carries ``speed_Bps``: the
    slowest such speed first; None when none does."""
    longer = REACHES[REACHES.index(reach) :]
    fit = [
        c for c in catalog.cables.values()
        if c.reach in longer and c.speed_Bps >= speed_Bps * (1 - 1e-9)
    ]  # fmt: skip
    if not fit:
        return None
    return min(fit, key=lambda c: (c.speed_Bps, REACHES.index(c.reach), c.price_usd, c.name))
