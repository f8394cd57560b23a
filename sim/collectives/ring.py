"""NCCL's ring algorithm, and the ring building blocks the hierarchical algorithm reuses.

Ring order is :attr:`Layout.order` (ranks of one server next to each other, so a ring
crosses each inter-server link once, as NCCL's searched rings do). ``channels`` rings
run in parallel, each carrying ``1/channels`` of the data: chunk ``shard*channels + ch``
belongs to channel ``ch``. Even channels go round the ring forward, odd channels
backward, so the two directions of every full-duplex link both carry data (NCCL's
topology search likewise gives channels different ring orders).

Steps:

- all_reduce: reduce-scatter then all-gather, ``2(n-1)`` uniform steps; every step each
  rank sends ``nbytes/n`` (split over channels) to its ring successor.
- reduce_scatter, all_gather: ``n-1`` uniform steps each.
- broadcast, reduce: on each channel, a chain from / to ``root`` along that channel's
  ring (the all_reduce ring: same order, same rail, so the channels cross servers on
  different NICs), ``n-1`` hops, pipelined over ``pipeline_chunks`` pieces:
  ``n - 2 + pipeline_chunks`` steps.

``pipeline_chunks`` is ignored for all_reduce, reduce_scatter and all_gather: every ring
step already keeps every ring link busy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sim.collectives.layout import Layout, check_args
from sim.collectives.pipeline import pipeline
from sim.collectives.schedule import Phase, Schedule, Transfer

__all__ = ["SUPPORTS", "Ring", "channel_order", "ring", "ring_phase"]

SUPPORTS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")


@dataclass(frozen=True)
class Ring:
    """One ring: ranks in ring order and the chunks each rank owns.

    Attributes
    ----------
    order : tuple[int, ...]
        Participants in ring order; position ``p`` sends to position ``p+1``.
    owned : Callable[[int], tuple[int, ...]]
        Chunks owned by a participant (its block); every block of a ring must have the
        same length, which is what makes ring phases uniform.
    rail : int
        NIC number the ring's server-to-server hops are pinned to (-1: none).
    """

    order: tuple[int, ...]
    owned: Callable[[int], tuple[int, ...]]
    rail: int = -1


def channel_order(
    order: Sequence[int], ch: int, node_of: Sequence[int] | None = None
) -> tuple[int, ...]:
    """Ring order of channel ``ch``.

    Within one server: ``order``, reversed for odd channels so both directions of each
    link carry data. Across servers (``node_of`` given, the ring spanning servers), as
    NCCL's searched rings do on multi-NIC servers (``NET n -> GPU a -> ... -> GPU x ->
    NET n``): channel ``ch`` enters every server at the server's GPU number ``ch`` (the
    one beside NIC ``ch``), visits the server's GPUs and leaves from that GPU's PCIe
    partner (``ch ^ 1``), so it goes out through NIC ``ch`` again; even channels walk the
    server's GPUs downward, odd ones upward, so NVLink is used both ways. The server-to-
    server hops are pinned to NIC ``ch`` by :func:`ring` (``Ring.rail``), which keeps each
    channel on its rail at any scale.

    >>> channel_order((0, 1, 2), 1)
    (2, 1, 0)
    >>> channel_order((0, 1, 2, 3), 0, node_of=(0, 0, 1, 1))
    (0, 1, 2, 3)
    >>> channel_order(tuple(range(8)), 2, node_of=(0,) * 4 + (1,) * 4)
    (2, 1, 0, 3, 6, 5, 4, 7)
    """
    seq = tuple(order)
    if node_of is not None:
        segments: list[list[int]] = []
        for r in seq:
            if segments and node_of[segments[-1][-1]] == node_of[r]:
                segments[-1].append(r)
            else:
                segments.append([r])
        if len(segments) > 1:
            return tuple(r for sg in segments for r in _server_walk(sg, ch))
    return seq if ch % 2 == 0 else tuple(reversed(seq))


def _server_walk(seg: list[int], ch: int) -> list[int]:
    """One server's GPUs for channel ``ch``: in at local ``ch``, out at its partner."""
    k = len(seg)
    r = ch % k
    if k % 2 and r == k - 1:  # the odd one out has no partner: leave from its neighbour
        return [seg[(r - i) % k] for i in range(k)]
    step = -1 if r % 2 == 0 else 1
    return [seg[(r + step * i) % k] for i in range(k)]


