"""Recursive halving-doubling (Rabenseifner; MPICH's and Gloo's large-message algorithm).

With ``p = 2**floor(log2 n)`` and ``r = n - p``, ranks are numbered ``0..n-1`` in
:attr:`Layout.order`. Non-power-of-two groups fold first (MPICH's scheme): each of the
``r`` even positions ``2i < 2r`` sends its data to position ``2i+1``, which represents
both; the ``p`` remaining ranks ("new ranks" ``j``) run the power-of-two algorithm; at
the end each representative sends the folded rank its result.

- reduce-scatter (recursive halving): ``log2 p`` steps at distance ``p/2, p/4, ..., 1``;
  each rank keeps the half of its window that holds its own block and sends (reduce)
  the other half to its partner ``j ^ distance``.
- all-gather (recursive doubling): ``log2 p`` steps at distance ``1, 2, ..., p/2``;
  each rank sends its window (copy) to its partner.

all_reduce cuts the buffer into ``p`` blocks (one per new rank). reduce_scatter and
all_gather keep the ``n`` shards of their ops; a representative's block is its own and
its folded partner's shard. Steps: ``2·log2 p`` for all_reduce, ``log2 p`` for the
others, plus 2 (fold, unfold) when ``n`` is not a power of two. ``channels`` splits each
transfer into parallel flows (chunk ``unit*channels + ch``); ``pipeline_chunks`` is
ignored (every step is one exchange per rank already).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sim.collectives.layout import Layout, check_args, per_channel
from sim.collectives.schedule import Phase, Schedule, Transfer

__all__ = ["SUPPORTS", "rhd"]

SUPPORTS = ("all_reduce", "reduce_scatter", "all_gather")

# (src position, dst position, data units, reduce). A unit is a block index for
# all_reduce and a position for the others (position i's shard is rank order[i]'s).
Move = tuple[int, int, tuple[int, ...], bool]


class _Plan:
    """Fold bookkeeping: who represents whom and which data units each new rank owns."""

    def __init__(self, op: str, n: int) -> None:
        self.n = n
        self.p = 1 << (n.bit_length() - 1)
        self.r = n - self.p
        self.rep = [2 * j + 1 if j < self.r else j + self.r for j in range(self.p)]
        if op == "all_reduce":  # p equal blocks
            self.units: list[tuple[int, ...]] = [(j,) for j in range(self.p)]
        else:  # a new rank owns the shards of the positions it represents
            self.units = [
                (2 * j, 2 * j + 1) if j < self.r else (j + self.r,) for j in range(self.p)
            ]

    def window(self, lo: int, size: int) -> tuple[int, ...]:
        return tuple(u for j in range(lo, lo + size) for u in self.units[j])


def _halving(plan: _Plan, step: int) -> list[Move]:
    d = plan.p >> (step + 1)
    moves = []
    for j in range(plan.p):
        base = j & ~(2 * d - 1)
        give = base if j & d else base + d  # the half not holding j's own block
        moves.append((plan.rep[j], plan.rep[j ^ d], plan.window(give, d), True))
    return moves


def _doubling(plan: _Plan, step: int) -> list[Move]:
    d = 1 << step
    return [
        (plan.rep[j], plan.rep[j ^ d], plan.window(j & ~(d - 1), d), False) for j in range(plan.p)
    ]


def _fold(op: str, plan: _Plan, nunits: int, out: bool) -> list[Move]:
    """Fold-in (``out=False``) or unfold (``out=True``) moves between positions 2i, 2i+1."""
    moves = []
    for i in range(plan.r):
        folded, rep = 2 * i, 2 * i + 1
        if not out:
            units = (folded,) if op == "all_gather" else tuple(range(nunits))
            moves.append((folded, rep, units, op != "all_gather"))
        elif op == "reduce_scatter":
            moves.append((rep, folded, (folded,), False))
        else:
            everything = tuple(u for u in range(nunits) if op == "all_reduce" or u != folded)
            moves.append((rep, folded, everything, False))
    return moves


def _phase(
    moves: Callable[[int], list[Move]],
    repeat: int,
    order: Sequence[int],
    unit_id: Sequence[int],
    channels: int,
    label: str,
) -> Phase:
    def step(k: int) -> list[Transfer]:
        return [
            Transfer(
                order[a], order[b], per_channel([unit_id[u] for u in units], channels, ch), red
            )
            for a, b, units, red in moves(k)
            for ch in range(channels)
        ]

    return Phase(repeat, step, repeat == 1, label)


def rhd(
    op: str,
    n: int,
    nbytes: float,
    *,
    layout: Layout,
    channels: int = 1,
    root: int = 0,
    pipeline_chunks: int = 1,
) -> Schedule:
    """Recursive halving-doubling schedule for ``op`` on ``n`` ranks moving ``nbytes`` bytes.

    Parameters
    ----------
    op : str
        all_reduce, reduce_scatter or all_gather.
    n : int
        Ranks in the group (any ``n >= 1``; non-powers of two fold).
    nbytes : float
        nccl-tests size of the buffer (bytes).
    layout : Layout
        Rank placement; positions follow :attr:`Layout.order`.
    channels : int
        Parallel flows per exchange, each ``1/channels`` of it.
    root : int
        Unused (no rooted ops).
    pipeline_chunks : int
        Unused.

    Raises
    ------
    UnsupportedCollectiveError
        For broadcast, reduce, all_to_all and send_recv.

    Examples
    --------
    >>> s = rhd("all_reduce", 6, 4096.0, layout=Layout.flat(6))
    >>> s.num_steps, s.nchunks, s.chunk_bytes
    (6, 4, 1024.0)
    """
    check_args("rhd", SUPPORTS, op, n, nbytes, layout, channels, root, pipeline_chunks)
    plan = _Plan(op, n)
    nunits = plan.p if op == "all_reduce" else n
    order = layout.order
    logp = plan.p.bit_length() - 1
    parts: list[tuple[Callable[[int], list[Move]], int, str]] = []
    if plan.r:
        parts.append((lambda k: _fold(op, plan, nunits, False), 1, "fold"))
    if op != "all_gather":
        parts.append((lambda k: _halving(plan, k), logp, "recursive halving"))
    if op != "reduce_scatter":
        parts.append((lambda k: _doubling(plan, k), logp, "recursive doubling"))
    if plan.r:
        parts.append((lambda k: _fold(op, plan, nunits, True), 1, "unfold"))
    unit_id = range(nunits) if op == "all_reduce" else order
    phases = tuple(
        _phase(m, rep, order, unit_id, channels, lab) for m, rep, lab in parts if rep > 0
    )
    return Schedule(
        op, "rhd", n, nunits * channels, nbytes / (nunits * channels), phases, root=root
    )
