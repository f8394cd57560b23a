"""The built cluster: a directed networkx graph plus indexed links and routes.

Nodes carry ``kind`` (``gpu``, ``nvswitch``, ``pcie_switch``, ``host``, ``nic``, ``leaf``,
``spine``, ``core``) and, for parts inside a server, ``node`` (the server index). Every
physical link is two directed edges, each with ``capacity_Bps``, ``latency_s``, ``kind``
(a catalog link name) and ``scope`` (``nvlink``, ``pcie``, ``net``).

Routes are shortest paths in hops that never pass *through* a GPU; where several
equal-cost next hops exist (ECMP) one is chosen by a hash of (salt, src, dst, hop) with
the salt drawn once from the seeded ``numpy.random.Generator``: deterministic for a seed.
Among equal-hop paths only the widest (largest bottleneck capacity) are candidates, so
NVLink wins a tie with PCIe.

Clusters of servers joined by a switch fabric are routed by
:class:`sim.topology.routing.ServerRouter` (per-server templates plus a switch-level
BFS; linear in the number of routes asked for), which also never passes through a third
server; other graphs use a per-destination BFS.
"""

from __future__ import annotations

import copy
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from sim.catalog import GpuSpec
from sim.errors import TopologyError
from sim.topology.routing import ServerRouter, build_router

__all__ = ["Topology"]

NO_TRANSIT_KINDS = frozenset({"gpu"})


def ecmp_pick(salt: int, src: str, dst: str, hop: int, n: int) -> int:
    """Deterministic choice among ``n`` equal-cost next hops (stable across processes)."""
    key = f"{salt}|{src}|{dst}|{hop}".encode()
    return zlib.crc32(key) % n


