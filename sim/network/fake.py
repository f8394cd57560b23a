"""A trivial network backend for exact engine tests.

Each transfer takes ``time_fn(src, dst, nbytes)`` seconds (default: 1 s whatever the
size), with no topology needed. Every transfer is logged in :attr:`FakeNetwork.log`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import simpy

from sim.network.base import Routes, add_counted
from sim.topology.model import Topology

__all__ = ["FakeNetwork"]


def one_second(src: str, dst: str, nbytes: float) -> float:
    """Default transfer time: 1 s for any transfer."""
    return 1.0


class FakeNetwork:
    """Network backend whose transfer times come from a function.

    Parameters
    ----------
    env : simpy.Environment
        The simulation clock.
    topology : Topology or None
        When given, :attr:`link_bytes` counts bytes on each transfer's route.
    time_fn : callable
        ``time_fn(src, dst, nbytes) -> seconds``; default 1 s per transfer.

    Attributes
    ----------
    link_bytes : numpy.ndarray
        Bytes per directed link of ``topology`` (empty without one), counted at start.
    log : list[tuple[float, str, str, float]]
        ``(start_s, src, dst, nbytes)`` of every transfer, in call order.

    Examples
    --------
    >>> env = simpy.Environment()
    >>> net = FakeNetwork(env, time_fn=lambda s, d, n: n / 10.0)
    >>> ev = net.transfer("a", "b", 50.0)
    >>> env.run(ev)
    >>> env.now
    5.0
    """

    def __init__(
        self,
        env: simpy.Environment,
        topology: Topology | None = None,
        time_fn: Callable[[str, str, float], float] = one_second,
    ) -> None:
        self.env = env
        self.topology = topology
        self.time_fn = time_fn
        self.link_bytes = np.zeros(len(topology.links) if topology is not None else 0)
        self.link_bytes_by_tag: dict[str, np.ndarray] = {}
        self.log: list[tuple[float, str, str, float]] = []
        self.samples: list[tuple[float, np.ndarray, np.ndarray]] = []
        self._in_flight = 0

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
        """Start a transfer; the event fires ``time_fn(src, dst, nbytes)`` seconds later
        (``max_rate_Bps``, ``rail`` and ``tag`` are ignored: the time function decides)."""
        self.log.append((float(self.env.now), src, dst, float(nbytes)))
        if self.topology is not None and nbytes:
            route = self.topology.route(src, dst)
            np.add.at(self.link_bytes, np.asarray(route, dtype=np.intp), float(nbytes))
        self._in_flight += 1
        ev = self.env.timeout(float(self.time_fn(src, dst, nbytes)))
        ev.callbacks.append(self._landed)
        return ev

    def transfer_routes(
        self,
        table: Routes,
        route: np.ndarray,
        nbytes: np.ndarray,
        max_rate_Bps: np.ndarray,
        tag: str = "",
    ) -> simpy.Event:
        """One :meth:`transfer` per route number of ``table``; fires when all have landed."""
        events = []
        for r, b in zip(route.tolist(), nbytes.tolist(), strict=True):
            src, dst, rail = table.endpoints(r)
            events.append(self.transfer(src, dst, b, rail=rail, tag=tag))
        return self.env.all_of(events)

    def expect_routes(self, table: Routes, route: np.ndarray) -> None:
        """Nothing to prepare (see :meth:`Network.expect_routes`)."""

    def add_link_bytes(self, nbytes: np.ndarray, tag: str = "") -> None:
        """Count ``nbytes`` per link as carried (see :meth:`Network.add_link_bytes`)."""
        add_counted(self.link_bytes, self.link_bytes_by_tag, nbytes, tag)

    def _landed(self, _event: simpy.Event) -> None:
        self._in_flight -= 1
