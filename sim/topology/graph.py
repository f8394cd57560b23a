"""Explicit graphs in topology files: nodes and edges written out, for any design.

The ``graph`` section lists parts and the links between them::

    graph:
      nodes:
        - {name: s0.gpu0, kind: gpu, server: 0}
        - {name: s0.nic0, kind: nic, server: 0}
        - {name: sw0, kind: switch}
      edges:
        - {a: s0.gpu0, b: s0.nic0, link: pcie-gen5}
        - {a: s0.nic0, b: sw0, link: {bandwidth: 400Gb/s, latency: 1us, transport: roce}}
        - {a: "sw*", b: "core*", link: ib-ndr, cables: 2}   # globs: every pair

Node kinds: ``gpu``, ``nvswitch``, ``pcie_switch``, ``host``, ``nic`` (server parts,
with ``server``: the server's index, required for GPUs) and ``leaf``, ``spine``,
``core``, ``switch`` (the fabric). Optional ``rail``, ``unit`` and ``pod`` become node
attributes, as the parametric builder sets them. Servers are numbered ``0..S-1``, each
holds at least one GPU and all hold the same number (one GPU model per topology, from
``gpu``). GPUs take ranks server by server, in the order listed.

Without ``node``/``servers`` the graph is the whole cluster. With them, the servers
are built as usual (names ``n<k>.gpu<i>``, ``n<k>.nic<j>``, ...) and the graph adds
the fabric: its nodes may not be server parts, and its edges may name the generated
parts. An edge's ``a`` and ``b`` are node names or shell-style globs (``*``, ``?``,
``[0-3]``); a glob edge links every matching pair once (unordered, never a node to
itself), and must match at least one node on each side. ``link`` is a link kind or an
inline link (:mod:`sim.topology.links`); ``cables: k`` stands for ``k`` parallel cables
of that link: the edge carries ``cables=k`` with the link's capacity per cable, and each
cable becomes a link of its own (an equal-cost choice: ECMP flows can collide).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from fnmatch import translate
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from sim.catalog import LinkSpec
from sim.errors import TopologyError
from sim.topology.digraph import DiGraph
from sim.topology.links import InlineLink, LinkRef, link_from_ref

__all__ = ["FABRIC_KINDS", "SERVER_KINDS", "GraphEdge", "GraphNode", "GraphSpec", "add_graph"]

SERVER_KINDS = ("gpu", "nvswitch", "pcie_switch", "host", "nic")
FABRIC_KINDS = ("leaf", "spine", "core", "switch")
NodeKind = Literal[
    "gpu", "nvswitch", "pcie_switch", "host", "nic", "leaf", "spine", "core", "switch"
]
_GLOB = re.compile(r"[*?\[\]]")
_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)


class GraphNode(BaseModel):
    """One part: its unique name, kind and (server parts) server index."""

    model_config = _STRICT
    name: str = Field(min_length=1)
    kind: NodeKind
    server: int | None = Field(default=None, ge=0)
    rail: int | None = Field(default=None, ge=0)
    unit: int | None = Field(default=None, ge=0)
    pod: int | None = Field(default=None, ge=0)


class GraphEdge(BaseModel):
    """One link (or ``cables`` parallel ones) between ``a`` and ``b`` (names or globs)."""

    model_config = _STRICT
    a: str = Field(min_length=1)
    b: str = Field(min_length=1)
    link: LinkRef
    cables: int = Field(default=1, ge=1)


class GraphSpec(BaseModel):
    """The ``graph`` section: explicit nodes and edges."""

    model_config = _STRICT
    nodes: list[GraphNode] = []
    edges: list[GraphEdge] = Field(min_length=1)


def check_nodes(graph: GraphSpec, with_servers: bool, where: str) -> int:
    """Check the node list; return the number of servers it defines (0 with ``with_servers``).

    Raises
    ------
    TopologyError
        A bad or duplicate name, a GPU without a server, a server part given a server
        where servers are built from ``node``/``servers``, or servers that are not
        numbered ``0..S-1`` or differ in GPU count.
    """
    seen: dict[str, int] = {}
    gpus: dict[int, int] = {}
    servers: set[int] = set()
    for i, n in enumerate(graph.nodes):
        key = f"{where}: graph.nodes[{i}]"
        if _GLOB.search(n.name) or "<->" in n.name or n.name != n.name.strip():
            raise TopologyError(f"{key}.name: {n.name!r} may not contain * ? [ ] <-> or spaces")
        if n.name in seen:
            raise TopologyError(
                f"{key}: duplicate node {n.name!r} (also graph.nodes[{seen[n.name]}])"
            )
        seen[n.name] = i
        if n.server is not None and with_servers:
            raise TopologyError(
                f"{key}.server: servers come from node/servers here; graph nodes are the fabric"
            )
        if n.server is not None and n.kind in FABRIC_KINDS:
            raise TopologyError(f"{key}.server: a {n.kind} is a fabric switch, not a server part")
        if n.kind == "gpu" and n.server is None:
            why = "a GPU needs server (its server index)"
            if with_servers:
                why = "GPUs come from node/servers when those are given"
            raise TopologyError(f"{key} ({n.name!r}): {why}")
        if n.server is not None:
            servers.add(n.server)
            gpus[n.server] = gpus.get(n.server, 0) + (n.kind == "gpu")
    return _check_servers(servers, gpus, where)


def _check_servers(servers: set[int], gpus: dict[int, int], where: str) -> int:
    missing = sorted(set(range(len(servers))) - servers)
    if missing:
        raise TopologyError(
            f"{where}: graph.nodes: servers must be numbered 0..{len(servers) - 1} "
            f"(server {missing[0]} has no node; got {sorted(servers)})"
        )
    empty = sorted(k for k in servers if gpus[k] == 0)
    if empty:
        raise TopologyError(f"{where}: graph.nodes: server {empty[0]} has no GPU")
    counts = sorted(set(gpus.values()))
    if len(counts) > 1:
        first = {c: min(k for k in gpus if gpus[k] == c) for c in counts}
        raise TopologyError(
            f"{where}: graph.nodes: every server needs the same number of GPUs (server "
            f"{first[counts[0]]} has {counts[0]}, server {first[counts[-1]]} has {counts[-1]})"
        )
    return len(servers)


def add_nodes(g: DiGraph, graph: GraphSpec, where: str) -> None:
    """Add the graph's nodes to ``g`` (after any built servers); names must be new."""
    for i, n in enumerate(graph.nodes):
        if n.name in g:
            raise TopologyError(
                f"{where}: graph.nodes[{i}]: {n.name!r} is already a part of a built server"
            )
        attrs = {"node": n.server, "rail": n.rail, "unit": n.unit, "pod": n.pod}
        g.add_node(n.name, kind=n.kind, **{k: v for k, v in attrs.items() if v is not None})


