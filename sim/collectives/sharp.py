"""Where SHARP reduces: one aggregation switch per rail for a group of servers.

NVIDIA's SHARP builds an aggregation tree per reduction over the switches; the root is a
switch every participating NIC reaches. Here each rail (NIC number ``i``) of the group's
servers gets one aggregation point: the switch whose farthest rail-``i`` NIC is the
fewest hops away (the rail's leaf when the servers share it, a spine above several
leaves otherwise); ties go round-robin by rail so rails spread over the spines. The tree
below that switch is not modelled hop by hop: every NIC's data goes to the aggregation
switch along its route and the sum comes back along the reverse route, which charges
each link the bytes a SHARP tree puts on it when the tree follows the routes.
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.errors import ConfigError
from sim.topology.model import Topology

__all__ = ["aggregation_switches"]


def _rail_nics(topology: Topology, gpu: str) -> list[str]:
    node = topology.node_of(gpu)
    return sorted(
        v
        for v, d in topology.graph.nodes(data=True)
        if d.get("kind") == "nic" and d.get("node") == node
    )


def _hops_from(topology: Topology, source: str) -> dict[str, int]:
    """Hops from ``source`` to every switch (BFS over non-server nodes)."""
    g = topology.graph
    dist = {source: 0}
    frontier = [source]
    while frontier:
        nxt = []
        for u in frontier:
            for v in g.successors(u):
                if v not in dist and g.nodes[v].get("node") is None:
                    dist[v] = dist[u] + 1
                    nxt.append(v)
        frontier = nxt
    return dist


def aggregation_switches(topology: Topology, group: Sequence[str], per_node: int) -> list[str]:
    """The SHARP aggregation switch of each local rank (rail) ``0 .. per_node - 1``.

    Raises
    ------
    ConfigError
        A server of the group has fewer NICs than ranks, or no switch reaches them all.
    """
    servers: dict[int, str] = {}
    for gpu in group:
        servers.setdefault(topology.node_of(gpu), gpu)
    out = []
    for i in range(per_node):
        nics = []
        for gpu in servers.values():
            own = _rail_nics(topology, gpu)
            if i >= len(own):
                raise ConfigError(
                    f"SHARP needs a NIC per local rank: server of {gpu} has {len(own)} NICs, "
                    f"{per_node} ranks"
                )
            nics.append(own[i])
        reach = [_hops_from(topology, nic) for nic in nics]
        common = set(reach[0]).intersection(*reach[1:]) - set(nics)
        if not common:
            raise ConfigError(f"SHARP: no switch reaches every rail-{i} NIC of the group")
        worst = {sw: max(r[sw] for r in reach) for sw in common}
        best = min(worst.values())
        ties = sorted(sw for sw, w in worst.items() if w == best)
        out.append(ties[i % len(ties)])
    return out