@dataclass
class Topology:
    """A cluster ready for simulation.

    Attributes
    ----------
    name : str
        Preset or file name.
    graph : networkx.DiGraph
        Parts and directed links (see module docstring for attributes).
    gpus : tuple[str, ...]
        GPU node names in global rank order (rank-major within servers).
    gpu : GpuSpec
        The accelerator model (one model per topology).
    nodes : int
        Number of servers (NVLink domains for rack-scale systems).
    gpus_per_node : int
        GPUs per server.
    seed : int
        Seed of the ECMP salt.
    """

    name: str
    graph: nx.DiGraph
    gpus: tuple[str, ...]
    gpu: GpuSpec
    nodes: int
    gpus_per_node: int
    seed: int = 0
    description: str = ""
    links: tuple[tuple[str, str], ...] = field(init=False)
    link_index: dict[tuple[str, str], int] = field(init=False)
    capacity_Bps: np.ndarray = field(init=False)
    latency_s: np.ndarray = field(init=False)
    link_scope: tuple[str, ...] = field(init=False)
    link_kind: tuple[str, ...] = field(init=False)
    _salt: int = field(init=False)
    _routes: dict[tuple[str, str], tuple[int, ...]] = field(init=False)
    _dist: dict[str, dict[str, int]] = field(init=False)
    _width: dict[str, dict[str, float]] = field(init=False)
    _router: ServerRouter | None = field(init=False)
    _router_built: bool = field(init=False)
    _nics: dict[int, int] | None = field(init=False)

    def __post_init__(self) -> None:
        self.links = tuple(self.graph.edges())
        self.link_index = {e: i for i, e in enumerate(self.links)}
        data = [self.graph.edges[e] for e in self.links]
        self.capacity_Bps = np.array([float(d["capacity_Bps"]) for d in data], dtype=float)
        self.latency_s = np.array([float(d["latency_s"]) for d in data], dtype=float)
        self.link_scope = tuple(str(d["scope"]) for d in data)
        self.link_kind = tuple(str(d["kind"]) for d in data)
        if len(self.links) and not (self.capacity_Bps > 0).all():
            bad = self.links[int(np.argmin(self.capacity_Bps))]
            raise TopologyError(f"link {bad[0]}->{bad[1]}: bandwidth must be > 0")
        self._salt = int(np.random.default_rng(self.seed).integers(0, 2**31 - 1))
        self._routes = {}
        self._dist = {}
        self._width = {}
        self._router = None
        self._router_built = False
        self._nics = None

    @property
    def num_gpus(self) -> int:
        """Number of GPUs."""
        return len(self.gpus)

    def node_of(self, gpu: str) -> int:
        """Server index of GPU node ``gpu``."""
        return int(self.graph.nodes[gpu]["node"])

    def nvswitch_of(self, gpu: str) -> str | None:
        """The NVSwitch node ``gpu`` attaches to (for in-switch reduction), or None."""
        for v in self.graph.successors(gpu):
            if self.graph.nodes[v]["kind"] == "nvswitch":
                return str(v)
        return None

    def route(self, src: str, dst: str) -> tuple[int, ...]:
        """Link indices from ``src`` to ``dst`` (empty when ``src == dst``); cached."""
        key = (src, dst)
        r = self._routes.get(key)
        if r is None:
            if src == dst:
                return ()
            router = self._server_router()
            fast = router.route(src, dst) if router is not None else None
            r = self._compute_route(src, dst) if fast is None else fast
            self._routes[key] = r
        return r

    def _pick(self, src: str, dst: str, hop: int, n: int) -> int:
        return ecmp_pick(self._salt, src, dst, hop, n)

    def _server_router(self) -> ServerRouter | None:
        if not self._router_built:
            self._router = build_router(self.graph, self.link_index, self._pick)
            self._router_built = True
        return self._router

    def _dist_to(self, dst: str) -> dict[str, int]:
        d = self._dist.get(dst)
        if d is None:
            g = self.graph
            d = {dst: 0}
            frontier = [dst]
            while frontier:
                nxt = []
                for v in frontier:
                    for u in g.predecessors(v):
                        if u in d:
                            continue
                        d[u] = d[v] + 1
                        if g.nodes[u]["kind"] not in NO_TRANSIT_KINDS:
                            nxt.append(u)
                frontier = nxt
            self._dist[dst] = d
        return d

    def _cap(self, u: str, v: str) -> float:
        return float(self.graph.edges[u, v]["capacity_Bps"])

    def _width_to(self, dst: str) -> dict[str, float]:
        """Bottleneck capacity of the widest shortest path to ``dst`` from each node.

        Among equal-hop paths routes keep the widest, so e.g. NVLink wins over PCIe.
        """
        w = self._width.get(dst)
        if w is None:
            dist = self._dist_to(dst)
            w = {dst: float("inf")}
            for u in sorted(dist, key=dist.__getitem__):
                if u == dst:
                    continue
                w[u] = max(
                    (
                        min(self._cap(u, v), w[v])
                        for v in self.graph.successors(u)
                        if dist.get(v) == dist[u] - 1
                        and (v == dst or self.graph.nodes[v]["kind"] not in NO_TRANSIT_KINDS)
                    ),
                    default=0.0,
                )
            self._width[dst] = w
        return w

    def _compute_route(self, src: str, dst: str) -> tuple[int, ...]:
        if src == dst:
            return ()
        for n in (src, dst):
            if n not in self.graph:
                raise TopologyError(f"unknown endpoint {n!r} in topology {self.name!r}")
        dist = self._dist_to(dst)
        if src not in dist:
            raise TopologyError(f"topology {self.name!r} is disconnected: no route {src} -> {dst}")
        width = self._width_to(dst)
        path: list[int] = []
        u, hop = src, 0
        while u != dst:
            want = dist[u] - 1
            cands = sorted(
                v
                for v in self.graph.successors(u)
                if dist.get(v) == want
                and (v == dst or self.graph.nodes[v]["kind"] not in NO_TRANSIT_KINDS)
            )
            cands = [v for v in cands if min(self._cap(u, v), width[v]) == width[u]]
            v = (
                cands[ecmp_pick(self._salt, src, dst, hop, len(cands))]
                if len(cands) > 1
                else cands[0]
            )
            path.append(self.link_index[(u, v)])
            u, hop = v, hop + 1
        return tuple(path)

    def scaled(self, factors: Mapping[str, float]) -> Topology:
        """A copy whose link capacities are multiplied per scope or link kind.

        ``factors`` maps a scope (``nvlink``/``pcie``/``net``) or a link kind name to a
        factor in (0, 1]; a kind entry wins over its scope. Routes and graph are shared.
        """
        scale = np.array(
            [
                factors.get(k, factors.get(s, 1.0))
                for k, s in zip(self.link_kind, self.link_scope, strict=True)
            ],
            dtype=float,
        )
        self._server_router()  # build once, so both copies share it
        new = copy.copy(self)  # shares graph, link arrays, route caches and router
        new.capacity_Bps = self.capacity_Bps * scale
        return new

    def nics_per_node(self) -> dict[int, int]:
        """NICs of each server (server index -> count), counted once per topology."""
        if self._nics is None:
            counts: dict[int, int] = {}
            for _, d in self.graph.nodes(data=True):
                if d.get("kind") == "nic":
                    counts[d["node"]] = counts.get(d["node"], 0) + 1
            self._nics = counts
        return self._nics
