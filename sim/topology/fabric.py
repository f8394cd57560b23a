"""Scale-out fabrics: leaves, spines and cores between the servers' NICs, laid as planned.

Servers are grouped in *units* of ``nodes_per_leaf``. In a rail-optimized fabric a unit
has one leaf per rail (NIC index) and NIC ``r`` of each server goes to the rail-``r``
leaf; otherwise a unit has one top-of-rack leaf holding all its servers' NICs. How many
spines and cores there are and how many cables join each pair of switches is the
:class:`~sim.topology.cabling.FabricPlan`'s (:func:`sim.topology.cabling.plan_fabric`):
every cable is a link of its own at the switch link kind's line rate, an equal-cost choice
for ECMP (flows may collide on one cable while another idles). ``network.link`` sets the
kind and per-hop latency of switch-to-switch edges. A three-tier fat-tree groups units
into pods with their own spines; spine ``j`` of every pod joins the ``cores_per_plane``
cores of plane ``j``.
"""

from __future__ import annotations

import math

from sim.catalog import LinkSpec
from sim.errors import TopologyError
from sim.topology.cabling import FabricPlan
from sim.topology.digraph import DiGraph
from sim.topology.sections import NetworkSpec

__all__ = ["add_fabric", "add_link"]


def add_link(
    g: DiGraph,
    u: str,
    v: str,
    link: LinkSpec,
    capacity_Bps: float | None = None,
    cables: int = 1,
) -> None:
    """Add one physical link (or ``cables`` parallel ones) as directed edges both ways.

    Parameters
    ----------
    g : DiGraph
        The graph to extend.
    u, v : str
        Endpoint node names. The direction leaving a NIC also carries the link kind's
        per-message overhead (charged once per transfer, at the sending NIC).
    link : LinkSpec
        Catalog kind: sets ``kind``, ``scope``, ``transport``, ``latency_s`` and, by
        default, capacity.
    capacity_Bps : float, optional
        Capacity per direction of each cable in bytes/s (default: the kind's line rate).
    cables : int
        Parallel cables between ``u`` and ``v``: each becomes a link of its own
        (:class:`~sim.topology.model.Topology` expands ``cables``), so ECMP can collide.
    """
    cap = link.bandwidth_Bps if capacity_Bps is None else float(capacity_Bps)
    if not cap > 0:
        raise TopologyError(f"link {u}<->{v} ({link.name}): bandwidth must be > 0 (got {cap!r})")
    for a, b in ((u, v), (v, u)):
        sender_nic = a in g and g.nodes[a].get("kind") == "nic"
        lat = link.latency_s + (link.overhead_s if sender_nic else 0.0)
        g.add_edge(
            a, b, capacity_Bps=cap, latency_s=lat, kind=link.name, scope=link.scope,
            transport=link.transport, cables=cables,
        )  # fmt: skip


def _add_leaves(
    g: DiGraph, net: NetworkSpec, nics: list[list[str]], nic: LinkSpec, rails: bool
) -> list[list[str]]:
    """Add leaves and NIC<->leaf links; return the leaves of each unit."""
    per = net.nodes_per_leaf
    units = math.ceil(len(nics) / per)
    rails_n = max(map(len, nics)) if rails else 1
    uw, rw = len(str(units - 1)), len(str(rails_n - 1))
    leaves: list[list[str]] = []
    for u in range(units):
        names = [f"leaf{u:0{uw}d}" + (f".r{r:0{rw}d}" if rails else "") for r in range(rails_n)]
        for r, name in enumerate(names):
            g.add_node(name, kind="leaf", unit=u, **({"rail": r} if rails else {}))
        leaves.append(names)
    for k, server in enumerate(nics):
        for j, name in enumerate(server):
            add_link(g, name, leaves[k // per][j if rails else 0], nic)  # NIC first: overhead
    return leaves


def add_fabric(
    g: DiGraph,
    plan: FabricPlan,
    net: NetworkSpec,
    nics: list[list[str]],
    nic: LinkSpec,
    link: LinkSpec,
) -> None:
    """Add the switches of ``plan`` and connect every server's NICs to them.

    Parameters
    ----------
    g : DiGraph
        Graph holding the servers.
    plan : FabricPlan
        Switch counts and cables per pair (:func:`sim.topology.cabling.plan_fabric`).
    net : NetworkSpec
        Fabric description (``kind`` not ``none``).
    nics : list[list[str]]
        NIC names per server, in rail order.
    nic : LinkSpec
        NIC<->leaf link kind (each server's own rate is laid by the caller).
    link : LinkSpec
        Switch<->switch link kind: one link per cable at its line rate.
    """
    leaves = _add_leaves(g, net, nics, nic, plan.rails)
    leaf, spine = plan.tier("leaf"), plan.tier("spine")
    assert leaf is not None
    if spine is None:
        return
    if plan.kind == "fat-tree-3tier":
        _three_tier(g, plan, leaves, net.nodes_per_pod or 4 * net.nodes_per_leaf,
                    net.nodes_per_leaf, link)  # fmt: skip
        return
    spines = [f"spine{s:0{len(str(spine.count - 1))}d}" for s in range(spine.count)]
    _connect_all(g, [x for unit in leaves for x in unit], spines, "spine",
                 leaf.cables_per_pair, link)  # fmt: skip


def _connect_all(
    g: DiGraph, lower: list[str], upper: list[str], kind: str, cables: int, link: LinkSpec
) -> None:
    """Link every node of ``lower`` to every node of ``upper`` (new, of ``kind``) with
    ``cables`` cables at ``link``'s line rate, every cable a link of its own."""
    for name in upper:
        g.add_node(name, kind=kind)
    for a in lower:
        for b in upper:
            add_link(g, a, b, link, link.bandwidth_Bps, cables)


def _three_tier(
    g: DiGraph, plan: FabricPlan, leaves: list[list[str]], per_pod: int, per_leaf: int,
    link: LinkSpec,
) -> None:  # fmt: skip
    leaf, spine, core = plan.tier("leaf"), plan.tier("spine"), plan.tier("core")
    assert leaf is not None and spine is not None
    units_per_pod = per_pod // per_leaf
    spines_n = spine.count // plan.pods
    cores = core.count // spines_n if core is not None else 0
    pw, sw, cw = len(str(plan.pods - 1)), len(str(spines_n - 1)), len(str(max(cores - 1, 0)))
    for q in range(plan.pods):
        pod_leaves = [
            x for unit in leaves[q * units_per_pod : (q + 1) * units_per_pod] for x in unit
        ]
        spines = [f"pod{q:0{pw}d}.spine{j:0{sw}d}" for j in range(spines_n)]
        _connect_all(g, pod_leaves, spines, "spine", leaf.cables_per_pair, link)
        for j, name in enumerate(spines):
            g.nodes[name]["pod"] = q
            for c in range(cores):
                name_c = f"core{j:0{sw}d}.{c:0{cw}d}"
                g.add_node(name_c, kind="core")
                add_link(g, name, name_c, link, link.bandwidth_Bps, spine.cables_per_pair)
