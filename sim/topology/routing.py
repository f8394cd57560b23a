"""Fast shortest-path routing for clusters of servers joined by a switch fabric.

A generic per-destination BFS costs O(V + E) per destination: seconds at 4096 GPUs.
Clusters have structure that makes it unnecessary. Graph nodes with a ``node``
attribute are server parts; the rest (leaves, spines, cores) form the *fabric*. When
every edge is inside one server, inside the fabric, or between a server part (a *port*,
usually a NIC) and a fabric node, a route is:

* inside one server: a shortest path in that server's subgraph, computed once per
  server *template* (servers with identical structure share one);
* between servers: a shortest path inside the source server to a port, the port's link
  to the fabric, a shortest fabric path (BFS distances per destination switch, cached),
  the link into the destination server and a shortest path inside it to the target.
  The (exit port, entry port) pair minimises the total hop count; among equal pairs the
  one using the GPU's own port (nearest ports by hops, ``k``-th GPU takes the
  ``k mod n``-th of ``n`` nearest) is preferred, then ECMP decides.

Inside a server, among equal-hop paths only the widest (largest bottleneck capacity) are
kept, so NVLink wins a tie with PCIe; in the fabric every equal-hop next hop is an ECMP
candidate, as in switches. Routes never pass through a GPU nor through servers other
than the two endpoints', and intra-server routes never leave the server (the router is
only used where leaving is never shorter: :func:`build_router` checks it and returns
None otherwise, and the caller falls back to the generic BFS). Equal-cost choices use
the same seeded hash as the generic router, so routes are deterministic for a seed.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sim.topology.bfs import Adjacency, hops_from
from sim.topology.digraph import DiGraph
from sim.topology.templates import ServerTemplate, stays_inside

__all__ = ["ServerRouter", "build_router"]

_INF = float("inf")
Pick = Callable[[str, str, int, int], int]


class _Server:
    """One server: its template, global names, local edge -> link index, fabric ports."""

    def __init__(
        self, names: list[str], tmpl: ServerTemplate, links: dict[tuple[int, int], int]
    ) -> None:
        self.names = names
        self.tmpl = tmpl
        self.links = links
        # (port local index, fabric node index, link up, link down), sorted.
        self.attach: list[tuple[int, int, int, int]] = []
        self.rails: dict[int, int] = {}  # port local index -> NIC number in the server
        self.cls = -1  # same template and attachments (port, fabric node)
        self.pcls = -1  # same template and ports

    def rail_of(self, attach_index: int) -> int:
        """NIC number (rail) of attachment ``attach_index`` (-1 for other ports)."""
        return self.rails.get(self.attach[attach_index][0], -1)


class ServerRouter:
    """Routes for a graph of servers joined by a fabric (see module docstring)."""

    def __init__(
        self,
        servers: dict[int, _Server],
        where: dict[str, tuple[int, int]],
        fabric: list[str],
        fadj: list[list[tuple[int, int]]],
        pick: Pick,
        pxn: bool = True,
    ) -> None:
        self.servers = servers
        self.pxn = pxn
        self.where = where
        self.fabric = fabric
        self.fadj = fadj
        self.pick = pick
        n = len(fabric)
        rows = [u for u in range(n) for _ in fadj[u]]
        cols = [v for u in range(n) for v, _ in fadj[u]]
        # Transposed adjacency: BFS from w over it gives hops *to* w.
        self._rev = Adjacency(n, np.array(cols, dtype=np.intp), np.array(rows, dtype=np.intp))
        self._fdist: dict[int, list[float]] = {}
        self._fdist_arr: dict[int, np.ndarray] = {}
        self._nbr = [np.array([v for v, _ in adj], dtype=np.intp) for adj in fadj]
        self._fnext: dict[tuple[int, int], tuple[tuple[int, int], ...]] = {}
        self._choice: dict[tuple[int, ...], tuple[tuple[int, int], ...]] = {}
        self._mcache: dict[tuple[int, int], tuple[tuple[float, ...], ...]] = {}
        self._interned: dict[tuple[tuple[float, ...], ...], tuple[tuple[float, ...], ...]] = {}
        self._spread: dict[tuple[int, int], tuple[tuple[int, float], ...]] = {}

    def route(self, src: str, dst: str, rail: int = -1, qp: int = 0) -> tuple[int, ...] | None:
        """Link indices ``src -> dst``, or None when an endpoint is not a server part.

        ``rail`` (>= 0): leave and enter the servers through NIC number ``rail`` (NCCL
        pins each ring channel to one NIC); ``qp`` salts the equal-cost choices (one
        independently hashed flow per queue pair).
        """
        parts = self.route_parts(src, dst, rail, qp)
        if parts is None:
            return None
        head, _, fabric, tail = parts
        return head + fabric + tail

    def route_parts(
        self, src: str, dst: str, rail: int = -1, qp: int = 0
    ) -> tuple[tuple[int, ...], tuple[int, int], tuple[int, ...], tuple[int, ...]] | None:
        """(links to and out of the exit port, (fabric switch left from, fabric switch
        entered at), links through the fabric, links from the entry port): a route split
        where adaptive routing spreads the middle part (-1 switches inside one server)."""
        a, b = self.where.get(src), self.where.get(dst)
        if a is None or b is None:
            return None
        sa, sb = self.servers[a[0]], self.servers[b[0]]
        key = f"{src}#{qp}" if qp else src
        if a[0] == b[0]:
            out: list[int] = []
            if self._inside(sa, a[1], b[1], key, dst, 0, out) < 0:
                return None
            return (), (-1, -1), tuple(out), ()
        pairs = self._pairs(sa, sb, a[1], b[1], rail)
        if not pairs:
            return None
        i, j = pairs[self.pick(key, dst, -1, len(pairs))] if len(pairs) > 1 else pairs[0]
        pa, fa, up, _ = sa.attach[i]
        pb, fb, _, down = sb.attach[j]
        head: list[int] = []
        hop = self._to_port(sa, a[1], pa, key, dst, head)
        head.append(up)
        mid: list[int] = []
        hop = self._through_fabric(fa, fb, key, dst, hop + 1, mid)
        tail = [down]
        self._inside(sb, pb, b[1], key, dst, hop + 1, tail)
        return tuple(head), (fa, fb), tuple(mid), tuple(tail)

    def _rail_pairs(self, sa: _Server, sb: _Server, rail: int) -> tuple[tuple[int, int], ...]:
        """Attachment pairs on NIC ``rail`` of both servers, whatever their hop count."""
        ia = [i for i in range(len(sa.attach)) if sa.rail_of(i) == rail]
        ib = [j for j in range(len(sb.attach)) if sb.rail_of(j) == rail]
        return tuple((i, j) for i in ia for j in ib)

    def _to_port(self, srv: _Server, s: int, port: int, src: str, dst: str, out: list[int]) -> int:
        """In-server path from ``s`` to NIC ``port``, through a peer GPU (PXN) when the
        direct PCIe path would cross the host while a GPU next to the NIC is an NVLink
        hop away (NCCL's PXN: "PCI + NVLink", GPU -> NIC direction only)."""
        tmpl = srv.tmpl
        ports = tuple(p for p, _, _, _ in srv.attach)
        owner = tmpl.pxn_peer(s, port, ports) if self.pxn else None
        if owner is None:
            return self._inside(srv, s, port, src, dst, 0, out)
        hop = self._inside(srv, s, owner, src, dst, 0, out)
        return self._inside(srv, owner, port, src, dst, hop, out)

    def _inside(
        self, srv: _Server, s: int, t: int, src: str, dst: str, hop: int, out: list[int]
    ) -> int:
        """Append the in-server path ``s -> t``; return the hop count after it (-1: none)."""
        tmpl = srv.tmpl
        if tmpl.dist_to(t)[s] == _INF:
            return -1
        fixed = tmpl.fixed_path(s, t)
        if fixed is not None:
            out.extend(map(srv.links.__getitem__, fixed))
            return hop + len(fixed)
        u = s
        while u != t:
            c = tmpl.next_hops(u, t)
            v = c[self.pick(src, dst, hop, len(c))] if len(c) > 1 else c[0]
            out.append(srv.links[(u, v)])
            u, hop = v, hop + 1
        return hop

    def _fdist_np(self, w: int) -> np.ndarray:
        d = self._fdist_arr.get(w)
        if d is None:
            d = hops_from(self._rev, w)
            self._fdist_arr[w] = d
        return d

    def _fdist_to(self, w: int) -> list[float]:
        d = self._fdist.get(w)
        if d is None:
            d = self._fdist[w] = self._fdist_np(w).tolist()
        return d

    def _fabric_next(self, u: int, w: int) -> tuple[tuple[int, int], ...]:
        """Equal-cost fabric next hops ``(node, link index)`` from ``u`` toward ``w``."""
        d = self._fdist_np(w)
        nbrs = self._nbr[u]
        hit = np.flatnonzero(d[nbrs] == d[u] - 1)
        c = tuple(self.fadj[u][i] for i in hit.tolist())
        self._fnext[(u, w)] = c
        return c

    def _through_fabric(self, u: int, w: int, src: str, dst: str, hop: int, out: list[int]) -> int:
        while u != w:
            key = (u, w)
            c = self._fnext.get(key)
            if c is None:
                c = self._fabric_next(u, w)
            v, li = c[self.pick(src, dst, hop, len(c))] if len(c) > 1 else c[0]
            out.append(li)
            u, hop = v, hop + 1
        return hop

    def spread(self, u: int, w: int) -> tuple[tuple[int, float], ...]:
        """Fabric links of every shortest path ``u -> w`` with the share of the traffic each
        carries when every switch splits evenly over its equal-cost next hops (adaptive
        routing / packet spraying), as (link index, share) pairs; cached."""
        key = (u, w)
        hit = self._spread.get(key)
        if hit is None:
            out: dict[int, float] = {}
            layer = {u: 1.0}
            while layer and set(layer) != {w}:
                nxt: dict[int, float] = {}
                for node, share in layer.items():
                    c = self._fnext.get((node, w)) or self._fabric_next(node, w)
                    part = share / len(c)
                    for v, li in c:
                        out[li] = out.get(li, 0.0) + part
                        nxt[v] = nxt.get(v, 0.0) + part
                layer = nxt
            hit = self._spread[key] = tuple(sorted(out.items()))
        return hit

    def _pairs(
        self, sa: _Server, sb: _Server, s: int, t: int, rail: int = -1
    ) -> tuple[tuple[int, int], ...]:
        """Best (exit attachment, entry attachment) index pairs for ``s -> t``, pinned to
        NIC ``rail`` of both servers when ``rail >= 0`` (the best pairs on that rail, else
        every pair on it, else the best pairs); cached.

        The choice depends on the servers only through their port structure (which also
        fixes each port's rail) and the fabric hop counts between their attachment
        switches (matrix ``m``), which most server pairs share, so the cache stays small.
        """
        m = self._hops(sa, sb)
        key = (sa.pcls, sb.pcls, id(m), s, t, rail)
        got = self._choice.get(key)
        if got is None:
            got = self._best_pairs(sa, sb, m, s, t)
            if rail >= 0:
                on = [x for x in got if sa.rail_of(x[0]) == rail and sb.rail_of(x[1]) == rail]
                got = tuple(on) or self._rail_pairs(sa, sb, rail) or got
            self._choice[key] = got
        return got

    def _hops(self, sa: _Server, sb: _Server) -> tuple[tuple[float, ...], ...]:
        """Fabric hops between attachment switches of ``sa`` (rows) and ``sb`` (columns)."""
        key = (sa.cls, sb.cls)
        m = self._mcache.get(key)
        if m is None:
            cols = [self._fdist_to(f) for _, f, _, _ in sb.attach]
            m = tuple(tuple(c[fa] for c in cols) for _, fa, _, _ in sa.attach)
            m = self._interned.setdefault(m, m)
            self._mcache[key] = m
        return m

    @staticmethod
    def _best_pairs(
        sa: _Server, sb: _Server, m: tuple[tuple[float, ...], ...], s: int, t: int
    ) -> tuple[tuple[int, int], ...]:
        out_cost = [sa.tmpl.dist_to(p)[s] for p, _, _, _ in sa.attach]
        in_cost = [sb.tmpl.dist_to(t)[p] for p, _, _, _ in sb.attach]
        best, pairs = _INF, []
        for i, row in enumerate(m):
            for j, hops in enumerate(row):
                c = out_cost[i] + hops + in_cost[j]
                if c < best:
                    best, pairs = c, [(i, j)]
                elif c == best and c < _INF:
                    pairs.append((i, j))
        if best == _INF:
            return ()
        pa = sa.tmpl.preferred(s, tuple(p for p, _, _, _ in sa.attach), toward=True)
        pairs = [x for x in pairs if sa.attach[x[0]][0] == pa] or pairs
        pb = sb.tmpl.preferred(t, tuple(p for p, _, _, _ in sb.attach), toward=False)
        pairs = [x for x in pairs if sb.attach[x[1]][0] == pb] or pairs
        return tuple(pairs)


def _split(graph: DiGraph) -> tuple[dict[int, list[str]], list[str]] | None:
    """Server parts by server (insertion order) and fabric nodes; None if a GPU is outside."""
    servers: dict[int, list[str]] = {}
    fabric: list[str] = []
    for v, data in graph.nodes(data=True):
        k = data.get("node")
        if k is None:
            if data.get("kind") == "gpu":
                return None
            fabric.append(v)
        else:
            servers.setdefault(int(k), []).append(v)
    return servers, fabric


def build_router(
    graph: DiGraph, link_ids: dict[tuple[str, str], tuple[int, ...]], pick: Pick,
    pxn: bool = True,
) -> ServerRouter | None:  # fmt: skip
    """A :class:`ServerRouter` for ``graph``, or None where its shape does not fit.

    Parameters
    ----------
    graph : DiGraph
        The topology graph (see :mod:`sim.topology.model`).
    link_ids : dict[tuple[str, str], tuple[int, ...]]
        Directed edge -> link indices, one per parallel cable (fabric edges may have
        several: each is an equal-cost choice of its own).
    pick : Callable[[str, str, int, int], int]
        ``pick(src, dst, hop, n)`` chooses among ``n`` equal-cost options (seeded hash).
    pxn : bool
        Let a GPU reach a rail's NIC through the NIC's peer GPU over NVLink (NCCL's PXN).

    Returns
    -------
    ServerRouter or None
        None when an edge joins two servers directly, a GPU is outside every server, an
        edge inside a server has parallel cables, or an intra-server route could be
        shorter through the fabric.
    """
    split = _split(graph)
    if split is None:
        return None
    members, fabric = split
    where = {v: (k, i) for k, names in members.items() for i, v in enumerate(names)}
    findex = {v: i for i, v in enumerate(fabric)}
    fadj: list[list[tuple[int, int]]] = [[] for _ in fabric]
    local: dict[int, list[tuple[int, int, int]]] = {k: [] for k in members}
    ports: dict[int, list[tuple[int, int, int, int]]] = {k: [] for k in members}
    for (u, v), ids in link_ids.items():
        wu, wv = where.get(u), where.get(v)
        if wu is None and wv is None:
            fadj[findex[u]].extend((findex[v], li) for li in ids)
        elif len(ids) != 1:
            return None
        elif wu is not None and wv is not None:
            if wu[0] != wv[0]:
                return None
            local[wu[0]].append((wu[1], wv[1], ids[0]))
        elif wu is not None:
            back = link_ids.get((v, u), (-1,))
            ports[wu[0]].append((wu[1], findex[v], ids[0], back[0]))
    for adj in fadj:
        adj.sort(key=lambda x: (fabric[x[0]], x[1]))
    servers = _servers(graph, members, local, ports)
    if servers is None:
        return None
    return ServerRouter(servers, where, fabric, fadj, pick, pxn)


def _servers(
    graph: DiGraph,
    members: dict[int, list[str]],
    local: dict[int, list[tuple[int, int, int]]],
    ports: dict[int, list[tuple[int, int, int, int]]],
) -> dict[int, _Server] | None:
    """Group servers by structure into shared templates and check the intra-server rule."""
    templates: dict[tuple[object, ...], ServerTemplate] = {}
    classes: dict[tuple[object, ...], int] = {}
    pclasses: dict[tuple[object, ...], int] = {}
    servers: dict[int, _Server] = {}
    for k, names in members.items():
        kinds = tuple(str(graph.nodes[v].get("kind")) for v in names)
        e = graph.edges
        edges = frozenset(
            (a, b, float(e[names[a], names[b]]["capacity_Bps"]),
             str(e[names[a], names[b]].get("scope", "")))
            for a, b, _ in local[k]
        )  # fmt: skip
        sig = (kinds, edges)
        tmpl = templates.get(sig)
        if tmpl is None:
            tmpl = templates[sig] = ServerTemplate(kinds, edges)
        srv = _Server(names, tmpl, {(a, b): li for a, b, li in local[k]})
        srv.attach = sorted(ports[k])
        nics = [i for i, kind in enumerate(kinds) if kind == "nic"]
        srv.rails = {p: r for r, p in enumerate(nics)}
        if any(down < 0 for *_, down in srv.attach):
            return None
        ckey = (id(tmpl), tuple((p, f) for p, f, _, _ in srv.attach))
        if ckey not in classes:
            if not stays_inside(tmpl, tuple(sorted({p for p, *_ in srv.attach}))):
                return None
            classes[ckey] = len(classes)
        srv.cls = classes[ckey]
        srv.pcls = pclasses.setdefault((id(tmpl), tuple(p for p, *_ in srv.attach)), len(pclasses))
        servers[k] = srv
    return servers
