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

__all__ = [
    "LATE",
    "LateEvent",
    "Network",
    "add_tagged",
    "batch_capacity",
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


class Network(Protocol):
    """What the engine needs from a network backend.

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
    """

    env: simpy.Environment
    topology: Topology
    link_bytes: np.ndarray
    link_bytes_by_tag: dict[str, np.ndarray]

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


def batch_capacity(topology: Topology, flat_links: np.ndarray) -> np.ndarray:
    """Link capacities for a batch of transfers started together, less the incast loss of
    lossy Ethernet links crossed by several of them (:mod:`sim.topology.congestion`).

    ``flat_links`` lists every transfer's links (a link once per transfer crossing it).
    """
    if not np.any(topology.link_loss > 0):
        return topology.capacity_Bps
    from sim.topology.congestion import effective_capacity

    flows = np.bincount(flat_links, minlength=len(topology.capacity_Bps))
    return effective_capacity(topology.capacity_Bps, topology.link_loss, flows)


def add_tagged(counters: dict[str, np.ndarray], tag: str, links: np.ndarray, nbytes: np.ndarray,
               size: int) -> None:  # fmt: skip
    """Add ``nbytes`` on ``links`` (parallel arrays; repeats allowed) to ``counters[tag]``."""
    if not tag:
        return
    acc = counters.get(tag)
    if acc is None:
        acc = counters[tag] = np.zeros(size)
    np.add.at(acc, links, nbytes)