def _ends(g: DiGraph, names: Sequence[str], pattern: str, key: str) -> list[str]:
    if not _GLOB.search(pattern):
        if pattern not in g:
            raise TopologyError(
                f"{key}: unknown node {pattern!r} (not in graph.nodes nor a server part)"
            )
        return [pattern]
    rx = re.compile(translate(pattern))
    hits = [v for v in names if rx.match(v)]
    if not hits:
        raise TopologyError(f"{key}: glob {pattern!r} matches no node")
    return hits


def _edge_pairs(g: DiGraph, names: Sequence[str], e: GraphEdge, key: str) -> list[tuple[str, str]]:
    left, right = _ends(g, names, e.a, f"{key}.a"), _ends(g, names, e.b, f"{key}.b")
    glob = bool(_GLOB.search(e.a) or _GLOB.search(e.b))
    if not glob and e.a == e.b:
        raise TopologyError(f"{key}: self-loop on {e.a!r} (a and b are the same node)")
    pairs: list[tuple[str, str]] = []
    done: set[frozenset[str]] = set()
    for u in left:
        for v in right:
            if u != v and frozenset((u, v)) not in done:
                done.add(frozenset((u, v)))
                pairs.append((u, v))
    if not pairs:
        raise TopologyError(f"{key}: {e.a!r}<->{e.b!r} joins no two distinct nodes")
    return pairs


def add_graph(g: DiGraph, graph: GraphSpec, where: str) -> None:
    """Add the graph's nodes and edges to ``g`` (which may hold built servers).

    Parameters
    ----------
    g : DiGraph
        The graph to extend, in place.
    graph : GraphSpec
        The validated section (its nodes checked by :func:`check_nodes`).
    where : str
        The file or preset name, for messages.

    Raises
    ------
    TopologyError
        An unknown node or a glob matching none, a self-loop, an edge given twice (also
        an edge the servers already have), or a bad link.
    """
    # Imported here: fabric imports spec, which imports this module's schema.
    from sim.topology.fabric import add_link

    add_nodes(g, graph, where)
    names = list(g.nodes)
    links: dict[str | InlineLink, LinkSpec] = {}
    owner: dict[frozenset[str], int] = {}
    for i, e in enumerate(graph.edges):
        key = f"{where}: graph.edges[{i}]"
        link = links.get(e.link)
        if link is None:
            link = links[e.link] = link_from_ref(e.link, f"graph.edges[{i}].link", where)
        for u, v in _edge_pairs(g, names, e, key):
            pair = frozenset((u, v))
            if pair in owner or g.has_edge(u, v):
                also = f"graph.edges[{owner[pair]}]" if pair in owner else "a built server"
                raise TopologyError(
                    f"{key}: duplicate edge {u}<->{v} (also in {also}); "
                    "use cables: k for parallel cables"
                )
            owner[pair] = i
            add_link(g, u, v, link, link.bandwidth_Bps, e.cables)
