"""Network backends behind one narrow interface (:class:`sim.network.base.Network`).

``BACKENDS`` maps a backend name to its class; :func:`make_network` builds one by name.
"""

from __future__ import annotations

from collections.abc import Callable

import simpy

from sim.errors import ConfigError
from sim.network.analytical import AnalyticalNetwork
from sim.network.base import Network, uncontended_time_s
from sim.network.fake import FakeNetwork
from sim.network.flow import FlowNetwork
from sim.topology.model import Topology

__all__ = [
    "BACKENDS",
    "AnalyticalNetwork",
    "FakeNetwork",
    "FlowNetwork",
    "Network",
    "make_network",
    "uncontended_time_s",
]

BACKENDS: dict[str, Callable[[simpy.Environment, Topology], Network]] = {
    "analytical": AnalyticalNetwork,
    "flow": FlowNetwork,
}


def make_network(name: str, env: simpy.Environment, topology: Topology) -> Network:
    """Build the network backend called ``name`` on ``topology``.

    Parameters
    ----------
    name : str
        A key of :data:`BACKENDS` (``"analytical"`` or ``"flow"``).
    env : simpy.Environment
        The simulation clock.
    topology : Topology
        The cluster.

    Returns
    -------
    Network
        The backend.

    Raises
    ------
    ConfigError
        ``name`` is not a known backend; the message lists the known ones.
    """
    try:
        cls = BACKENDS[name]
    except KeyError:
        allowed = ", ".join(sorted(BACKENDS))
        raise ConfigError(f"unknown network backend {name!r}; allowed: {allowed}") from None
    return cls(env, topology)
