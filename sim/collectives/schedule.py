"""Collective schedules as data: phases of steps of point-to-point transfers.

A :class:`Schedule` for ``n`` ranks splits the operation's buffer into ``nchunks``
equal chunks of ``chunk_bytes`` each. A :class:`Transfer` moves some chunks from one
participant to another; ``reduce=True`` means the receiver adds them to its own copy
(sum), ``False`` that it stores them. Participants ``0..n-1`` are the group's ranks;
``n..n+reducers-1`` are in-network reducers (an NVSwitch for NVLS, a switch for SHARP).

Steps are synchronous: every transfer of a step reads the data as it was when the step
began, and the next step starts when all of them have landed. A :class:`Phase` is
``repeat`` consecutive steps whose transfers come from ``steps(k)`` for ``k`` in
``range(repeat)``. ``uniform=True`` promises that every repetition moves the same
multiset of (src, dst, bytes): a backend with nothing else in flight may time one
repetition and multiply (exact, and the reason a 1024-GPU ring is fast). The checker
verifies that promise.

Chunk meaning per operation (``k = nchunks // n`` chunks per shard, shard of chunk ``c``
is ``c // k``):

- ``all_reduce``: every rank starts with every chunk; ends with every chunk summed over all.
- ``reduce_scatter``: every rank starts with every chunk; rank ``r`` ends with shard ``r`` summed.
- ``all_gather``: rank ``r`` starts with shard ``r``; every rank ends with every chunk.
- ``broadcast``: ``root`` starts with every chunk; every rank ends with them.
- ``reduce``: every rank starts with every chunk; ``root`` ends with every chunk summed.
- ``all_to_all``: ``nchunks = n*n*m``; chunk ``c`` goes from rank ``c // (n*m)`` to rank
  ``(c // m) % n``; every rank ends with the chunks addressed to it.
- ``send_recv``: ``n == 2``; rank 0 starts with every chunk; rank 1 ends with them.

``nbytes`` everywhere is nccl-tests' "size": the full buffer (all_gather's output,
reduce_scatter's input, all_to_all's per-rank send buffer).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = ["OPS", "Phase", "Schedule", "Transfer", "busbw_factor"]

OPS = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "all_to_all",
    "send_recv",
)


class Transfer(NamedTuple):
    """Move ``chunks`` from participant ``src`` to ``dst`` (``reduce``: dst sums them in).

    ``rail`` >= 0 pins the transfer, where it crosses servers, to NIC number ``rail`` at
    both ends (NCCL binds each ring channel to one NIC); -1 leaves the NIC to routing.
    A named tuple, not a frozen dataclass: schedules of thousands of ranks make hundreds
    of thousands of them, and a tuple is made three times faster.
    """

    src: int
    dst: int
    chunks: tuple[int, ...]
    reduce: bool = False
    rail: int = -1


@dataclass(frozen=True)
class Phase:
    """``repeat`` consecutive synchronous steps; ``steps(k)`` gives step ``k``'s transfers.

    ``streamed``: the steady state of a pipelined schedule, where every step of the base
    algorithm is in flight at once. NCCL keeps several steps in flight per channel, so the
    per-step synchronisation latency overlaps with data movement there: the engine charges
    no step latency for streamed steps (ramp-up and drain steps pay it).

    ``overlap``: a step whose synchronisation overlaps its own data movement, as a ring
    step does in NCCL (each channel keeps NCCL_STEPS slots in flight, so the next slice's
    handshake runs while this one moves): the step takes ``max(data time, step latency)``
    instead of their sum. Small messages stay latency-bound; large ones are
    bandwidth-bound at any ring length.

    ``parts``: optional, for speed only: step ``k``'s transfers as the lists they are made
    of, with the same sources, destinations, rails and chunk counts as ``steps(k)`` (chunk
    ids aside) and the same list object each time a piece recurs (a pipelined slot: the
    base steps in flight, :func:`sim.collectives.pipeline.pipeline`). The closed form
    converts each piece once instead of every slot's transfers.
    """

    repeat: int
    steps: Callable[[int], Sequence[Transfer]]
    uniform: bool = False
    label: str = ""
    streamed: bool = False
    overlap: bool = False
    parts: Callable[[int], Sequence[Sequence[Transfer]]] | None = None


@dataclass(frozen=True)
class Schedule:
    """A whole collective: what the checker verifies and the engine times.

    Attributes
    ----------
    op : str
        One of :data:`OPS`.
    algorithm : str
        Name of the algorithm function that built it.
    n : int
        Ranks in the group.
    nchunks : int
        Equal chunks the buffer is cut into.
    chunk_bytes : float
        Bytes per chunk (``nbytes / nchunks``).
    phases : tuple[Phase, ...]
        Steps, in order.
    reducers : int
        In-network reducer participants (ids ``n..n+reducers-1``).
    root : int
        Root rank for broadcast/reduce.
    """

    op: str
    algorithm: str
    n: int
    nchunks: int
    chunk_bytes: float
    phases: tuple[Phase, ...]
    reducers: int = 0
    root: int = 0
    #: What the transfers depend on, when not the size (set by
    #: :meth:`sim.collectives.simulate.CollectiveSetup.schedule`): schedules with equal keys
    #: on one group have the same steps, so their step arrays are converted once.
    key: tuple[object, ...] | None = field(default=None, compare=False)

    @property
    def num_steps(self) -> int:
        """Total synchronous steps."""
        return sum(p.repeat for p in self.phases)

    def transfer_bytes(self, t: Transfer) -> float:
        """Payload bytes moved by ``t``."""
        return len(t.chunks) * self.chunk_bytes


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests' busbw / algbw ratio for ``op`` on ``n`` ranks.

    all_reduce ``2(n-1)/n``; all_gather, reduce_scatter, all_to_all ``(n-1)/n``;
    broadcast, reduce, send_recv ``1``.

    >>> busbw_factor("all_reduce", 8)
    1.75
    """
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0
