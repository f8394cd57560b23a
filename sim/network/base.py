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

__all__ = ["LATE", "LateEvent", "Network", "uncontended_time_s"]

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
    """

    env: simpy.Environment
    topology: Topology
    link_bytes: np.ndarray

    def transfer(
        self, src: str, dst: str, nbytes: float, max_rate_Bps: float = math.inf
    ) -> simpy.Event:
        """Start moving ``nbytes`` (bytes) from ``src`` to ``dst``; the event fires on arrival.

        ``max_rate_Bps`` caps the transfer's own rate (bytes/s) whatever the links
        offer: the sender's GPU-side limit (NCCL channels, see
        :mod:`sim.collectives.channels`). It acts as a private link of that capacity.
        """
        ...

    @property
    def busy(self) -> bool:
        """True while any transfer is in flight."""
        ...


def uncontended_time_s(
    topology: Topology, src: str, dst: str, nbytes: float, max_rate_Bps: float = math.inf
) -> float:
    """Alpha-beta time of one transfer with nothing else on the network, in seconds.

    ``sum(latency_s on route) + nbytes / min(capacity_Bps on route, max_rate_Bps)``. A
    transfer from a node to itself takes zero time.
    """
    if src == dst:
        return 0.0
    links = topology.route(src, dst)
    if not links:
        return 0.0
    idx = np.asarray(links, dtype=np.intp)
    lat = float(topology.latency_s[idx].sum())
    return lat + float(nbytes) / min(float(topology.capacity_Bps[idx].min()), max_rate_Bps)
