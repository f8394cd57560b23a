"""Scale-out fabrics: leaves, spines and cores between the servers' NICs.

Servers are grouped in *units* of ``nodes_per_leaf``. In a rail-optimized fabric a unit
has one leaf per rail (NIC index) and NIC ``r`` of each server goes to the rail-``r``
leaf; otherwise a unit has one top-of-rack leaf holding all its servers' NICs. Leaf
uplinks follow the design rule *uplink capacity = downlink capacity / oversubscription*:
a leaf's downlink capacity is (ports down) x (NIC rate), and the bundle between a leaf and
a spine carries ``downlink / (oversubscription x spines)`` over as many cables of the
switch link's line rate as that takes; each cable is a link of its own, an equal-cost
choice for ECMP (flows may collide on one cable while another idles). ``network.link`` sets the kind and per-hop
latency of switch-to-switch edges. A three-tier fat-tree groups units into pods with
their own spines; spine ``j`` of every pod joins the ``cores_per_plane`` cores of plane
``j``, with ``spine downlink / core_oversubscription`` spread over them.
"""

from __future__ import annotations

import math

from sim.catalog import LinkSpec
from sim.errors import TopologyError
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


def _uses_rails(net: NetworkSpec) -> bool:
    if net.kind == "rail-optimized":
        return True
    if net.kind == "leaf-spine":
        return False
    return True if net.rails is None else net.rails


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
    net: NetworkSpec,
    nics: list[list[str]],
    nic: LinkSpec,
    link: LinkSpec,
    source: str,
) -> None:
    """Add the switches of ``net`` and connect every server's NICs to them.

    Parameters
    ----------
    g : DiGraph
        Graph holding the servers.
    net : NetworkSpec
        Fabric description (``kind`` not ``none``).
    nics : list[list[str]]
        NIC names per server, in rail order.
    nic : LinkSpec
        NIC<->leaf link kind (also the downlink rate used for oversubscription).
    link : LinkSpec
        Switch<->switch link kind.
    source : str
        Where the spec came from, for messages.
    """
    rails = _uses_rails(net)
    leaves = _add_leaves(g, net, nics, nic, rails)
    # A leaf's uplinks are sized for its design port count, however many servers are
    # attached: a 2-server slice of a fat-tree still has full-rate spine links.
    ports = net.nodes_per_leaf * (1 if rails else max(map(len, nics)))
    down_Bps = ports * nic.bandwidth_Bps
    if net.kind == "fat-tree-3tier":
        _three_tier(g, net, leaves, down_Bps, ports, link, source)
        return
    count = net.spines or ports
    spines = [f"spine{s:0{len(str(count - 1))}d}" for s in range(count)]
    _connect_all(
        g,
        [leaf for unit in leaves for leaf in unit],
        spines,
        "spine",
        down_Bps / (net.oversubscription * count),
        link,
    )


def _connect_all(
    g: DiGraph, lower: list[str], upper: list[str], kind: str, cap_Bps: float, link: LinkSpec
) -> None:
    """Link every node of ``lower`` to every node of ``upper`` (new, of ``kind``).

    ``cap_Bps`` is the capacity each lower node has toward each upper node; it is laid as
    ``ceil(cap_Bps / line rate)`` cables of equal capacity (at most the link kind's line
    rate each), every cable a link of its own.
    """
    cables = max(1, math.ceil(cap_Bps / link.bandwidth_Bps * (1 - 1e-9)))
    for name in upper:
        g.add_node(name, kind=kind)
    for a in lower:
        for b in upper:
            add_link(g, a, b, link, cap_Bps / cables, cables)


def _three_tier(
    g: DiGraph,
    net: NetworkSpec,
    leaves: list[list[str]],
    down_Bps: float,
    ports: int,
    link: LinkSpec,
    source: str,
) -> None:
    per_pod = net.nodes_per_pod or 4 * net.nodes_per_leaf
    if per_pod % net.nodes_per_leaf:
        raise TopologyError(
            f"{source}: network.nodes_per_pod: must be a multiple of nodes_per_leaf "
            f"{net.nodes_per_leaf} (got {per_pod})"
        )
    units_per_pod = per_pod // net.nodes_per_leaf
    pods = math.ceil(len(leaves) / units_per_pod)
    spines_n = net.spines_per_pod or ports
    leaf_up = down_Bps / (net.oversubscription * spines_n)
    spine_down = units_per_pod * len(leaves[0]) * leaf_up
    cores = net.cores_per_plane
    core_cap = spine_down / (net.core_oversubscription * cores)
    pw, sw, cw = len(str(pods - 1)), len(str(spines_n - 1)), len(str(cores - 1))
    for q in range(pods):
        pod_leaves = [
            x for unit in leaves[q * units_per_pod : (q + 1) * units_per_pod] for x in unit
        ]
        spines = [f"pod{q:0{pw}d}.spine{j:0{sw}d}" for j in range(spines_n)]
        _connect_all(g, pod_leaves, spines, "spine", leaf_up, link)
        for j, spine in enumerate(spines):
            g.nodes[spine]["pod"] = q
            for c in range(cores):
                core = f"core{j:0{sw}d}.{c:0{cw}d}"
                g.add_node(core, kind="core")
                n = max(1, math.ceil(core_cap / link.bandwidth_Bps * (1 - 1e-9)))
                add_link(g, spine, core, link, core_cap / n, n)
