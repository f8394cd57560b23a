"""Network backends behind one narrow interface (:class:`sim.network.base.Network`).

:data:`BACKENDS` is the one registry of backends: a name, how to build one, and what it
promises. Everything else (scenario validation, the CLI's choices, the collective
simulator, the training-step executors) asks the registry; nothing outside this package
branches on a backend's name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sim.errors import ConfigError
from sim.lazy import lazy_attr

if TYPE_CHECKING:
    import simpy

    from sim.network.analytical import AnalyticalNetwork
    from sim.network.base import Network, uncontended_time_s
    from sim.network.fake import FakeNetwork
    from sim.network.flow import FlowNetwork
    from sim.network.solvecache import SolveCache
    from sim.topology.model import Topology

__all__ = [
    "BACKENDS",
    "AnalyticalNetwork",
    "Backend",
    "FakeNetwork",
    "FlowNetwork",
    "Network",
    "backend",
    "make_network",
    "network_names",
    "uncontended_time_s",
]

# The backends (and SimPy) are imported on first use: the closed form of a collective on
# the analytical network needs the registry only (SimPy and the flow network's modules
# were 60-70 ms of a cold ``clustersim collective --network analytical``).
_HOME_OF = {
    "AnalyticalNetwork": "sim.network.analytical",
    "FakeNetwork": "sim.network.fake",
    "FlowNetwork": "sim.network.flow",
    "Network": "sim.network.base",
    "uncontended_time_s": "sim.network.base",
}


def __getattr__(name: str) -> Any:
    """Import a backend class or helper from its home module on first access."""
    return lazy_attr("sim.network", name, _HOME_OF, globals())


@dataclass(frozen=True)
class Backend:
    """One network backend.

    Attributes
    ----------
    name : str
        Its name in scenarios (``network:``) and on the command line (``--network``).
    build : callable
        ``build(env, topology, record, solve_cache) -> Network``.
    closed_form : bool
        True when a transfer's time is fixed when it starts (nothing started later changes
        it): a collective's time is then the tuner's closed form, and a training step can be
        list-scheduled with every duration known up front. False when transfers share
        links dynamically (re-solved as flows come and go): run on the simulated network.
    summary : str
        One line for help texts.
    """

    name: str
    build: Callable[[simpy.Environment, Topology, bool, SolveCache | None], Network]
    closed_form: bool
    summary: str


def _analytical(env: simpy.Environment, topo: Topology, record: bool,
                cache: SolveCache | None) -> Network:  # fmt: skip
    from sim.network.analytical import AnalyticalNetwork

    return AnalyticalNetwork(env, topo)


def _flow(env: simpy.Environment, topo: Topology, record: bool,
          cache: SolveCache | None) -> Network:  # fmt: skip
    from sim.network.flow import FlowNetwork

    return FlowNetwork(env, topo, record=record, solve_cache=cache)


BACKENDS: dict[str, Backend] = {
    "flow": Backend(
        "flow", _flow, False, "max-min fair sharing of every link, re-solved as flows change"
    ),
    "analytical": Backend(
        "analytical", _analytical, True, "alpha-beta on each route, no dynamic sharing (fast)"
    ),
}


def network_names() -> tuple[str, ...]:
    """The backends' names, in the registry's order (``flow`` first: the default)."""
    return tuple(BACKENDS)


def backend(name: str, where: str = "network") -> Backend:
    """The backend called ``name``.

    Raises
    ------
    ConfigError
        ``name`` is not a known backend; the message names ``where`` and the known ones.

    Examples
    --------
    >>> backend("analytical").closed_form
    True
    >>> backend("packet")
    Traceback (most recent call last):
    ...
    sim.errors.ConfigError: network 'packet' is unknown; allowed: flow, analytical
    """
    spec = BACKENDS.get(name) if isinstance(name, str) else None
    if spec is None:
        raise ConfigError(f"{where} {name!r} is unknown; allowed: {', '.join(BACKENDS)}")
    return spec


def make_network(
    name: str,
    env: simpy.Environment,
    topology: Topology,
    *,
    record: bool = False,
    solve_cache: SolveCache | None = None,
) -> Network:
    """Build the network backend called ``name`` on ``topology``.

    Parameters
    ----------
    name : str
        A key of :data:`BACKENDS` (``"flow"`` or ``"analytical"``).
    env : simpy.Environment
        The simulation clock.
    topology : Topology
        The cluster.
    record : bool
        Keep per-link records (:attr:`Network.samples`) where the backend has rates.
    solve_cache : SolveCache, optional
        Shared solves of a backend that re-solves (the flow network).

    Returns
    -------
    Network
        The backend.

    Raises
    ------
    ConfigError
        ``name`` is not a known backend; the message lists the known ones.
    """
    return backend(name).build(env, topology, record, solve_cache)
