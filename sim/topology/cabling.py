"""How a parametric fabric is cabled: switch counts per tier, cables per switch pair.

The plan follows from the servers' NICs, ``network.oversubscription`` and the switch
(``network.switch``, else the catalog's default for ``network.link``; ``network.radix``
overrides its port count), the way a network architect sizes a Clos fabric:

* a leaf holds ``nodes_per_leaf`` servers: one NIC of each (a rail leaf,
  rail-optimized) or all of them (a top-of-rack leaf); its **downlink capacity** is those
  NICs at the fastest NIC's line rate;
* its **uplinks** are cables of ``network.link`` at that kind's line rate, as many as
  carry ``downlink / oversubscription``; a ratio that no whole number of cables gives is
  refused with the ratios that do;
* a NIC or cable slower than the switch port takes a fraction of a port (a breakout
  cable), a faster one several ports; downlinks plus uplinks must fit the leaf's ports;
* **spines**: ``network.spines``, else one per leaf uplink (every leaf has one cable to
  every spine, the textbook folded Clos); each leaf-spine pair then carries
  ``uplinks / spines`` cables, which must be a whole number. One leaf in all needs no
  spine tier, and none is built;
* three tiers (``fat-tree-3tier``): pods of ``nodes_per_pod`` servers with
  ``spines_per_pod`` spines (default one per leaf uplink); spine ``j`` of every pod joins
  the ``cores_per_plane`` cores of plane ``j`` with ``spine downlink /
  core_oversubscription`` of cables, spread evenly. One pod needs no core tier.

The tier at the top (spines of two tiers, cores of three) grows with the cluster; when it
needs more ports than one switch has, the plan says so (``notes``): such a switch is a
modular director, or the fabric wants another tier.

>>> from sim.catalog import link_spec
>>> from sim.topology.parts import parts_catalog, switch_for
>>> from sim.topology.sections import NetworkSpec
>>> net = NetworkSpec(kind="leaf-spine", link="roce-400g", oversubscription="2:1", nodes_per_leaf=4)
>>> nic = link_spec("roce-400g")
>>> plan = plan_fabric(net, [8] * 64, nic.bandwidth_Bps / 2, link_spec("roce-400g"),
...                    switch_for(parts_catalog(), "roce-400g"), "README example")
>>> [(t.name, t.count, t.cables_up) for t in plan.tiers]
[('leaf', 16, 8), ('spine', 8, 0)]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.catalog import LinkSpec
from sim.errors import TopologyError
from sim.topology.parts import SwitchPart
from sim.topology.sections import NetworkSpec

__all__ = ["FabricPlan", "LinkGroup", "Tier", "plan_fabric", "uses_rails"]

_TOL = 1e-9


@dataclass(frozen=True)
class Tier:
    """One tier of switches as cabled (per switch: the design's most loaded one).

    Attributes
    ----------
    name : str
        ``leaf``, ``spine`` or ``core``.
    count : int
        Switches built in this tier.
    switch : str
        Catalog switch (parts catalog name).
    radix : int
        Ports of one switch, each ``port_Bps`` bytes/s.
    port_Bps : float
        Speed of one port, bytes/s per direction.
    ports_used : int
        Ports one switch needs (breakouts take fractions of a port, rounded up at the end).
    down_Bps, up_Bps : float
        Capacity toward the tier below and above, per switch (``up_Bps`` 0 at the top).
    cables_up : int
        Uplink cables of one switch.
    cables_per_pair : int
        Cables between one switch and each switch above it (0 at the top).
    how : str
        How the count was chosen, e.g. ``"network.spines"`` or ``"one per leaf uplink"``.
    """

    name: str
    count: int
    switch: str
    radix: int
    port_Bps: float
    ports_used: int
    down_Bps: float
    up_Bps: float
    cables_up: int
    cables_per_pair: int
    how: str

    @property
    def oversubscription(self) -> float | None:
        """Downlink : uplink capacity of one switch (None at the top of the fabric)."""
        return self.down_Bps / self.up_Bps if self.up_Bps > 0 else None

    @property
    def over_radix(self) -> bool:
        """True when one switch would need more ports than it has (a director switch)."""
        return self.ports_used > self.radix


@dataclass(frozen=True)
class LinkGroup:
    """Cables of one kind between two tiers: ``count`` cables of ``rate_Bps`` each."""

    between: str
    count: int
    rate_Bps: float
    kind: str


@dataclass(frozen=True)
class FabricPlan:
    """The cabling of a parametric fabric (see the module docstring).

    Attributes
    ----------
    kind : str
        ``rail-optimized``, ``leaf-spine`` or ``fat-tree-3tier``.
    rails : bool
        Leaves per rail (one NIC of each server per leaf).
    tiers : tuple[Tier, ...]
        Leaves first.
    links : tuple[LinkGroup, ...]
        Each switch tier's uplink cables, leaves first (NIC-leaf cables are the graph's:
        :mod:`sim.topology.summary` counts them per NIC rate).
    units, pods : int
        Groups of ``nodes_per_leaf`` servers; groups of units (1 unless three tiers).
    notes : tuple[str, ...]
        What a reviewer should know (a top tier over its radix, no spine tier needed).
    """

    kind: str
    rails: bool
    tiers: tuple[Tier, ...]
    links: tuple[LinkGroup, ...]
    units: int
    pods: int
    notes: tuple[str, ...]

    def tier(self, name: str) -> Tier | None:
        """The tier called ``name``, or None when the fabric has none."""
        return next((t for t in self.tiers if t.name == name), None)


def uses_rails(net: NetworkSpec) -> bool:
    """Whether leaves are per rail (rail-optimized; three tiers unless ``rails: false``)."""
    if net.kind == "rail-optimized":
        return True
    if net.kind == "leaf-spine":
        return False
    return True if net.rails is None else net.rails


def _gbps(bps: float) -> str:
    return f"{bps * 8 / 1e9:g} Gb/s"


def _whole(x: float) -> int | None:
    n = round(x)
    return n if n >= 1 and abs(x - n) <= _TOL * max(1.0, x) else None


def _uplinks(
    down_Bps: float, ratio: float, link: LinkSpec, key: str, what: str, source: str
) -> int:
    """Uplink cables carrying ``down_Bps / ratio``; refused when no whole number does."""
    want = down_Bps / ratio / link.bandwidth_Bps
    n = _whole(want)
    if n is not None:
        return n
    per = down_Bps / link.bandwidth_Bps
    near = sorted({max(1, math.floor(want)), math.ceil(want)})
    fits = ", ".join(f"{k} cable{'s' * (k > 1)} give{'s' * (k == 1)} {per / k:.4g}:1"
                     for k in near if per / k >= 1)  # fmt: skip
    sexagesimal = ratio >= 60 and ratio == int(ratio)
    hint = (f"; an unquoted {int(ratio) // 60}:{int(ratio) % 60} is the number {int(ratio)} to "
            "YAML 1.1: write \"2:1\" in quotes, or 2.0") if sexagesimal else ""  # fmt: skip
    raise TopologyError(
        f"{source}: {key} {ratio:g}: {what} {_gbps(down_Bps)} down; / {ratio:g} = "
        f"{_gbps(down_Bps / ratio)} up is {want:.4g} cables of {_gbps(link.bandwidth_Bps)} "
        f"({link.name}); no whole number of cables gives {ratio:g}:1"
        + (f" ({fits})" if fits else "")
        + hint
    )


def _per_pair(cables: int, count: int, key: str, what: str, source: str) -> int:
    if cables % count:
        divisors = [d for d in range(1, cables + 1) if cables % d == 0]
        raise TopologyError(
            f"{source}: {key} {count}: {what} has {cables} uplink cables; {count} switches "
            f"above cannot each get a whole number of them (allowed: {', '.join(map(str, divisors))})"
        )
    return cables // count


def _ports(n_down: float, down_rate: float, n_up: int, up_rate: float, port: float) -> int:
    return math.ceil(n_down * down_rate / port + n_up * up_rate / port - _TOL)


def _check_radix(ports: int, radix: int, what: str, detail: str, source: str) -> None:
    if ports > radix:
        raise TopologyError(
            f"{source}: network: {what} needs {ports} ports ({detail}); the switch has "
            f"{radix} (network.switch / network.radix)"
        )


def plan_fabric(
    net: NetworkSpec,
    nics: list[int],
    nic_Bps: float,
    link: LinkSpec,
    switch: SwitchPart,
    source: str,
) -> FabricPlan:
    """Plan the fabric of ``net`` for servers holding ``nics[k]`` NICs each.

    Parameters
    ----------
    net : NetworkSpec
        The fabric (``kind`` not ``none``).
    nics : list[int]
        NICs of each server, in server order.
    nic_Bps : float
        The fastest NIC's line rate, bytes/s (leaf ports are sized for it).
    link : LinkSpec
        The switch-to-switch link kind (its line rate is the cable's).
    switch : SwitchPart
        The switch of every tier (radix: ``net.radix`` when given, else its ports).
    source : str
        Where the spec came from, for messages.

    Raises
    ------
    TopologyError
        A ratio no whole number of cables gives, a spine count that does not divide the
        uplinks, or a leaf (spine of three tiers) with more cables than ports; the
        message gives the numbers.
    """
    rails = uses_rails(net)
    per, width = net.nodes_per_leaf, max(nics)
    units = math.ceil(len(nics) / per)
    leaves_per_unit = width if rails else 1
    radix, port = net.radix or switch.ports, switch.port_Bps
    down_n = per * (1 if rails else width)  # NIC ports of one leaf, by design
    down = down_n * nic_Bps
    leaf_what = f"a leaf has {down_n} NIC ports x {_gbps(nic_Bps)} ="
    up_n = _uplinks(down, net.oversubscription, link, "network.oversubscription", leaf_what, source)
    leaf_ports = _ports(down_n, nic_Bps, up_n, link.bandwidth_Bps, port)
    _check_radix(leaf_ports, radix, "a leaf",
                 f"{down_n} x {_gbps(nic_Bps)} down + {up_n} x {_gbps(link.bandwidth_Bps)} up "
                 f"on {_gbps(port)} ports", source)  # fmt: skip
    leaves = units * leaves_per_unit
    if len(nics) < per:
        spare = (f"{len(nics)} of the {per} servers a leaf is designed for are attached; the "
                 "switches above are built (and priced) for the full design")  # fmt: skip
    else:
        spare = ""
    if net.kind == "fat-tree-3tier":
        return _three_tier(net, rails, units, leaves_per_unit, down, up_n, leaf_ports, link,
                           switch, radix, source)  # fmt: skip
    notes: list[str] = []
    if leaves == 1:
        leaf = Tier("leaf", 1, switch.name, radix, port, leaf_ports, down, 0.0, 0, 0,
                    "one leaf holds every server")  # fmt: skip
        notes.append("one leaf holds every server: no spine tier is needed, none is built")
        return FabricPlan(net.kind, rails, (leaf,), (), units, 1, tuple(notes))
    if spare:
        notes.append(spare)
    count = net.spines or up_n
    how = "network.spines" if net.spines else "one per leaf uplink (default)"
    pair = _per_pair(up_n, count, "network.spines", "a leaf", source)
    spine_ports = _ports(leaves * pair, link.bandwidth_Bps, 0, 0.0, port)
    leaf = Tier("leaf", leaves, switch.name, radix, port, leaf_ports, down,
                up_n * link.bandwidth_Bps, up_n, pair, f"{leaves_per_unit} per {per} servers")  # fmt: skip
    spine = Tier("spine", count, switch.name, radix, port, spine_ports,
                 leaves * pair * link.bandwidth_Bps, 0.0, 0, 0, how)  # fmt: skip
    _director_note(spine, notes, "fat-tree-3tier")
    ups = LinkGroup("leaf-spine", leaves * up_n, link.bandwidth_Bps, link.name)
    return FabricPlan(net.kind, rails, (leaf, spine), (ups,), units, 1, tuple(notes))


def _director_note(top: Tier, notes: list[str], fix: str) -> None:
    if top.over_radix:
        notes.append(
            f"each {top.name} needs {top.ports_used} ports but the switch has {top.radix}: "
            f"that is a modular (director) switch, or a fabric with another tier ({fix})"
        )


def _three_tier(
    net: NetworkSpec, rails: bool, units: int, leaves_per_unit: int, down: float, up_n: int,
    leaf_ports: int, link: LinkSpec, switch: SwitchPart, radix: int, source: str,
) -> FabricPlan:  # fmt: skip
    per = net.nodes_per_leaf
    per_pod = net.nodes_per_pod or 4 * per
    if per_pod % per:
        raise TopologyError(
            f"{source}: network.nodes_per_pod: must be a multiple of nodes_per_leaf "
            f"{per} (got {per_pod})"
        )
    units_per_pod = per_pod // per
    pods = math.ceil(units / units_per_pod)
    pod_leaves = units_per_pod * leaves_per_unit
    spines_n = net.spines_per_pod or up_n
    how = "network.spines_per_pod" if net.spines_per_pod else "one per leaf uplink (default)"
    pair1 = _per_pair(up_n, spines_n, "network.spines_per_pod", "a leaf", source)
    rate, port = link.bandwidth_Bps, switch.port_Bps
    spine_down = pod_leaves * pair1 * rate
    notes: list[str] = []
    leaves = units * leaves_per_unit
    leaf = Tier("leaf", leaves, switch.name, radix, port, leaf_ports, down, up_n * rate, up_n,
                pair1, f"{leaves_per_unit} per {per} servers")  # fmt: skip
    if pods == 1:
        spine = Tier("spine", spines_n, switch.name, radix, port,
                     _ports(pod_leaves * pair1, rate, 0, 0.0, port), spine_down, 0.0, 0, 0, how)  # fmt: skip
        notes.append("one pod holds every server: no core tier is needed, none is built")
        _director_note(spine, notes, "a smaller nodes_per_pod")
        links: tuple[LinkGroup, ...] = (LinkGroup("leaf-spine", leaves * up_n, rate, link.name),)
        return FabricPlan(net.kind, rails, (leaf, spine), links, units, 1, tuple(notes))
    what = f"a spine has {pod_leaves * pair1} down x {_gbps(rate)} ="
    up2 = _uplinks(spine_down, net.core_oversubscription, link, "network.core_oversubscription",
                   what, source)  # fmt: skip
    cores = net.cores_per_plane
    pair2 = _per_pair(up2, cores, "network.cores_per_plane", "a spine", source)
    spine_ports = _ports(pod_leaves * pair1, rate, up2, rate, port)
    _check_radix(spine_ports, radix, "a spine",
                 f"{pod_leaves * pair1} down + {up2} up x {_gbps(rate)}", source)  # fmt: skip
    spine = Tier("spine", pods * spines_n, switch.name, radix, port, spine_ports, spine_down,
                 up2 * rate, up2, pair2, how)  # fmt: skip
    core = Tier("core", spines_n * cores, switch.name, radix, port,
                _ports(pods * pair2, rate, 0, 0.0, port), pods * pair2 * rate, 0.0, 0, 0,
                f"network.cores_per_plane x {spines_n} planes")  # fmt: skip
    _director_note(core, notes, "more cores_per_plane")
    links = (LinkGroup("leaf-spine", leaves * up_n, rate, link.name),
             LinkGroup("spine-core", pods * spines_n * up2, rate, link.name))  # fmt: skip
    return FabricPlan(net.kind, rails, (leaf, spine, core), links, units, pods, tuple(notes))
