"""The built cluster: a directed graph plus indexed links and routes.

Nodes carry ``kind`` (``gpu``, ``nvswitch``, ``pcie_switch``, ``host``, ``nic``, ``leaf``,
``spine``, ``core``) and, for parts inside a server, ``node`` (the server index). Every
physical link is two directed edges, each with ``capacity_Bps``, ``latency_s``, ``kind``
(a catalog link name) and ``scope`` (``nvlink``, ``pcie``, ``net``).

Routes are shortest paths in hops that never pass *through* a GPU; where several
equal-cost next hops exist (ECMP) one is chosen by a hash of (salt, src, dst, hop) with
the salt drawn once from the seeded ``numpy.random.Generator``: deterministic for a seed.
Among equal-hop paths only the widest (largest bottleneck capacity) are candidates, so
NVLink wins a tie with PCIe. An edge with ``cables=k`` (parallel cables between two
switches) becomes ``k`` links, each an equal-cost choice of its own, so ECMP flows can
collide on one cable while its neighbours idle.

:meth:`Topology.path` gives what a transfer crosses under the topology's ``routing``:
``ecmp`` (one hashed path per queue pair; ``qps`` pairs per connection, each hashed
independently, see :mod:`sim.topology.paths`) or ``adaptive`` (every switch spreads the
transfer evenly over its equal-cost next hops). ``rail`` pins an inter-server route to
NIC number ``rail`` at both ends, as NCCL pins each ring channel to one NIC; with
``pxn`` a GPU reaches that NIC through the NIC's own GPU over NVLink instead of crossing
the host (NCCL's PXN).

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
from typing import Any

import numpy as np

from sim.catalog import GpuSpec
from sim.errors import TopologyError
from sim.topology.cabling import FabricPlan
from sim.topology.congestion import link_loss
from sim.topology.digraph import DiGraph
from sim.topology.linkclasses import LinkClasses
from sim.topology.paths import Path, merge
from sim.topology.routing import ServerRouter, build_router

__all__ = ["Topology"]

NO_TRANSIT_KINDS = frozenset({"gpu"})


def ecmp_pick(salt: int, src: str, dst: str, hop: int, n: int) -> int:
    """Deterministic choice among ``n`` equal-cost next hops (stable across processes).

    CRC-32 of the flow's key, then MurmurHash3's 32-bit finalizer: CRC alone is linear,
    so flows whose names differ in one character land on correlated choices (the low
    bits a modulo keeps), which hid collisions that a switch's hash does produce.

    >>> [ecmp_pick(7, "n03.gpu1", f"n04.gpu{r}", 2, 32) for r in range(4)]
    [11, 23, 13, 5]
    """
    x = zlib.crc32(f"{salt}|{src}|{dst}|{hop}".encode())
    x ^= x >> 16
    x = (x * 0x85EBCA6B) & 0xFFFFFFFF
    x ^= x >> 13
    x = (x * 0xC2B2AE35) & 0xFFFFFFFF
    x ^= x >> 16
    return x % n


@dataclass
class Topology:
    """A cluster ready for simulation.

    Attributes
    ----------
    name : str
        Preset or file name.
    graph : sim.topology.digraph.DiGraph or networkx.DiGraph
        Parts and directed links (see module docstring for attributes). Built topologies
        hold a :class:`~sim.topology.digraph.DiGraph` (``graph.to_networkx()`` for
        networkx's algorithms); a ``networkx.DiGraph`` works the same.
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
    routing : str
        ``"ecmp"`` or ``"adaptive"`` (see the module docstring).
    qps : int
        Queue pairs per connection, each hashed independently (ECMP only).
    pxn : bool
        Reach a rail's NIC through its own GPU over NVLink (NCCL's PXN).
    congestion_loss : float or None
        Incast goodput loss of the Ethernet links (:mod:`sim.topology.congestion`);
        None: the per-transport default.
    sharp : bool
        The network switches reduce in-network (SHARP): NCCL's CollNet may run.
    gpu_models : tuple[GpuSpec, ...]
        The GPU model of each GPU of ``gpus`` when servers hold different models (a
        ``servers`` group's ``gpu``); empty when every GPU is ``gpu``.
    fabric : FabricPlan or None
        How the parametric scale-out fabric is cabled (switches per tier, cables per
        pair: :mod:`sim.topology.cabling`); None for single servers and explicit graphs.
    """

    name: str
    graph: DiGraph
    gpus: tuple[str, ...]
    gpu: GpuSpec
    nodes: int
    gpus_per_node: int
    seed: int = 0
    description: str = ""
    routing: str = "ecmp"
    qps: int = 1
    pxn: bool = True
    congestion_loss: float | None = None
    sharp: bool = False
    gpu_models: tuple[GpuSpec, ...] = ()
    fabric: FabricPlan | None = None
    links: tuple[tuple[str, str], ...] = field(init=False)
    link_loss: np.ndarray = field(init=False)
    link_index: dict[tuple[str, str], int] = field(init=False)
    link_ids: dict[tuple[str, str], tuple[int, ...]] = field(init=False)
    link_transport: tuple[str, ...] = field(init=False)
    capacity_Bps: np.ndarray = field(init=False)
    latency_s: np.ndarray = field(init=False)
    link_scope: tuple[str, ...] = field(init=False)
    link_kind: tuple[str, ...] = field(init=False)
    _salt_value: int | None = field(init=False)
    _routes: dict[tuple[str, str, int, int], tuple[int, ...]] = field(init=False)
    _paths: dict[tuple[str, str, int], Path] = field(init=False)
    _spreads: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, frozenset[int]]] = field(
        init=False
    )
    _dist: dict[str, dict[str, int]] = field(init=False)
    _width: dict[str, dict[str, float]] = field(init=False)
    _router: ServerRouter | None = field(init=False)
    _router_built: bool = field(init=False)
    _nics: dict[int, int] | None = field(init=False)
    _model_of: dict[str, GpuSpec] = field(init=False)
    _node_of: dict[str, int] = field(init=False)
    _hosts: dict[int, str] | None = field(init=False)
    _server_gpus: dict[int, tuple[str, ...]] | None = field(init=False)
    _scope_masks: dict[str, np.ndarray] = field(init=False)
    _scope_kinds: dict[str, tuple[str, ...]] | None = field(init=False)
    _link_classes: LinkClasses | None = field(init=False)

    def __post_init__(self) -> None:
        if self.gpu_models and len(self.gpu_models) != len(self.gpus):
            raise TopologyError(
                f"topology {self.name!r}: {len(self.gpu_models)} GPU models for "
                f"{len(self.gpus)} GPUs"
            )
        self._model_of = dict(zip(self.gpus, self.gpu_models, strict=False))
        if self.routing not in ("ecmp", "adaptive"):
            raise TopologyError(f"routing {self.routing!r}: allowed: ecmp, adaptive")
        if self.qps < 1:
            raise TopologyError(f"qps_per_connection {self.qps!r}: must be >= 1")
        edges = list(self.graph.edges(data=True))
        links: list[tuple[str, str]]
        ids: dict[tuple[str, str], tuple[int, ...]]
        if all(d.get("cables", 1) == 1 for _, _, d in edges):  # one link per edge: no loop
            links = [(u, v) for u, v, _ in edges]
            data = [d for _, _, d in edges]
            ids = {e: (i,) for i, e in enumerate(links)}
        else:
            links, data, ids = _expand_cables(edges)
        self.links = tuple(links)
        self.link_ids = ids
        self.link_index = {e: i[0] for e, i in ids.items()}
        n = len(data)
        self.capacity_Bps = np.fromiter((d["capacity_Bps"] for d in data), float, count=n)
        self.latency_s = np.fromiter((d["latency_s"] for d in data), float, count=n)
        self.link_scope = tuple(str(d["scope"]) for d in data)
        self.link_kind = tuple(str(d["kind"]) for d in data)
        self.link_transport = tuple(str(d.get("transport", d["scope"])) for d in data)
        self.link_loss = link_loss(self.link_transport, self.congestion_loss)
        if len(self.links) and not (self.capacity_Bps > 0).all():
            bad = self.links[int(np.argmin(self.capacity_Bps))]
            raise TopologyError(f"link {bad[0]}->{bad[1]}: bandwidth must be > 0")
        self._salt_value = None  # drawn on the first ECMP choice (see _salt)
        self._routes = {}
        self._paths = {}
        self._spreads = {}
        self._dist = {}
        self._width = {}
        self._router = None
        self._router_built = False
        self._nics = None
        self._node_of = {}
        self._hosts = None
        self._server_gpus = None
        self._scope_masks = {}
        self._scope_kinds = None
        self._link_classes = None

    def link_classes(self) -> LinkClasses:
        """The partition of this topology's links into classes that carry the same flows
        (:mod:`sim.topology.linkclasses`), shared by every network on it."""
        if self._link_classes is None:
            self._link_classes = LinkClasses(self.capacity_Bps, self.link_loss)
        return self._link_classes

    @property
    def num_gpus(self) -> int:
        """Number of GPUs."""
        return len(self.gpus)

    @property
    def heterogeneous(self) -> bool:
        """True when the GPUs are not all of one model."""
        return len({g.name for g in self.gpu_models}) > 1

    def gpu_of(self, gpu: str) -> GpuSpec:
        """The GPU model of GPU node ``gpu`` (``self.gpu`` on a homogeneous cluster)."""
        return self._model_of.get(gpu, self.gpu)

    def host_of(self, gpu: str) -> str:
        """The host (CPU) node of GPU node ``gpu``'s server: where offloaded optimizer
        states live (raises TopologyError for a server without one)."""
        if self._hosts is None:
            self._hosts = {
                int(d["node"]): n for n, d in self.graph.nodes(data=True) if d.get("kind") == "host"
            }
        host = self._hosts.get(self.node_of(gpu))
        if host is None:
            raise TopologyError(f"topology {self.name!r}: GPU {gpu}'s server has no host node")
        return host

    def node_of(self, gpu: str) -> int:
        """Server index of GPU node ``gpu`` (cached: setups ask for every rank's)."""
        n = self._node_of.get(gpu)
        if n is None:
            n = self._node_of[gpu] = int(self.graph.nodes[gpu]["node"])
        return n

    def server_gpus(self, node: int) -> tuple[str, ...]:
        """The GPUs of server ``node``, in the topology's GPU order (indexed once)."""
        if self._server_gpus is None:
            by: dict[int, list[str]] = {}
            for g in self.gpus:
                by.setdefault(self.node_of(g), []).append(g)
            self._server_gpus = {k: tuple(v) for k, v in by.items()}
        return self._server_gpus.get(node, ())

    def scope_mask(self, scope: str) -> np.ndarray:
        """Boolean array over links: True where the link's scope is ``scope`` (cached)."""
        m = self._scope_masks.get(scope)
        if m is None:
            m = self._scope_masks[scope] = np.array([s == scope for s in self.link_scope], bool)
        return m

    def scope_kinds(self) -> dict[str, tuple[str, ...]]:
        """Link kinds present per scope, scopes and kinds sorted (computed once)."""
        if self._scope_kinds is None:
            kinds: dict[str, set[str]] = {}
            for scope, kind in set(zip(self.link_scope, self.link_kind, strict=True)):
                kinds.setdefault(scope, set()).add(kind)
            self._scope_kinds = {s: tuple(sorted(kinds[s])) for s in sorted(kinds)}
        return self._scope_kinds

    def nvswitch_of(self, gpu: str) -> str | None:
        """The NVSwitch node ``gpu`` attaches to (for in-switch reduction), or None."""
        for v in self.graph.successors(gpu):
            if self.graph.nodes[v]["kind"] == "nvswitch":
                return str(v)
        return None

    def route(self, src: str, dst: str, rail: int = -1, qp: int = 0) -> tuple[int, ...]:
        """Link indices of one hashed path ``src -> dst`` (empty when ``src == dst``).

        ``rail`` >= 0 pins an inter-server route to NIC number ``rail`` of both servers;
        ``qp`` selects the queue pair whose hash picks among equal-cost choices. Cached.
        """
        key = (src, dst, rail, qp)
        r = self._routes.get(key)
        if r is None:
            if src == dst:
                return ()
            router = self._server_router()
            fast = router.route(src, dst, rail, qp) if router is not None else None
            r = self._compute_route(src, dst, qp) if fast is None else fast
            self._routes[key] = r
        return r

    def path(self, src: str, dst: str, rail: int = -1) -> Path:
        """What a transfer ``src -> dst`` crosses, with the share of its bytes on each link,
        under this topology's ``routing`` and ``qps`` (see :mod:`sim.topology.paths`)."""
        key = (src, dst, rail)
        p = self._paths.get(key)
        if p is None:
            if rail >= 0 and self._same_server(src, dst):  # no NIC inside a server
                p = self.path(src, dst).alias()  # its own object: routes are numbered by identity
            elif self.routing == "adaptive":
                p = self._adaptive_path(src, dst, rail)
            elif self.qps > 1:
                p = merge(
                    [(self.route(src, dst, rail, q), 1.0 / self.qps) for q in range(self.qps)]
                )
            else:
                p = Path(np.asarray(self.route(src, dst, rail), dtype=np.intp))
            self._paths[key] = p
        return p

    def _same_server(self, src: str, dst: str) -> bool:
        """Both endpoints are parts of one server: the router's route between them stays
        inside it, whatever the rail (thousands of a ring's channel routes repeat one)."""
        router = self._server_router()
        if router is None:
            return False
        a, b = router.where.get(src), router.where.get(dst)
        return a is not None and b is not None and a[0] == b[0]

    def _adaptive_path(self, src: str, dst: str, rail: int) -> Path:
        """Fixed in-server segments and an even split over every shortest fabric path."""
        router = self._server_router()
        parts = router.route_parts(src, dst, rail) if router is not None and src != dst else None
        if parts is None:
            return merge([(self.route(src, dst, rail), 1.0)])
        head, (fa, fb), mid, tail = parts
        if fa < 0 or fa == fb:  # inside a server, or through one switch: nothing to spread
            return merge([(head + mid + tail, 1.0)])
        assert router is not None
        links, shares, members = self._spread_arrays(router, fa, fb)
        ends = head + tail
        if len(set(ends)) < len(ends) or any(li in members for li in ends):  # shares add up
            spread = [((li,), share) for li, share in router.spread(fa, fb)]
            return merge([(ends, 1.0), *spread])
        # The fabric's links are not the servers': the shares only interleave. One spread
        # per (leaf, leaf) pair serves every GPU pair behind it (16k-GPU 3-tier: 16,544
        # paths over 256 spreads), merged with numpy instead of a dict per path.
        all_links = np.concatenate([np.asarray(ends, dtype=np.intp), links])
        order = np.argsort(all_links, kind="stable")
        weights = np.concatenate([np.ones(len(ends)), shares])[order]
        one = bool((np.abs(weights - 1.0) <= 1e-12).all())
        return Path(all_links[order], None if one else weights)

    def _spread_arrays(
        self, router: ServerRouter, fa: int, fb: int
    ) -> tuple[np.ndarray, np.ndarray, frozenset[int]]:
        """``router.spread(fa, fb)`` as (link indices, shares) arrays and the set of its
        links; cached."""
        hit = self._spreads.get((fa, fb))
        if hit is None:
            pairs = router.spread(fa, fb)
            hit = (
                np.array([li for li, _ in pairs], dtype=np.intp),
                np.array([share for _, share in pairs], dtype=float),
                frozenset(li for li, _ in pairs),
            )
            self._spreads[(fa, fb)] = hit
        return hit

    @property
    def _salt(self) -> int:
        """The seed's ECMP hash salt, drawn when a route first has a choice to make: an
        adaptive rail-optimized fabric may never have one, and numpy.random was ~15 ms of
        a cold command's start."""
        if self._salt_value is None:
            self._salt_value = int(np.random.default_rng(self.seed).integers(0, 2**31 - 1))
        return self._salt_value

    def _pick(self, src: str, dst: str, hop: int, n: int) -> int:
        return ecmp_pick(self._salt, src, dst, hop, n)

    def _server_router(self) -> ServerRouter | None:
        if not self._router_built:
            self._router = build_router(self.graph, self.link_ids, self._pick, self.pxn)
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

    def _compute_route(self, src: str, dst: str, qp: int = 0) -> tuple[int, ...]:
        if src == dst:
            return ()
        for n in (src, dst):
            if n not in self.graph:
                raise TopologyError(f"unknown endpoint {n!r} in topology {self.name!r}")
        dist = self._dist_to(dst)
        if src not in dist:
            raise TopologyError(f"topology {self.name!r} is disconnected: no route {src} -> {dst}")
        width = self._width_to(dst)
        key = f"{src}#{qp}" if qp else src
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
            choices = [li for v in cands for li in self.link_ids[(u, v)]]
            li = (
                choices[ecmp_pick(self._salt, key, dst, hop, len(choices))]
                if len(choices) > 1
                else choices[0]
            )
            path.append(li)
            u, hop = self.links[li][1], hop + 1
        return tuple(path)

    def scaled(self, factors: Mapping[str, float] | np.ndarray) -> Topology:
        """A copy whose link capacities are multiplied per scope, link kind or link.

        ``factors`` maps a scope (``nvlink``/``pcie``/``net``) or a link kind name to a
        factor in (0, 1] (a kind entry wins over its scope), or is an array with one
        factor per link. Routes and graph are shared.
        """
        if isinstance(factors, np.ndarray):
            scale = factors
        else:
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
        new._link_classes = None  # classes are of equal capacity: the copy's own
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


def _expand_cables(
    edges: list[tuple[str, str, dict[str, Any]]],
) -> tuple[list[tuple[str, str]], list[dict[str, Any]], dict[tuple[str, str], tuple[int, ...]]]:
    """Links, their edge data and each edge's link indices when edges hold ``cables``
    parallel cables (each its own link)."""
    links: list[tuple[str, str]] = []
    ids: dict[tuple[str, str], tuple[int, ...]] = {}
    data: list[dict[str, Any]] = []
    for u, v, d in edges:
        k, start = int(d.get("cables", 1)), len(links)
        if k == 1:
            ids[(u, v)] = (start,)
            links.append((u, v))
            data.append(d)
        else:
            ids[(u, v)] = tuple(range(start, start + k))
            links.extend([(u, v)] * k)
            data.extend([d] * k)
    return links, data, ids
