"""Hierarchical collectives: rings inside each server, rings across servers.

Needs :attr:`Layout.nodes` to have at least two servers with ``g`` ranks each. The
rank with local index ``l`` on server ``m`` is ``nodes[m][l]``; the ranks sharing a
local index (one per server) form column ``l``. Shards keep the op's meaning (shard of
rank ``r`` is chunks ``r*channels + ch``), so column ``l`` owns ``N`` shards.

- reduce_scatter: intra-server ring reduce-scatter (rank ``(m, l)`` ends with column
  ``l``'s shards summed over its server; ``g-1`` steps), then a ring reduce-scatter
  across servers inside each column (``N-1`` steps).
- all_gather: ring all-gather across servers inside each column (``N-1`` steps), then
  intra-server ring all-gather of whole columns (``g-1`` steps).
- all_reduce: reduce_scatter then all_gather, i.e. intra-server reduce-scatter, an
  inter-server ring all_reduce on ``1/g`` of the data, intra-server all-gather:
  ``2(g-1) + 2(N-1)`` steps, all uniform. Only ``2(N-1)/(N·g)·nbytes`` per rank crosses
  servers, against ``2(n-1)/n·nbytes`` per rank on any link in total.

``channels`` works as in :mod:`sim.collectives.ring` (odd channels run backwards);
``pipeline_chunks`` is ignored.
"""

from __future__ import annotations

from collections.abc import Callable

from sim.collectives.layout import Layout, check_args
from sim.collectives.ring import Ring, channel_order, ring_phase
from sim.collectives.schedule import Phase, Schedule
from sim.errors import UnsupportedCollectiveError

__all__ = ["SUPPORTS", "hierarchical", "hierarchical_shape"]

SUPPORTS = ("all_reduce", "all_gather", "reduce_scatter")


def hierarchical_shape(layout: Layout) -> str | None:
    """Why ``layout`` cannot run hierarchical collectives, or None when it can.

    >>> hierarchical_shape(Layout.flat(4))
    'needs >= 2 nodes with equal ranks per node (got nodes of sizes [4])'
    """
    sizes = [len(ranks) for ranks in layout.nodes]
    if len(sizes) < 2 or len(set(sizes)) != 1:
        return f"needs >= 2 nodes with equal ranks per node (got nodes of sizes {sizes})"
    return None


def _rings(layout: Layout, channels: int) -> tuple[list[Ring], list[Ring]]:
    """(intra-server rings, inter-server column rings), one per channel each."""
    nodes = layout.nodes
    columns = list(zip(*nodes, strict=True))
    local = {r: i for ranks in nodes for i, r in enumerate(ranks)}

    def column_chunks(ch: int) -> Callable[[int], tuple[int, ...]]:
        return lambda r: tuple(s * channels + ch for s in columns[local[r]])

    def own_chunk(ch: int) -> Callable[[int], tuple[int, ...]]:
        return lambda r: (r * channels + ch,)

    intra = [
        Ring(channel_order(ranks, ch), column_chunks(ch))
        for ch in range(channels)
        for ranks in nodes
    ]
    inter = [
        Ring(channel_order(col, ch), own_chunk(ch)) for ch in range(channels) for col in columns
    ]
    return intra, inter


def hierarchical(
    op: str,
    n: int,
    nbytes: float,
    *,
    layout: Layout,
    channels: int = 1,
    root: int = 0,
    pipeline_chunks: int = 1,
) -> Schedule:
    """Two-level (intra-server, inter-server) ring schedule for ``op`` on ``n`` ranks.

    Parameters
    ----------
    op : str
        all_reduce, all_gather or reduce_scatter.
    n : int
        Ranks in the group.
    nbytes : float
        nccl-tests size of the buffer (bytes).
    layout : Layout
        Must have >= 2 nodes with equal ranks per node.
    channels : int
        Parallel rings at each level, each carrying ``1/channels`` of the data.
    root : int
        Unused (no rooted ops).
    pipeline_chunks : int
        Unused.

    Raises
    ------
    UnsupportedCollectiveError
        For other ops, or a layout with one node or unequal nodes.

    Examples
    --------
    >>> s = hierarchical("all_reduce", 8, 8e6, layout=Layout.grid(2, 4))
    >>> s.num_steps, [p.repeat for p in s.phases]
    (8, [3, 1, 1, 3])
    """
    check_args("hierarchical", SUPPORTS, op, n, nbytes, layout, channels, root, pipeline_chunks)
    why = hierarchical_shape(layout)
    if why is not None:
        raise UnsupportedCollectiveError(f"algorithm 'hierarchical' for op {op!r} {why}")
    intra, inter = _rings(layout, channels)
    parts: list[Phase] = []
    if op != "all_gather":
        parts.append(ring_phase(intra, "reduce_scatter", "intra-node reduce-scatter"))
        parts.append(ring_phase(inter, "reduce_scatter", "inter-node reduce-scatter"))
    if op != "reduce_scatter":
        parts.append(ring_phase(inter, "all_gather", "inter-node all-gather"))
        parts.append(ring_phase(intra, "all_gather", "intra-node all-gather"))
    phases = tuple(p for p in parts if p.repeat > 0)
    return Schedule(op, "hierarchical", n, n * channels, nbytes / (n * channels), phases, root=root)
