"""The network seam: start a transfer between two endpoints, get an event when it lands.

Backends (``analytical``, ``flow``) implement :class:`Network`. A transfer of ``nbytes``
from ``src`` to ``dst`` (graph node names) follows ``topology.route(src, dst)``; it
completes ``latency + nbytes / rate`` after it starts, where latency is the sum of the
per-hop latencies along the route and rate is the backend's bandwidth for the flow
(the route's bottleneck capacity when nothing contends, or the transfer's own
``max_rate_Bps`` cap when that is lower).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Protocol

import numpy as np
import simpy
from simpy.events import EventPriority

if TYPE_CHECKING:
    from sim.topology.model import Topology
    from sim.topology.paths import Path

__all__ = [
    "LATE",
    "LateEvent",
    "Network",
    "Routes",
    "add_counted",
    "add_tagged",
    "uncontended_time_s",
]

#: Priority of the batched re-solve: after every NORMAL (1) and URGENT (0) event.
LATE = EventPriority(2)


class LateEvent(simpy.Event):
    """An event that fires at the current time after all NORMAL events of that instant.

    Built as SimPy builds its own ``Timeout``: already triggered, then scheduled;
    ``succeed()`` would schedule it at NORMAL priority.
    """

    def __init__(self, env: simpy.Environment) -> None:
        super().__init__(env)
        self._ok = True
        self._value = None
        env.schedule(self, LATE)


class Routes(Protocol):
    """Numbered routes a backend can start transfers on by number
    (:class:`sim.collectives.steparrays.RouteTable`)."""

    latency_s: np.ndarray

    @property
    def paths(self) -> list[Path]:
        """Route ``i``'s path at index ``i``."""
        ...

    def freeze(self) -> None:
        """Bring the numbered routes' arrays up to date."""
        ...

    def endpoints(self, i: int) -> tuple[str, str, int]:
        """``(src, dst, rail)`` of route ``i``."""
        ...


class Network(Protocol):
    """What executors and collectives need from a network backend: the whole seam.

    Attributes
    ----------
    env : simpy.Environment
        The clock shared with the rest of the simulation.
    topology : Topology
        Links, capacities, latencies and routes.
    link_bytes : numpy.ndarray
        Bytes carried so far on each directed link (index = ``topology`` link index).
    link_bytes_by_tag : dict[str, numpy.ndarray]
        The same per transfer tag (what the bytes belonged to, e.g. ``"dp"``); untagged
        transfers count in ``link_bytes`` only.
    samples : list[tuple[float, numpy.ndarray, numpy.ndarray]]
        Per-link records when the backend was built with ``record=True``:
        ``(time_s, link indices, aggregate rate in bytes/s)`` from that time on (the
        links carrying traffic); empty otherwise.
    """

    env: simpy.Environment
    topology: Topology
    samples: list[tuple[float, np.ndarray, np.ndarray]]

    @property
    def link_bytes(self) -> np.ndarray:
        """Bytes carried so far on each directed link."""
        ...

    @property
    def link_bytes_by_tag(self) -> dict[str, np.ndarray]:
        """Bytes carried so far on each directed link, per tag."""
        ...

    def transfer(
        self,
        src: str,
        dst: str,
        nbytes: float,
        max_rate_Bps: float = math.inf,
        rail: int = -1,
        tag: str = "",
    ) -> simpy.Event:
        """Start moving ``nbytes`` (bytes) from ``src`` to ``dst``; the event fires on arrival.

        ``max_rate_Bps`` caps the transfer's own rate (bytes/s) whatever the links
        offer: the sender's GPU-side limit (NCCL channels, see
        :mod:`sim.collectives.channels`). It acts as a private link of that capacity.
        ``rail`` >= 0 pins an inter-server route to that NIC number at both ends (NCCL
        binds each ring channel to one NIC); the path follows the topology's routing
        (:meth:`sim.topology.model.Topology.path`). ``tag`` names what the bytes belong to
        in :attr:`link_bytes_by_tag`.
        """
        ...

    def transfer_routes(
        self,
        table: Routes,
        route: np.ndarray,
        nbytes: np.ndarray,
        max_rate_Bps: np.ndarray,
        tag: str = "",
    ) -> simpy.Event:
        """Start one transfer per route number in ``route`` (``nbytes[i]`` bytes, rate cap
        ``max_rate_Bps[i]``) on ``table``'s routes; the event fires when all have landed,
        at the instant ``all_of`` of :meth:`transfer` would."""
        ...

    def expect_routes(self, table: Routes, route: np.ndarray) -> None:
        """Say that transfers on ``table``'s routes ``route`` (route numbers) will follow: a
        backend that prepares each route before its first transfer may prepare them all at
        once (the flow network refines its link classes once, not at every step)."""
        ...

    def add_link_bytes(self, nbytes: np.ndarray, tag: str = "") -> None:
        """Count ``nbytes`` (one entry per link) as carried, under ``tag`` too: traffic
        timed without being sent transfer by transfer (a collective phase's identical steps
        after the first)."""
        ...

    @property
    def busy(self) -> bool:
        """True while any transfer is in flight."""
        ...


def uncontended_time_s(
    topology: Topology,
    src: str,
    dst: str,
    nbytes: float,
    max_rate_Bps: float = math.inf,
    rail: int = -1,
) -> float:
    """Alpha-beta time of one transfer with nothing else on the network, in seconds.

    ``latency + nbytes * max over links (share / capacity_Bps)``, at least
    ``nbytes / max_rate_Bps`` for the transfer itself, where the latency is the route's
    (share-weighted) per-hop sum. A transfer from a node to itself takes zero time.
    """
    if src == dst:
        return 0.0
    path = topology.path(src, dst, rail)
    if not len(path.links):
        return 0.0
    idx = path.links
    lat = path.latency_s(topology.latency_s)
    per_byte = float(np.max(path.shares / topology.capacity_Bps[idx]))
    return lat + float(nbytes) * max(per_byte, 1.0 / max_rate_Bps)


def add_tagged(counters: dict[str, np.ndarray], tag: str, links: np.ndarray, nbytes: np.ndarray,
               size: int) -> None:  # fmt: skip
    """Add ``nbytes`` on ``links`` (parallel arrays; repeats allowed) to ``counters[tag]``."""
    if not tag:
        return
    acc = counters.get(tag)
    if acc is None:
        acc = counters[tag] = np.zeros(size)
    np.add.at(acc, links, nbytes)


def add_counted(
    link_bytes: np.ndarray, by_tag: dict[str, np.ndarray], nbytes: np.ndarray, tag: str
) -> None:
    """Add ``nbytes`` (one entry per link) to ``link_bytes`` and, with a tag, to
    ``by_tag[tag]``: the body of every backend's ``add_link_bytes``."""
    link_bytes += nbytes
    if tag:
        acc = by_tag.get(tag)
        if acc is None:
            acc = by_tag[tag] = np.zeros(len(link_bytes))
        acc += nbytes
