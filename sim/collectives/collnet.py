"""CollNet: all-reduce with in-network reduction in the switches (InfiniBand SHARP).

NCCL's CollNet algorithms hand the inter-server part of an all-reduce to the network:
each rank of a server sends its share up to a switch that sums the shares of every
server and sends the sum back (SHARP aggregation trees on NVIDIA Quantum switches). Per
rank that moves ``nbytes / g`` up and down the network once, where a ring moves
``2 (N-1)/N * nbytes / g`` each way: about half the network bytes. Inside servers it
uses NVLink SHARP (NVLS: in-switch reduction) where the GPUs have it, NCCL's "NVLS +
SHARP", and rings over NVLink otherwise (CollNet-direct on A100-class servers).

Needs at least two servers with the same number ``g`` of ranks each. Participants
beyond the ranks are reducers: with NVLS, servers' NVSwitches ``n .. n+N-1``; then one
network switch per local rank (rail) ``i``, the aggregation point of the rail-``i`` NICs
(:meth:`CollectiveSetup.sharp_switches`). The buffer is cut into ``g * C`` pieces;
column ``i`` belongs to local rank ``i`` of every server.

Steps (``pipeline_chunks = C`` streams ``C`` pieces through them):

1. reduce the server's buffer into columns: NVLS push/give, or a ring reduce-scatter
   inside the server (``g - 1`` steps);
2. local rank ``i`` of every server sends column ``i`` to switch ``i``, which sums them;
3. switch ``i`` sends the sum back to local rank ``i`` of every server;
4. spread the columns over the server: NVLS store/multicast, or a ring all-gather.
"""

from __future__ import annotations

from collections.abc import Callable

from sim.collectives.layout import Layout, check_args
from sim.collectives.pipeline import pipeline
from sim.collectives.ring import Ring, ring_phase
from sim.collectives.schedule import Phase, Schedule, Transfer
from sim.errors import UnsupportedCollectiveError

__all__ = ["SUPPORTS", "collnet", "collnet_shape"]

SUPPORTS = ("all_reduce",)


def collnet_shape(layout: Layout) -> str | None:
    """Why ``layout`` cannot run CollNet, or None when it can.

    >>> collnet_shape(Layout.grid(2, 4)) is None
    True
    >>> collnet_shape(Layout.flat(4))
    'needs at least two servers'
    """
    nodes = layout.nodes
    if len(nodes) < 2:
        return "needs at least two servers"
    if len({len(r) for r in nodes}) != 1:
        return "needs the same number of ranks on every server"
    return None


def _intra(
    layout: Layout, nvls: bool, col: Callable[[int], tuple[int, ...]]
) -> tuple[tuple[Phase, ...], tuple[Phase, ...]]:
    """(phases reducing each server into columns, phases spreading them back)."""
    nodes, n = layout.nodes, layout.n
    big, g = len(nodes), len(nodes[0])

    if nvls:
        everything = tuple(range(g * big))

        def push(_k: int) -> list[Transfer]:
            return [Transfer(r, n + k, everything, True) for k, rs in enumerate(nodes) for r in rs]

        def give(_k: int) -> list[Transfer]:
            return [
                Transfer(n + k, r, col(i)) for k, rs in enumerate(nodes) for i, r in enumerate(rs)
            ]

        def store(_k: int) -> list[Transfer]:
            return [
                Transfer(r, n + k, col(i)) for k, rs in enumerate(nodes) for i, r in enumerate(rs)
            ]

        def multicast(_k: int) -> list[Transfer]:
            return [Transfer(n + k, r, everything) for k, rs in enumerate(nodes) for r in rs]

        return (
            (Phase(1, push, False, "ranks -> server switch (reduce)"),
             Phase(1, give, False, "switch -> column owner")),
            (Phase(1, store, False, "column owner -> switch"),
             Phase(1, multicast, False, "switch multicast")),
        )  # fmt: skip
    if g == 1:
        return (), ()

    def owned(rs: tuple[int, ...]) -> Callable[[int], tuple[int, ...]]:
        return lambda r: col(rs.index(r))

    rings = [Ring(tuple(rs), owned(rs)) for rs in nodes]
    return (ring_phase(rings, "reduce_scatter", "server reduce-scatter"),), (
        ring_phase(rings, "all_gather", "server all-gather"),
    )


def collnet(
    op: str,
    n: int,
    nbytes: float,
    *,
    layout: Layout,
    channels: int = 1,
    root: int = 0,
    pipeline_chunks: int = 1,
) -> Schedule:
    """CollNet (SHARP) all_reduce of ``nbytes`` bytes on ``n`` ranks (``channels`` ignored).

    ``layout.node_nvswitch`` selects NVLS inside servers (reducers: the ``N`` server
    switches, then the ``g`` network switches), else rings inside servers (reducers: the
    ``g`` network switches).

    >>> s = collnet("all_reduce", 4, 64.0, layout=Layout.grid(2, 2, node_nvswitch=True))
    >>> s.num_steps, s.reducers, s.nchunks
    (6, 4, 4)
    >>> collnet("all_reduce", 4, 64.0, layout=Layout.grid(2, 2)).reducers
    2
    """
    check_args("collnet", SUPPORTS, op, n, nbytes, layout, channels, root, pipeline_chunks)
    why = collnet_shape(layout)
    if why is not None:
        raise UnsupportedCollectiveError(f"algorithm 'collnet' cannot run here: it {why}")
    nodes = layout.nodes
    big, g = len(nodes), len(nodes[0])
    nvls = layout.node_nvswitch

    def column(i: int) -> tuple[int, ...]:
        return tuple(range(i * big, (i + 1) * big))

    first = n + (big if nvls else 0)  # id of the rail-0 network switch

    def up(_k: int) -> list[Transfer]:
        return [
            Transfer(r, first + i, column(i), True, i) for rs in nodes for i, r in enumerate(rs)
        ]

    def down(_k: int) -> list[Transfer]:
        return [
            Transfer(first + i, r, column(i), False, i) for rs in nodes for i, r in enumerate(rs)
        ]

    reduce_in, spread_out = _intra(layout, nvls, column)
    phases = (
        *reduce_in,
        Phase(1, up, False, "column owners -> SHARP switch (reduce)"),
        Phase(1, down, False, "SHARP switch -> column owners"),
        *spread_out,
    )
    base = Schedule(op, "collnet", n, g * big, nbytes / (g * big), phases,
                    reducers=(big if nvls else 0) + g, root=root)  # fmt: skip
    return pipeline(base, pipeline_chunks)
