"""What fraction of each link's line rate collectives achieve, from the parameters.

NVLink and PCIe links take their scope's ``link_efficiency``; network links take their
transport's parameters (:class:`~sim.collectives.params.TransportParams`: efficiency and,
for NCCL's CPU-bound socket transport, threads x sockets x rate per socket), falling
back to ``link_efficiency["net"]`` for a transport the parameters do not list.
"""

from __future__ import annotations

import numpy as np

from sim.collectives.params import CollectiveParams
from sim.topology.model import Topology

__all__ = ["LinkKey", "link_class", "link_factors", "link_keys", "scaled_for"]


LinkKey = tuple[str, str, float, bool]  # (scope, transport, line rate B/s, at a NIC)


def link_keys(topology: Topology) -> tuple[list[LinkKey], np.ndarray]:
    """The distinct link classes the parameters can tell apart, and each link's class.

    A class is (scope, transport, line rate in bytes/s, touches a NIC): links of one class
    always get the same :func:`link_factors` whatever the parameters.

    >>> from sim.topology.presets import load_topology
    >>> keys, index = link_keys(load_topology("dgx-h100"))
    >>> sorted({k[:2] for k in keys})
    [('nvlink', 'nvlink'), ('pcie', 'pcie')]
    """
    nics = {v for v, d in topology.graph.nodes(data=True) if d.get("kind") == "nic"}
    at_nic = [u in nics or v in nics for u, v in topology.links]
    rows = zip(
        topology.link_scope, topology.link_transport, topology.capacity_Bps.tolist(), at_nic,
        strict=True,
    )  # fmt: skip
    keys: dict[LinkKey, int] = {}
    # setdefault in a comprehension: the numbering of first appearance, without a Python
    # loop body per link (a 16k-GPU fabric has ~370k links)
    index = np.fromiter(
        (keys.setdefault(key, len(keys)) for key in rows), dtype=np.intp, count=len(at_nic)
    )
    return list(keys), index


def link_factors(topology: Topology, params: CollectiveParams) -> np.ndarray:
    """Per-link fraction of line rate (array aligned with ``topology.capacity_Bps``).

    >>> from sim.collectives.params import default_params
    >>> from sim.topology.presets import load_topology
    >>> t = load_topology("h100-tcp-100g", nodes=33)  # two leaves: spine cables too
    >>> sorted({round(float(f), 3) for f in link_factors(t, default_params())})
    [0.36, 0.8, 0.822, 0.9]
    """
    keys, index = link_keys(topology)
    return np.array([params.link_factor(*k) for k in keys], dtype=float)[index]


def scaled_for(topology: Topology, params: CollectiveParams) -> Topology:
    """``topology`` with every capacity times its :func:`link_factors`."""
    return topology.scaled(link_factors(topology, params))


def link_class(scope: str, transport: str) -> str:
    """The parameter class of a link: its transport for network links, else its scope.

    >>> link_class("net", "ib"), link_class("nvlink", "nvlink")
    ('ib', 'nvlink')
    """
    return transport if scope == "net" else scope
