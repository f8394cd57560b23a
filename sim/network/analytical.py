"""Analytical network: alpha-beta on the route, no dynamic sharing.

Transfers started at the same instant form a *batch* that loads its links together: each
lands ``latency + max over its links (batch bytes on the link / capacity)`` after the
start (and no sooner than its bytes over its own ``max_rate_Bps`` cap). With one transfer per link this is exactly
:func:`sim.network.base.uncontended_time_s` (alpha-beta on the route's bottleneck), which
the flow backend also gives when nothing contends. Where a batch shares a link (a tree
slot, several ring channels leaving one GPU) the sharing is charged; batches started at
different instants never affect each other, and rates are never re-solved. Fast; for
sweeps of many configurations. It is the same cost model as the collective tuner's
:func:`sim.collectives.engine.predict_step_sync`.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import simpy

from sim.network.base import LateEvent, Routes, add_counted, add_tagged
from sim.network.batch import batch_times_s
from sim.topology.model import Topology
from sim.topology.paths import Path

_EMPTY = Path(np.zeros(0, dtype=np.intp))

__all__ = ["AnalyticalNetwork", "batch_times_s"]


class AnalyticalNetwork:
    """Batch-load alpha-beta network backend (no fair-sharing dynamics).

    Parameters
    ----------
    env : simpy.Environment
        The simulation clock.
    topology : Topology
        Links and routes.

    Attributes
    ----------
    link_bytes : numpy.ndarray
        Bytes carried on each directed link by transfers that have started.

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
    >>> net = AnalyticalNetwork(env, topo)
    >>> done = [net.transfer("a", "b", 100.0), net.transfer("a", "b", 300.0)]
    >>> env.run()
    >>> env.now  # one batch: 400 B share the link at 100 B/s, + 1 s latency
    5.0
    """

    def __init__(self, env: simpy.Environment, topology: Topology) -> None:
        self.env = env
        self.topology = topology
        self.link_bytes = np.zeros(len(topology.links))
        self.link_bytes_by_tag: dict[str, np.ndarray] = {}
        self.samples: list[tuple[float, np.ndarray, np.ndarray]] = []  # no rates to record
        self._in_flight = 0
        self._batch: list[tuple[Path, float, float, simpy.Event, str]] = []

    @property
    def busy(self) -> bool:
        """True while any transfer is in flight."""
        return self._in_flight > 0

    @property
    def active_flows(self) -> int:
        """Transfers started and not yet landed."""
        return self._in_flight

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

        ``max_rate_Bps`` caps this transfer's rate: it takes at least
        ``nbytes / max_rate_Bps`` to drain; ``rail`` pins an inter-server route to that NIC
        number. Raises ValueError for negative or non-finite ``nbytes`` or a non-positive cap.
        """
        path = self.topology.path(src, dst, rail) if src != dst else _EMPTY
        return self._start(path, nbytes, max_rate_Bps, tag)

    def transfer_routes(
        self,
        table: Routes,
        route: np.ndarray,
        nbytes: np.ndarray,
        max_rate_Bps: np.ndarray,
        tag: str = "",
    ) -> simpy.Event:
        """Start one transfer per route number (see :meth:`Network.transfer_routes`); they
        join the batch of this instant like :meth:`transfer`'s."""
        table.freeze()
        paths = table.paths
        events = [
            self._start(paths[r], b, c, tag)
            for r, b, c in zip(route.tolist(), nbytes.tolist(), max_rate_Bps.tolist(), strict=True)
        ]
        return self.env.all_of(events)

    def expect_routes(self, table: Routes, route: np.ndarray) -> None:
        """Nothing to prepare (see :meth:`Network.expect_routes`): each transfer is timed
        from its path alone."""

    def add_link_bytes(self, nbytes: np.ndarray, tag: str = "") -> None:
        """Count ``nbytes`` per link as carried (see :meth:`Network.add_link_bytes`)."""
        add_counted(self.link_bytes, self.link_bytes_by_tag, nbytes, tag)

    def _start(self, path: Path, nbytes: float, max_rate_Bps: float, tag: str) -> simpy.Event:
        if not 0.0 <= nbytes < math.inf:  # also rejects NaN
            raise ValueError(f"nbytes must be finite and >= 0 (got {nbytes!r})")
        if not max_rate_Bps > 0:
            raise ValueError(f"max_rate_Bps must be > 0 (got {max_rate_Bps!r})")
        ev = simpy.Event(self.env)
        if not self._batch:
            LateEvent(self.env).callbacks.append(self._flush)
        self._batch.append((path, float(nbytes), float(max_rate_Bps), ev, tag))
        self._in_flight += 1
        return ev

    def _flush(self, _event: simpy.Event) -> None:
        """Cost the batch started at this instant and schedule each landing."""
        batch, self._batch = self._batch, []
        times, load = batch_times_s(
            self.topology,
            [b[0] for b in batch],
            np.array([b[1] for b in batch], dtype=float),
            np.array([b[2] for b in batch], dtype=float),
        )
        self.link_bytes += load
        for p, b, _, _, tag in batch:
            add_tagged(self.link_bytes_by_tag, tag, p.links, b * p.shares, len(load))
        for (_, _, _, ev, _), t in zip(batch, times, strict=True):
            timer = self.env.timeout(float(t))
            timer.callbacks.append(functools.partial(self._land, ev))

    def _land(self, ev: simpy.Event, _timer: simpy.Event) -> None:
        self._in_flight -= 1
        ev.succeed()
