"""What a design review reads first: a fabric's parts, cables, bisection and paths.

:func:`fabric_summary` reads a built :class:`~sim.topology.model.Topology` (its graph, and
its :class:`~sim.topology.cabling.FabricPlan` when the fabric is parametric) and returns a
JSON-ready record:

* ``gpus``, ``servers``, GPU models, and NICs by link kind and rate;
* ``tiers``: switches per tier with the switch, its radix and port speed, ports used,
  downlink and uplink capacity, ``oversubscription`` (downlink : uplink) and how the
  count was chosen;
* ``cables``: cables by the tiers they join, speed, link kind and reach class (``rack``
  inside a rack, ``row`` across a row, ``hall`` across the hall), with the catalog part
  a bill of materials prices them as and its pluggable optics (:func:`cable_groups`);
* ``bisection_bandwidth_Bps``: the maximum flow from the first half of the servers to
  the second (bytes/s, one direction), over the network links only; with leaves filled
  in server order that cut keeps whole leaves on each side, the worst cut of a
  symmetric Clos;
* ``ecmp_paths``: equal-cost paths between a NIC of server 0 and the same rail's NIC on
  a server of the same leaf, of another leaf, of another pod, and (rail-optimized) the
  next rail's NIC of another leaf; every parallel cable counts as a path of its own, as
  it does for ECMP hashing;
* ``notes``: the plan's (no spine tier needed, a top tier over its radix).

>>> from sim.topology.presets import load_topology
>>> s = fabric_summary(load_topology("h100-roce-400g"))
>>> s["bisection_bandwidth_Bps"] / 1e12, [t["count"] for t in s["tiers"]], s["ecmp_paths"]["other leaf"]
(6.4, [8, 8], 128)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from sim.topology.model import Topology
from sim.topology.parts import PartsCatalog, cable_for, parts_catalog

if TYPE_CHECKING:  # networkx is imported where a maximum flow is asked for (not at start-up)
    import networkx as nx

__all__ = [
    "CableGroup",
    "cable_groups",
    "ecmp_paths",
    "fabric_summary",
    "max_flow_Bps",
    "nic_links",
]

_FABRIC = ("leaf", "spine", "core", "switch")
_TIER_ORDER = {"nic": 0, "leaf": 1, "switch": 1, "spine": 2, "core": 3}


@dataclass(frozen=True)
class CableGroup:
    """``count`` cables of ``rate_Bps`` (link kind ``kind``) between tiers ``between``,
    of reach class ``reach``, priced as catalog cable ``part`` (None: none fits)."""

    between: str
    count: int
    rate_Bps: float
    kind: str
    reach: str
    part: str | None
    transceivers: int


def _reach(lower: str, upper: str, rails: bool) -> str:
    """Default reach class of a cable between node kinds ``lower`` and ``upper``: a
    top-of-rack leaf sits in its servers' rack; rail leaves, spines and switches of an
    explicit graph sit at the end of a row; cores across the hall."""
    if upper == "core":
        return "hall"
    if lower == "nic":
        return "row" if rails else "rack"
    return "row"


def nic_links(topology: Topology) -> Counter[tuple[str, float]]:
    """NICs on the network by (link kind, line rate in bytes/s) of their switch link."""
    g = topology.graph
    kind_of = {v: d.get("kind") for v, d in g.nodes(data=True)}
    counts: Counter[tuple[str, float]] = Counter()
    for v, kind in kind_of.items():
        if kind != "nic":
            continue
        for _, w, e in g.out_edges(v, data=True):
            if kind_of[w] in _FABRIC:
                counts[(str(e["kind"]), float(e["capacity_Bps"]))] += 1
                break
    return counts


def _graph_cables(topology: Topology) -> Counter[tuple[str, str, float, str]]:
    """Cables of an explicit graph: every NIC-switch and switch-switch edge, once."""
    g = topology.graph
    counts: Counter[tuple[str, str, float, str]] = Counter()
    for u, v, d in g.edges(data=True):
        ku, kv = g.nodes[u].get("kind"), g.nodes[v].get("kind")
        if ku not in (*_FABRIC, "nic") or kv not in _FABRIC:
            continue
        if ku != "nic" and (_TIER_ORDER[ku], u) > (_TIER_ORDER[kv], v):
            continue  # each switch-switch cable once: from the lower tier (or name) end
        lower, upper = sorted((ku, kv), key=lambda k: _TIER_ORDER[k])
        counts[(lower, upper, float(d["capacity_Bps"]), str(d["kind"]))] += int(d.get("cables", 1))
    return counts


def cable_groups(
    topology: Topology,
    catalog: PartsCatalog | None = None,
    nics: Counter[tuple[str, float]] | None = None,
) -> list[CableGroup]:
    """The cables of the scale-out network, grouped by tiers, rate, kind and reach class.

    A NIC-to-switch link and every switch-to-switch cable count once. A parametric fabric's
    switch cables come from its plan, its NIC cables from its NICs; an explicit graph's
    from its edges (an edge of ``cables: k`` counts ``k``). Links inside servers are not
    cables. ``nics``: :func:`nic_links` of the topology, when the caller has it.
    """
    catalog = catalog or parts_catalog()
    plan = topology.fabric
    if plan is None:
        counts = _graph_cables(topology)
    else:
        nics = nic_links(topology) if nics is None else nics
        counts = Counter({("nic", "leaf", r, k): n for (k, r), n in nics.items()})
        for grp in plan.links:
            lower, upper = grp.between.split("-")
            counts[(lower, upper, grp.rate_Bps, grp.kind)] += grp.count
    rails = plan.rails if plan is not None else False
    out = []
    for (lower, upper, rate, kind), n in sorted(
        counts.items(), key=lambda x: (_TIER_ORDER[x[0][0]], x[0])
    ):
        reach = _reach(lower, upper, rails)
        part = cable_for(catalog, rate, reach)
        out.append(CableGroup(f"{lower}-{upper}", n, rate, kind, reach,
                              part.name if part else None, part.transceivers if part else 0))  # fmt: skip
    return out


def _net_graph(topology: Topology, a: set[int], b: set[int]) -> nx.DiGraph:
    """The switches, capacities times cables, with a source feeding the NICs of servers
    ``a`` and a sink draining those of ``b`` (each NIC's link folded into the source's or
    the sink's edge to its switch)."""
    import networkx as nx

    g = topology.graph
    net = nx.DiGraph()
    for u, v, d in g.edges(data=True):
        ku, kv = g.nodes[u].get("kind"), g.nodes[v].get("kind")
        cap = float(d["capacity_Bps"]) * int(d.get("cables", 1))
        if ku in _FABRIC and kv in _FABRIC:
            net.add_edge(u, v, capacity=cap)
        elif ku == "nic" and kv in _FABRIC and g.nodes[u].get("node") in a:
            _add_capacity(net, "_source", v, cap)
        elif ku in _FABRIC and kv == "nic" and g.nodes[v].get("node") in b:
            _add_capacity(net, u, "_sink", cap)
    return net


def _add_capacity(net: nx.DiGraph, u: str, v: str, cap: float) -> None:
    if net.has_edge(u, v):
        net.edges[u, v]["capacity"] += cap
    else:
        net.add_edge(u, v, capacity=cap)


def max_flow_Bps(topology: Topology, a: list[int], b: list[int]) -> float:
    """Maximum flow (bytes/s) from the NICs of servers ``a`` to those of servers ``b``
    over the network links (NIC links and switch cables at their capacities)."""
    import networkx as nx

    net = _net_graph(topology, set(a), set(b))
    if "_source" not in net or "_sink" not in net:
        return 0.0
    return float(nx.maximum_flow_value(net, "_source", "_sink"))


def _path_count(topology: Topology, src: str, dst: str) -> int:
    """Shortest NIC-to-NIC paths through switches, a parallel cable counting as a path."""
    g = topology.graph
    dist = {src: 0}
    ways = {src: 1}
    frontier = [src]
    while frontier and dst not in dist:
        nxt: dict[str, int] = {}
        for u in frontier:
            for v in g.successors(u):
                if v != dst and g.nodes[v].get("kind") not in _FABRIC:
                    continue
                if v in dist and dist[v] <= dist[u]:
                    continue
                dist[v] = dist[u] + 1
                nxt[v] = nxt.get(v, 0) + ways[u] * int(g.edges[u, v].get("cables", 1))
        ways.update(nxt)
        frontier = sorted(nxt)
    return ways.get(dst, 0)


def ecmp_paths(topology: Topology) -> dict[str, int]:
    """Equal-cost paths from server 0's first NIC (see the module docstring)."""
    plan = topology.fabric
    if plan is None:
        return {}
    g = topology.graph
    nics: dict[int, list[str]] = {}
    for v, d in g.nodes(data=True):
        if d.get("kind") == "nic":
            nics.setdefault(int(d["node"]), []).append(v)
    for k in nics:
        nics[k].sort()
    leaf_of = {k: next((w for w in g.successors(ns[0]) if g.nodes[w].get("kind") == "leaf"), None)
               for k, ns in nics.items()}  # fmt: skip
    pod_of = {k: g.nodes[w].get("unit", 0) for k, w in leaf_of.items() if w is not None}
    units_per_pod = max(1, plan.units // max(plan.pods, 1))
    out: dict[str, int] = {}
    src = nics[0][0]
    for label, want in (("same leaf", lambda k: leaf_of[k] == leaf_of[0]),
                        ("other leaf", lambda k: leaf_of[k] != leaf_of[0]
                         and pod_of[k] // units_per_pod == pod_of[0] // units_per_pod),
                        ("other pod", lambda k: pod_of[k] // units_per_pod
                         != pod_of[0] // units_per_pod)):  # fmt: skip
        other = next((k for k in sorted(nics) if k != 0 and want(k)), None)
        if other is not None:
            out[label] = _path_count(topology, src, nics[other][0])
    if plan.rails and len(nics[0]) > 1:
        other = next((k for k in sorted(nics) if leaf_of[k] != leaf_of[0]), None)
        if other is not None:
            out["other rail"] = _path_count(topology, src, nics[other][1])
    return out


def _nics(topology: Topology) -> list[dict[str, Any]]:
    return [
        {"kind": k, "rate_Bps": r, "count": n} for (k, r), n in sorted(nic_links(topology).items())
    ]


def _tiers(topology: Topology) -> list[dict[str, Any]]:
    plan = topology.fabric
    if plan is not None:
        return [{**asdict(t), "oversubscription": t.oversubscription, "over_radix": t.over_radix}
                for t in plan.tiers]  # fmt: skip
    kinds = Counter(d.get("kind") for _, d in topology.graph.nodes(data=True))
    return [{"name": k, "count": kinds[k]} for k in _FABRIC if kinds.get(k)]


def fabric_summary(topology: Topology, catalog: PartsCatalog | None = None) -> dict[str, Any]:
    """The design-review summary of ``topology`` (see the module docstring), JSON-ready."""
    catalog = catalog or parts_catalog()
    plan = topology.fabric
    half = topology.nodes // 2
    models = Counter(g.name for g in topology.gpu_models) or Counter(
        {topology.gpu.name: topology.num_gpus}
    )
    cables = [asdict(c) for c in cable_groups(topology, catalog)]
    bisection = (
        max_flow_Bps(topology, list(range(half)), list(range(half, 2 * half))) if half else 0.0
    )
    return {
        "topology": topology.name,
        "description": topology.description,
        "gpus": topology.num_gpus,
        "servers": topology.nodes,
        "gpus_per_server": topology.gpus_per_node,
        "gpu_models": dict(sorted(models.items())),
        "nics": _nics(topology),
        "fabric": plan.kind if plan is not None else ("graph" if cables else "none"),
        "routing": topology.routing,
        "tiers": _tiers(topology),
        "switches": sum(t["count"] for t in _tiers(topology)),
        "cables": cables,
        "optics": sum(c["count"] * c["transceivers"] for c in cables),
        "bisection_bandwidth_Bps": bisection,
        "bisection_cut": f"servers 0-{half - 1} | {half}-{2 * half - 1}" if half else "",
        "ecmp_paths": ecmp_paths(topology),
        "notes": list(plan.notes) if plan is not None else [],
    }
