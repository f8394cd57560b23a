"""Shortest paths inside one server structure, shared by every server built alike.

A :class:`ServerTemplate` holds one server's parts (local indices) and its internal
links. It answers, lazily and cached: hop distances to a part without passing through a
GPU, the widest of the equal-hop paths (NVLink wins a tie with PCIe), the equal-cost next
hops, the fixed path where only one exists, the NIC a GPU prefers, and the peer GPU
through which NCCL's PXN reaches a NIC over NVLink. :func:`stays_inside` checks that no
GPU pair's route could be beaten by leaving the server.
"""

from __future__ import annotations

__all__ = ["ServerTemplate", "stays_inside"]

_INF = float("inf")


class ServerTemplate:
    """Shortest paths inside one server structure (local node indices)."""

    def __init__(
        self, kinds: tuple[str, ...], edges: frozenset[tuple[int, int, float, str]]
    ) -> None:
        self.n = len(kinds)
        self.kinds = kinds
        self.host = kinds.index("host") if "host" in kinds else None
        self.is_gpu = [k == "gpu" for k in kinds]
        self.succ: list[list[int]] = [[] for _ in range(self.n)]
        self.pred: list[list[int]] = [[] for _ in range(self.n)]
        self.cap: dict[tuple[int, int], float] = {}
        self.link_scope: dict[tuple[int, int], str] = {}
        for u, v, c, scope in sorted(edges):
            self.succ[u].append(v)
            self.pred[v].append(u)
            self.cap[(u, v)] = c
            self.link_scope[(u, v)] = scope
        gpus = [i for i in range(self.n) if self.is_gpu[i]]
        self.gpu_rank = {g: r for r, g in enumerate(gpus)}
        self._dist: dict[int, list[float]] = {}
        self._width: dict[int, list[float]] = {}
        self._next: dict[tuple[int, int], tuple[int, ...]] = {}
        self._fixed: dict[tuple[int, int], tuple[tuple[int, int], ...] | None] = {}
        self._pxn: dict[tuple[int, int, tuple[int, ...]], int | None] = {}

    def dist_to(self, t: int) -> list[float]:
        """Hops from every local node to ``t`` without passing through a GPU."""
        d = self._dist.get(t)
        if d is None:
            d = [_INF] * self.n
            d[t] = 0
            order, frontier = [], [t]
            while frontier:
                nxt = []
                for v in frontier:
                    for u in self.pred[v]:
                        if d[u] == _INF:
                            d[u] = d[v] + 1
                            order.append(u)
                            if not self.is_gpu[u]:
                                nxt.append(u)
                frontier = nxt
            self._dist[t] = d
            self._width[t] = self._widths(t, d, order)
        return d

    def _widths(self, t: int, d: list[float], order: list[int]) -> list[float]:
        """Bottleneck capacity of the widest shortest path from each node to ``t``."""
        w = [0.0] * self.n
        w[t] = _INF
        for u in order:  # increasing distance: every next hop is already done
            w[u] = max((min(self.cap[(u, v)], w[v]) for v in self._allowed(u, t, d)), default=0.0)
        return w

    def _allowed(self, u: int, t: int, d: list[float]) -> list[int]:
        want = d[u] - 1
        return [v for v in self.succ[u] if d[v] == want and (v == t or not self.is_gpu[v])]

    def next_hops(self, u: int, t: int) -> tuple[int, ...]:
        """Equal-cost next hops from ``u`` toward ``t``."""
        key = (u, t)
        c = self._next.get(key)
        if c is None:
            d = self.dist_to(t)
            w = self._width[t]
            c = tuple(v for v in self._allowed(u, t, d) if min(self.cap[(u, v)], w[v]) == w[u])
            self._next[key] = c
        return c

    def fixed_path(self, s: int, t: int) -> tuple[tuple[int, int], ...] | None:
        """The local edges of the only shortest path ``s -> t``, or None when ECMP applies."""
        key = (s, t)
        if key not in self._fixed:
            path: list[tuple[int, int]] | None = []
            u = s
            while u != t and path is not None:
                c = self.next_hops(u, t)
                if len(c) != 1:
                    path = None
                    break
                path.append((u, c[0]))
                u = c[0]
            self._fixed[key] = tuple(path) if path is not None else None
        return self._fixed[key]

    def pxn_peer(self, s: int, port: int, ports: tuple[int, ...] = ()) -> int | None:
        """The GPU through which ``s`` should reach NIC ``port`` (NCCL's PXN), or None.

        PXN applies when the shortest PCIe path from ``s`` to the port crosses the host
        (another PCIe switch) while some GPU sits at the port's own PCIe switch and is one
        NVLink hop from ``s`` (through the NVSwitch or directly). Where several GPUs share
        that switch (a DGX H100 PCIe switch holds two GPUs and two NICs), the peer is the
        GPU whose own NIC (:meth:`preferred` among ``ports``) is ``port``, as NCCL's PXN
        proxies through the NIC's local rank; else the lowest-numbered.
        """
        key = (s, port, ports)
        if key not in self._pxn:
            peer = None
            if self.host is not None and self.dist_to(port)[s] > 2:
                near = [
                    g for g in self.gpu_rank
                    if g != s and self.dist_to(port)[g] == 2 and self._nvlink_hop(s, g)
                ]  # fmt: skip
                own = [g for g in near if ports and self.preferred(g, ports, True) == port]
                peer = min(own or near) if near else None
            self._pxn[key] = peer
        return self._pxn[key]

    def _nvlink_hop(self, a: int, b: int) -> bool:
        """``a`` reaches GPU ``b`` over NVLink: directly or through one NVSwitch."""
        if b in self.succ[a] and self.link_scope[(a, b)] == "nvlink":
            return True
        return any(self.kinds[v] == "nvswitch" and b in self.succ[v] for v in self.succ[a])

    def preferred(self, s: int, ports: tuple[int, ...], toward: bool) -> int | None:
        """The port of local node ``s``: ``k``-th GPU takes the ``k mod n``-th nearest."""
        dist = [self.dist_to(p)[s] if toward else self.dist_to(s)[p] for p in ports]
        best = min(dist, default=_INF)
        if best == _INF:
            return None
        near = sorted(p for p, d in zip(ports, dist, strict=True) if d == best)
        return near[self.gpu_rank.get(s, s) % len(near)]


def stays_inside(tmpl: ServerTemplate, ports: tuple[int, ...]) -> bool:
    """True when no GPU pair's in-server route could be beaten by leaving the server."""
    gpus = list(tmpl.gpu_rank)
    for t in gpus:
        d_t = tmpl.dist_to(t)
        into = min((d_t[p] for p in ports), default=_INF)
        for s in gpus:
            if s == t:
                continue
            out = min((tmpl.dist_to(p)[s] for p in ports), default=_INF)
            if d_t[s] == _INF or d_t[s] > out + 2 + into:
                return False
    return True
