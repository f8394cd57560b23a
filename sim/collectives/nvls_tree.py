"""NVLS-tree: in-switch reduction inside each server, then across servers (all_reduce).

Needs ``layout.node_nvswitch`` (each server's ranks share its NVSwitch), at least two
servers and the same number ``g`` of ranks on each. Reducer ``n + k`` is server ``k``'s
switch. The buffer is cut into ``g * N`` chunks (``N`` servers): column ``i`` (chunks
``i*N .. i*N + N-1``) is carried across servers by local rank ``i`` of every server, over
that rank's own NIC, as NCCL's NVLS-tree does (NCCL uses a tree between servers; a ring
over ``N`` servers moves the same bytes per rank for the sizes where this algorithm wins).

Steps:
1. every rank pushes its whole buffer into its server's switch, which sums it;
2. the switch returns column ``i`` to local rank ``i``;
3. reduce-scatter of each column over the servers (``N - 1`` uniform ring steps);
4. all-gather of each column over the servers (``N - 1`` uniform ring steps);
5. local rank ``i`` stores column ``i`` back into its switch;
6. the switch multicasts every chunk to every rank of its server.

Per rank: ``nbytes (1 + 1/g)`` over NVLink each way and ``2 (N-1)/N * nbytes/g`` over the
network each way. ``pipeline_chunks = C`` streams ``C`` pieces through these steps so
NVLink and the NICs work at the same time.
"""

from __future__ import annotations

from sim.collectives.layout import Layout, check_args
from sim.collectives.pipeline import pipeline
from sim.collectives.schedule import Phase, Schedule, Transfer
from sim.errors import UnsupportedCollectiveError

__all__ = ["SUPPORTS", "nvls_tree", "nvls_tree_shape"]

SUPPORTS = ("all_reduce",)


def nvls_tree_shape(layout: Layout) -> str | None:
    """Why ``layout`` cannot run NVLS-tree, or None when it can.

    >>> nvls_tree_shape(Layout.grid(2, 4, nvswitch=False)) is not None
    True
    """
    if not layout.node_nvswitch:
        return "needs an NVSwitch in every server"
    nodes = layout.nodes
    if len(nodes) < 2:
        return "needs at least two servers"
    if len({len(ranks) for ranks in nodes}) != 1:
        return "needs the same number of ranks on every server"
    return None


def _phases(layout: Layout) -> tuple[Phase, ...]:
    nodes = layout.nodes
    big, g, n = len(nodes), len(nodes[0]), layout.n

    def column(i: int) -> tuple[int, ...]:
        return tuple(range(i * big, (i + 1) * big))

    everything = tuple(range(g * big))

    def push(_k: int) -> list[Transfer]:
        return [
            Transfer(r, n + k, everything, True) for k, ranks in enumerate(nodes) for r in ranks
        ]

    def give(_k: int) -> list[Transfer]:
        return [
            Transfer(n + k, r, column(i))
            for k, ranks in enumerate(nodes)
            for i, r in enumerate(ranks)
        ]

    # (sender, receiver, first chunk of the column, ring position) of each ring hop, once:
    # the 2 (N - 1) ring steps differ only in the piece each hop carries
    hops = [
        (nodes[q][i], nodes[(q + 1) % big][i], i * big, q) for i in range(g) for q in range(big)
    ]

    def scatter(s: int) -> list[Transfer]:  # position q sends piece (q - s) of its column to q + 1
        return [Transfer(a, b, (c + (q - s) % big,), True) for a, b, c, q in hops]

    def gather(s: int) -> list[Transfer]:  # position q forwards piece (q + 1 - s)
        return [Transfer(a, b, (c + (q + 1 - s) % big,)) for a, b, c, q in hops]

    def store(_k: int) -> list[Transfer]:
        return [
            Transfer(r, n + k, column(i))
            for k, ranks in enumerate(nodes)
            for i, r in enumerate(ranks)
        ]

    def multicast(_k: int) -> list[Transfer]:
        return [Transfer(n + k, r, everything) for k, ranks in enumerate(nodes) for r in ranks]

    return (
        Phase(1, push, False, "ranks -> server switch (reduce)"),
        Phase(1, give, False, "switch -> column owner"),
        Phase(big - 1, scatter, True, "reduce-scatter across servers"),
        Phase(big - 1, gather, True, "all-gather across servers"),
        Phase(1, store, False, "column owner -> switch"),
        Phase(1, multicast, False, "switch multicast"),
    )


def nvls_tree(
    op: str,
    n: int,
    nbytes: float,
    *,
    layout: Layout,
    channels: int = 1,
    root: int = 0,
    pipeline_chunks: int = 1,
) -> Schedule:
    """NVLS-tree all_reduce of ``nbytes`` bytes on ``n`` ranks (``channels`` is ignored).

    >>> s = nvls_tree("all_reduce", 4, 64.0, layout=Layout((0, 0, 1, 1), node_nvswitch=True))
    >>> s.num_steps, s.reducers, s.nchunks
    (6, 2, 4)
    """
    check_args("nvls_tree", SUPPORTS, op, n, nbytes, layout, channels, root, pipeline_chunks)
    why = nvls_tree_shape(layout)
    if why is not None:
        raise UnsupportedCollectiveError(f"algorithm 'nvls_tree' cannot run here: it {why}")
    nodes = layout.nodes
    nchunks = len(nodes[0]) * len(nodes)
    base = Schedule(
        op,
        "nvls_tree",
        n,
        nchunks,
        nbytes / nchunks,
        _phases(layout),
        reducers=len(nodes),
        root=root,
    )
    return pipeline(base, pipeline_chunks)
