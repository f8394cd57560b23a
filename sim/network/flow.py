"""Flow-level network: concurrent transfers share links by max-min fairness.

Every transfer in flight is a flow on its route. Rates are max-min fair over all
directed links and are re-solved only when the set of flows changes: a transfer starts,
or its last byte is sent. A transfer's bytes drain at its current rate; once drained it
leaves the sharing and its event fires ``latency`` later (the sum of the per-hop
``latency_s`` on its route). With nothing contending, a transfer thus lands
``nbytes / bottleneck + latency`` after it starts, as in the analytical backend.

Cost model: all transfers started at one instant are admitted by ONE re-solve, and all
flows whose last byte goes at one instant leave in ONE re-solve. The re-solve is an
event scheduled at the current time with a priority below SimPy's ``NORMAL``, so it
runs after every other event of that instant (including processes that start more
transfers in reaction to one landing). Flow state is kept in numpy arrays; there is no
SimPy process per flow, and SimPy's environment is the only clock. A single
"next drain" timer is kept; a timer made stale by a later re-solve is ignored.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np
import simpy

from sim.network.arrivals import Arrivals, Countdown
from sim.network.base import LateEvent, add_counted
from sim.network.flowcheck import check_rates, link_loads
from sim.network.flowstate import FlowArrays, PendingTransfer, blocks, new_flows, path_rows
from sim.network.maxmin import progressive_fill
from sim.network.routebytes import RouteBytes
from sim.network.solvecache import SolveCache
from sim.network.tablerows import RoutesLike, TableRows
from sim.topology.model import Topology
from sim.topology.paths import Path

__all__ = ["FlowNetwork"]


#: A flow whose remaining drain time is at most this fraction of the current time has
#: drained: about 45 ulps of ``now``. It absorbs rounding drift (about an ulp of
#: ``now`` per update) and keeps a timer from firing at ``now`` forever on a remainder
#: too small to move the clock. Flows with identical histories (a symmetric step)
#: have bit-identical remainders, so they leave together without any tolerance.
FINISH_RTOL = 1e-14


class FlowNetwork:
    """Max-min fair flow-level network backend.

    Parameters
    ----------
    env : simpy.Environment
        The simulation clock.
    topology : Topology
        Links (``capacity_Bps``, ``latency_s``) and routes.
    record : bool
        Keep :attr:`samples` of per-link rates at every re-solve.
    debug : bool
        Check max-min fairness (and no link over capacity) at every re-solve with
        :func:`sim.network.maxmin.check_maxmin`; slow, for tests.
    solve_cache : SolveCache, optional
        Rates of earlier solves by their inputs' content, shared with other networks
        (the sizes of a sweep): a repeated solve takes them instead (bit-identical).

    Attributes
    ----------
    link_bytes : numpy.ndarray
        Bytes carried on each directed link by transfers whose last byte was sent.
    solves : int
        Number of re-solves so far.
    samples : list[tuple[float, numpy.ndarray, numpy.ndarray]]
        With ``record``: ``(time_s, link indices, aggregate rate in bytes/s)`` for the
        links carrying traffic from that time on (empty arrays when idle).
    flow_counts : list[numpy.ndarray]
        With ``record``: per sample, the flows on each of its links (a flow split over
        several paths counts its share on each), aligned with the sample's link indices.

    Examples
    --------
    >>> import networkx as nx
    >>> from sim.catalog import GpuSpec
    >>> g = nx.DiGraph()
    >>> g.add_node("a", kind="gpu", node=0); g.add_node("b", kind="gpu", node=0)
    >>> g.add_edge("a", "b", capacity_Bps=100.0, latency_s=1.0, kind="x", scope="net")
    >>> spec = GpuSpec("X", {"bf16": 1e15}, 8e10, 3e12, 700, None, "pcie-gen5")
    >>> topo = Topology("t", g, ("a", "b"), spec, nodes=1, gpus_per_node=2)
    >>> env = simpy.Environment()
    >>> net = FlowNetwork(env, topo)
    >>> done = [net.transfer("a", "b", 100.0), net.transfer("a", "b", 300.0)]
    >>> env.run()
    >>> [env.now, net.solves]  # 2 s at 50 B/s each, then 200 B at 100 B/s, + 1 s latency
    [5.0, 3]
    """

    def __init__(
        self,
        env: simpy.Environment,
        topology: Topology,
        *,
        record: bool = False,
        debug: bool = False,
        solve_cache: SolveCache | None = None,
    ) -> None:
        self.env = env
        self.topology = topology
        self.record = record
        self.debug = debug
        self._nlinks = len(topology.links)
        self._capacity = np.asarray(topology.capacity_Bps, dtype=float)
        lossy = bool(np.any(topology.link_loss > 0))
        self._cache = solve_cache
        # incast loss applied by the solver on the links in use (sim.topology.congestion);
        # solves then depend on the fixed capacities and the loss parameters
        self._solver = (
            functools.partial(progressive_fill, loss=topology.link_loss)
            if lossy
            else progressive_fill
        )
        fixed = np.concatenate([self._capacity, topology.link_loss]) if lossy else self._capacity
        self._capacity_key = SolveCache.key(fixed) if solve_cache else b""
        self._route_id = solve_cache.route_id if solve_cache else None
        self._classes = topology.link_classes()
        self._tables: dict[int, TableRows] = {}  # by id of the route table (kept alive)
        self._keep_alive: list[RoutesLike] = []
        self._class_version = self._classes.version
        self._bytes = RouteBytes(self._nlinks)
        self.solves = 0
        self.samples: list[tuple[float, np.ndarray, np.ndarray]] = []
        self.flow_counts: list[np.ndarray] = []
        self._flows = FlowArrays.empty()
        self._pending: list[PendingTransfer | FlowArrays] = []  # started, not yet sharing
        self._tagged = False  # any flow with a tag so far
        self._tag_ids: dict[str, int] = {"": 0}  # tag -> number (FlowArrays.tag)
        self._route_cache: dict[tuple[str, str, int], tuple[Path, float]] = {}
        self._weighted = False  # any flow split over several paths so far
        self._arrivals = Arrivals(env)  # events by number; drained flows' timers
        self._last = float(env.now)
        self._solve_due = False
        self._generation = 0

    @property
    def active_flows(self) -> int:
        """Transfers sharing links now (started, last byte not yet sent)."""
        return len(self._flows) + len(self._pending)

    @property
    def busy(self) -> bool:
        """True while any transfer is in flight (draining or within its latency)."""
        return self.active_flows > 0 or self._arrivals.landing > 0

    def transfer(
        self,
        src: str,
        dst: str,
        nbytes: float,
        max_rate_Bps: float = math.inf,
        rail: int = -1,
        tag: str = "",
    ) -> simpy.Event:
        """Start moving ``nbytes`` bytes from ``src`` to ``dst``; the event fires on arrival.

        ``max_rate_Bps`` caps the flow's own rate (a private link of that capacity in
        the max-min sharing); ``rail`` pins an inter-server route to that NIC number
        (:meth:`Topology.path`). A transfer to itself lands at once; a zero-byte transfer
        after the route's latency only. Raises ValueError for negative or non-finite
        ``nbytes`` or a non-positive cap.
        """
        if not 0.0 <= nbytes < math.inf:  # also rejects NaN
            raise ValueError(f"nbytes must be finite and >= 0 (got {nbytes!r})")
        if not max_rate_Bps > 0:
            raise ValueError(f"max_rate_Bps must be > 0 (got {max_rate_Bps!r})")
        path, latency = self._route(src, dst, rail)
        if not len(path.links) or nbytes == 0:
            return self._arrivals.timer(latency if len(path.links) else 0.0)
        ev = self.env.event()
        self._weighted = self._weighted or path.weights is not None
        num = self._arrivals.register(ev)
        self._pending.append((path, float(nbytes), latency, float(max_rate_Bps), num,
                              self._tag(tag)))  # fmt: skip
        if not self._solve_due:
            self._request_solve()
        return ev

    def transfer_batch(
        self,
        paths: Sequence[Path],
        latency_s: np.ndarray,
        nbytes: np.ndarray,
        max_rate_Bps: np.ndarray,
        tag: str = "",
    ) -> simpy.Event:
        """Start one transfer per resolved route (``nbytes[i]`` bytes, rate cap
        ``max_rate_Bps[i]``, landing ``latency_s[i]`` after its last byte); the event fires
        when all have landed, at the instant ``all_of`` of :meth:`transfer` would.

        A synchronous step of a few thousand ranks is tens of thousands of transfers; this
        skips the per-transfer route lookup, event and ``all_of``: every flow shares one
        :class:`~sim.network.arrivals.Countdown` in place of an event. Raises ValueError
        for negative or non-finite sizes or non-positive caps.
        """
        _check_batch(nbytes, max_rate_Bps)
        done = self.env.event()
        if not len(paths):
            return done.succeed()
        count = Countdown(done, len(paths))
        sizes, lats, caps = nbytes.tolist(), latency_s.tolist(), max_rate_Bps.tolist()
        flows = [i for i, (p, b) in enumerate(zip(paths, sizes, strict=True)) if len(p.links) and b]
        if len(flows) < len(paths):
            queued = set(flows)
            for i, (path, lat) in enumerate(zip(paths, lats, strict=True)):
                if i not in queued:  # as transfer(): a timer only
                    self._arrivals.timer(lat if len(path.links) else 0.0, count)
        if not flows:
            return done
        mine = [paths[i] for i in flows]
        self._weighted = self._weighted or any(p.weights is not None for p in mine)
        events = [self._arrivals.register(count)] * len(flows)  # all report to the Countdown
        self._pending.append(
            new_flows(mine, [sizes[i] for i in flows], [lats[i] for i in flows],
                      [caps[i] for i in flows], events, [self._tag(tag)] * len(flows), self._nlinks,
                      self._route_id, self._classes, self._bytes.numbers)
        )  # fmt: skip
        if not self._solve_due:
            self._request_solve()
        return done

    def transfer_routes(
        self,
        table: RoutesLike,
        route: np.ndarray,
        nbytes: np.ndarray,
        max_rate_Bps: np.ndarray,
        tag: str = "",
    ) -> simpy.Event:
        """As :meth:`transfer_batch`, the routes given as numbers in ``table`` (a
        :class:`~sim.collectives.steparrays.RouteTable`, latencies its ``latency_s``): the
        flows' rows come from the table's rows built once (:mod:`sim.network.tablerows`)."""
        _check_batch(nbytes, max_rate_Bps)
        done = self.env.event()
        if not len(route):
            return done.succeed()
        rows = self._rows(table)
        rows.update(table, route)
        count = Countdown(done, len(route))
        lat = table.latency_s[route]
        moving = (rows.links[route] > 0) & (nbytes > 0)
        for i in np.flatnonzero(~moving).tolist():  # as transfer(): a timer only
            self._arrivals.timer(float(lat[i]) if rows.links[route[i]] else 0.0, count)
        sel = np.flatnonzero(moving)
        if not sel.size:
            return done
        r = route[sel]
        self._weighted = self._weighted or bool(rows.weighted[r].any())
        hops, share = rows.rows(r)
        size = nbytes[sel].astype(float)
        events = np.full(sel.size, self._arrivals.register(count), dtype=np.intp)
        tags = np.full(sel.size, self._tag(tag), dtype=np.intp)
        self._pending.append(FlowArrays(
            hops, share, size.copy(), np.zeros(sel.size), size, lat[sel].astype(float),
            max_rate_Bps[sel].astype(float), events, tags, rows.route[r], rows.path[r],
        ))  # fmt: skip
        if not self._solve_due:
            self._request_solve()
        return done

    def expect_routes(self, table: RoutesLike, route: np.ndarray) -> None:
        """Build the solver rows of ``table``'s routes ``route`` now (see
        :meth:`Network.expect_routes`): their link classes refined once, before any flow
        is admitted, instead of step by step (each refinement rebuilds the rows built
        before it and the admitted flows' rows)."""
        if len(route):
            self._rows(table).update(table, route)
            if not len(self._flows) and not self._pending:  # no flow's rows to go stale
                self._class_version = self._classes.version

    def _rows(self, table: RoutesLike) -> TableRows:
        """The solver rows of ``table``'s routes on this network (made on first use)."""
        rows = self._tables.get(id(table))
        if rows is None:
            rows = TableRows(self._classes, self._nlinks, self._bytes.numbers, self._route_id)
            self._tables[id(table)] = rows
            self._keep_alive.append(table)
        return rows

    def _route(self, src: str, dst: str, rail: int) -> tuple[Path, float]:
        key = (src, dst, rail)
        hit = self._route_cache.get(key)
        if hit is None:
            path = self.topology.path(src, dst, rail)
            # Summed exactly as uncontended_time_s does, so both backends agree.
            hit = (path, path.latency_s(self.topology.latency_s))
            self._route_cache[key] = hit
        return hit

    def _tag(self, tag: str) -> int:
        """The number of ``tag`` (0: none)."""
        num = self._tag_ids.setdefault(tag, len(self._tag_ids))
        self._tagged = self._tagged or num > 0
        return num

    def _request_solve(self) -> None:
        if not self._solve_due:
            self._solve_due = True
            LateEvent(self.env).callbacks.append(self._solve)

    def _advance(self) -> None:
        """Drain every flow at its rate from the last update to now."""
        now = float(self.env.now)
        dt = now - self._last
        self._last = now
        f = self._flows
        if dt > 0 and len(f):
            f.remaining -= f.rate * dt
            np.maximum(f.remaining, 0.0, out=f.remaining)

    def _finish_drained(self) -> bool:
        """Remove flows whose last byte is sent and schedule their arrivals; any removed?"""
        f = self._flows
        if not len(f):
            return False
        # Time left, not bytes left: a tiny remainder (even one that underflows to a
        # zero drain time) must end the flow, or the timer would fire at now forever.
        done = f.remaining / f.rate <= FINISH_RTOL * float(self.env.now)
        if not done.any():
            return False
        idx = np.flatnonzero(done)
        tags = f.tag[idx] if self._tagged else None
        self._bytes.add(f.path[idx], f.nbytes[idx], tags, list(self._tag_ids))
        self._arrivals.land(f.event[idx], f.latency[idx])
        f.keep(~done)
        return True

    def _admit_pending(self) -> None:
        """Move the queued transfers into the sharing, in the order they were started."""
        if self._pending:
            pending, self._pending = self._pending, []
            made = blocks(pending, self._nlinks, self._route_id, self._classes, self._bytes.numbers)
            self._flows.extend(made, self._nlinks)

    def _solve(self, _event: simpy.Event) -> None:
        """Re-solve the rates (the one place they change) and arm the drain timer."""
        self._solve_due = False
        self._advance()
        self._finish_drained()
        self._admit_pending()
        self.solves += 1
        self._generation += 1
        f = self._flows
        if self._classes.version != self._class_version:  # a class split: rebuild rows
            self._class_version = self._classes.version
            full, share = self._full_rows()
            f.hops, f.share = self._classes.reduce(full, share)
        capped = bool(np.isfinite(f.cap).any())
        weights = f.share if self._weighted else None
        caps = f.cap if capped else None
        if self._cache is None:
            f.rate = self._solver(f.hops, self._capacity, caps, weights)
        else:
            # keyed by the fixed capacities and losses even on lossy links: the incast
            # loss is a function of the flows per link, which the route numbers determine
            f.rate = self._cache.solve_routes(
                self._solver, f.route, f.hops, self._capacity, caps, weights, self._capacity_key
            )
        if self.debug:
            self._check()
        if self.record:
            self._sample()
        if len(f):
            delay = float((f.remaining / f.rate).min())
            timer = self.env.timeout(delay)
            timer.callbacks.append(functools.partial(self._on_timer, self._generation))

    def _full_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """Every link of each flow's route (not one per class) and its shares."""
        return path_rows([self._bytes.paths[k] for k in self._flows.path.tolist()], self._nlinks)

    def _check(self) -> None:
        """Max-min fairness of the rates over every link of every route (debug)."""
        check_rates(*self._full_rows(), self.topology, self._flows.cap, self._flows.rate)

    @property
    def link_bytes(self) -> np.ndarray:
        """Bytes carried on each directed link by transfers whose last byte was sent."""
        return self._bytes.link_bytes

    @property
    def link_bytes_by_tag(self) -> dict[str, np.ndarray]:
        """As :attr:`link_bytes`, per tag of the transfers (untagged ones only in the total)."""
        return self._bytes.by_tag

    def add_link_bytes(self, nbytes: np.ndarray, tag: str = "") -> None:
        """Count ``nbytes`` per link as carried (see :meth:`Network.add_link_bytes`)."""
        add_counted(self._bytes.link_bytes, self._bytes.by_tag, nbytes, tag)

    def _on_timer(self, generation: int, _event: simpy.Event) -> None:
        if generation == self._generation:
            self._advance()
            if self._finish_drained():
                self._request_solve()

    def _sample(self) -> None:
        hops, share = self._full_rows()
        links, load = link_loads(hops, share, self._flows.rate, self._nlinks)
        self.samples.append((float(self.env.now), links, load))
        flows = np.bincount(hops.ravel(), weights=share.ravel(), minlength=self._nlinks + 1)
        self.flow_counts.append(flows[links])


def _check_batch(nbytes: np.ndarray, max_rate_Bps: np.ndarray) -> None:
    """ValueError for a negative or non-finite size or a non-positive rate cap."""
    if not (np.all(nbytes >= 0.0) and np.all(np.isfinite(nbytes))):
        raise ValueError("nbytes must be finite and >= 0")
    if not np.all(max_rate_Bps > 0):
        raise ValueError("max_rate_Bps must be > 0")
