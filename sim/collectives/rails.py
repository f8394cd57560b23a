"""Which NIC (rail) each ring channel of a group leaves its servers through.

NCCL's searched rings on multi-NIC servers pin each channel to one NIC: channel ``c``
enters a server at the GPU beside NIC ``c`` and leaves through it again
(:func:`sim.collectives.ring.channel_order`), so a group that fills its servers runs one
ring per NIC. A group with fewer GPUs per server than NICs (the data-parallel group of one
tensor-parallel rank: one GPU per server) uses the NIC beside its own GPU, so the TP
ranks' groups of a rail-optimized fabric land on disjoint rails.
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.topology.model import Topology

__all__ = ["rail_map", "ring_channels"]


def ring_channels(topology: Topology, group: Sequence[str], nodes: int) -> int:
    """Parallel rings (NCCL channels) when the group spans servers, else 1.

    One ring per NIC of a server, but no more than the group's GPUs on that server: each
    ring enters and leaves a server through a different GPU's nearest NIC (rail).
    """
    if nodes <= 1:
        return 1
    node = topology.node_of(group[0])
    local = sum(1 for gpu in group if topology.node_of(gpu) == node)
    return max(1, min(topology.nics_per_node().get(node, 0), local, 16))


def rail_map(topology: Topology, group: Sequence[str], nodes: int) -> tuple[int, ...]:
    """NIC of each channel when the group has fewer GPUs on a server than the server has
    NICs (a DP group of one TP rank): the NIC beside the GPU the channel enters at, GPU
    ``j`` of ``G`` sitting beside NIC ``j * NICs // G`` as NCCL's topology search finds it.
    Empty (channel ``c`` on NIC ``c``) for groups that fill the server's NICs.

    >>> from sim.topology.presets import load_topology
    >>> t = load_topology("h100-ib-ndr", nodes=2)
    >>> rail_map(t, ["n0.gpu3", "n1.gpu3"], 2)
    (3,)
    """
    if nodes <= 1:
        return ()
    node = topology.node_of(group[0])
    nics = topology.nics_per_node().get(node, 0)
    local = [g for g in group if topology.node_of(g) == node]
    if not nics or len(local) >= nics:
        return ()
    server = topology.server_gpus(node)
    return tuple(server.index(g) * nics // len(server) for g in local)