def ring_phase(rings: Sequence[Ring], kind: str, label: str = "") -> Phase:
    """Ring reduce-scatter or all-gather on every ring of ``rings`` at once.

    ``kind="reduce_scatter"``: after ``L-1`` steps (``L`` ranks per ring) each rank
    holds its own block summed over its ring. ``kind="all_gather"``: each rank starts
    with its own block and ends with every block of its ring. All rings must have the
    same length. The phase is uniform.

    Examples
    --------
    >>> ph = ring_phase([Ring((0, 1, 2), lambda r: (r,))], "all_gather")
    >>> ph.repeat, [(t.src, t.dst, t.chunks) for t in ph.steps(0)]
    (2, [(0, 1, (0,)), (1, 2, (1,)), (2, 0, (2,))])
    """
    length = len(rings[0].order) if rings else 1
    assert all(len(r.order) == length for r in rings), "rings of one phase differ in length"
    reduce = kind == "reduce_scatter"
    # In reduce-scatter the block ending at position q starts at q+1 and moves one hop
    # per step; in all-gather each block starts at its owner and moves one hop per step.
    lag = 1 if reduce else 0

    def step(k: int) -> list[Transfer]:
        out: list[Transfer] = []
        for ring_ in rings:
            order, owned = ring_.order, ring_.owned
            for p in range(length):
                block = owned(order[(p - k - lag) % length])
                out.append(Transfer(order[p], order[(p + 1) % length], block, reduce, ring_.rail))
        return out

    return Phase(length - 1, step, True, label or kind, overlap=True)


def _shard_rings(
    order: Sequence[int], channels: int, node_of: Sequence[int] | None = None
) -> list[Ring]:
    """Each channel's ring: its order, its chunks, and (spanning servers) its rail; the
    ring phases and the broadcast/reduce chains both run on these."""

    def owner(ch: int) -> Callable[[int], tuple[int, ...]]:
        return lambda r: (r * channels + ch,)

    spans = node_of is not None and len(set(node_of)) > 1
    return [
        Ring(channel_order(order, ch, node_of), owner(ch), ch if spans else -1)
        for ch in range(channels)
    ]


def _chain(rings: Sequence[Ring], root: int, to_root: bool) -> Phase:
    """Chains from (or to) ``root`` along each ring of ``rings``: chunk ``ch`` on ring ``ch``.

    As NCCL runs them (src/device/broadcast.h, reduce.h): a broadcast goes round its
    channel's ring from ``root`` to the rank before it, a reduce from the rank after
    ``root`` round to ``root``; each hop keeps its ring's rail, so the channels leave
    every server through different NICs.
    """
    chains: list[tuple[tuple[int, ...], int]] = []
    for ring_ in rings:
        seq = ring_.order
        pos = seq.index(root) + (1 if to_root else 0)
        chains.append((seq[pos:] + seq[:pos], ring_.rail))
    hops = len(rings[0].order) - 1

    def step(k: int) -> list[Transfer]:
        return [
            Transfer(c[k], c[k + 1], (ch,), to_root, rail) for ch, (c, rail) in enumerate(chains)
        ]

    return Phase(hops, step, False, "chain to root" if to_root else "chain from root")


def ring(
    op: str,
    n: int,
    nbytes: float,
    *,
    layout: Layout,
    channels: int = 1,
    root: int = 0,
    pipeline_chunks: int = 1,
) -> Schedule:
    """NCCL ring schedule for ``op`` on ``n`` ranks moving ``nbytes`` bytes.

    Parameters
    ----------
    op : str
        all_reduce, all_gather, reduce_scatter, broadcast or reduce.
    n : int
        Ranks in the group.
    nbytes : float
        nccl-tests size of the buffer (bytes).
    layout : Layout
        Rank placement; the ring follows :attr:`Layout.order`.
    channels : int
        Parallel rings, each carrying ``1/channels`` of the data.
    root : int
        Root rank of broadcast and reduce.
    pipeline_chunks : int
        Pieces a broadcast/reduce chain is pipelined over.

    Raises
    ------
    UnsupportedCollectiveError
        For all_to_all and send_recv.

    Examples
    --------
    >>> s = ring("all_reduce", 4, 4096.0, layout=Layout.flat(4), channels=2)
    >>> s.num_steps, s.nchunks, s.chunk_bytes
    (6, 8, 512.0)
    """
    check_args("ring", SUPPORTS, op, n, nbytes, layout, channels, root, pipeline_chunks)
    rings = _shard_rings(layout.order, channels, layout.node_of)
    if op in ("broadcast", "reduce"):
        chain = (_chain(rings, root, op == "reduce"),) if n > 1 else ()
        base = Schedule(op, "ring", n, channels, nbytes / channels, chain, root=root)
        return pipeline(base, pipeline_chunks)
    phases = {
        "all_reduce": ("reduce_scatter", "all_gather"),
        "reduce_scatter": ("reduce_scatter",),
        "all_gather": ("all_gather",),
    }[op]
    return Schedule(
        op=op,
        algorithm="ring",
        n=n,
        nchunks=n * channels,
        chunk_bytes=nbytes / (n * channels),
        phases=tuple(ring_phase(rings, kind) for kind in phases if n > 1),
        root=root,
    )
