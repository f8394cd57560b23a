"""Direct (flat, one-step) schedules: all-to-all, send/recv, fan-out and fan-in.

- all_to_all: one step holding all ``n(n-1)`` peer transfers, as NCCL launches them in
  one group of sends and receives; the network model decides how they share links.
  (``n-1`` steps of shifted pairs ``r -> r+k`` was the alternative; it adds ``n-2``
  artificial barriers and is not ``uniform`` either, since each step pairs different
  ranks.) Chunk ``(src*n + dst)*channels + ch`` goes from ``src`` to ``dst``.
- send_recv: ``n == 2``; rank 0 sends everything to rank 1 in one step.
- broadcast: ``root`` sends everything to every other rank in one step.
- reduce: every other rank sends everything to ``root`` (reduce) in one step.

``channels`` splits every transfer into parallel flows; ``pipeline_chunks`` is ignored.
Each schedule is one step (none when ``n == 1``).
"""

from __future__ import annotations

from sim.collectives.layout import Layout, check_args
from sim.collectives.schedule import Phase, Schedule, Transfer
from sim.errors import UnsupportedCollectiveError

__all__ = ["SUPPORTS", "direct"]

SUPPORTS = ("all_to_all", "send_recv", "broadcast", "reduce")


def _all_to_all(n: int, channels: int) -> list[Transfer]:
    return [
        Transfer(src, dst, ((src * n + dst) * channels + ch,))
        for src in range(n)
        for dst in range(n)
        if dst != src
        for ch in range(channels)
    ]


def _fan(op: str, n: int, root: int, channels: int) -> list[Transfer]:
    if op == "send_recv":
        return [Transfer(0, 1, (ch,)) for ch in range(channels)]
    peers = [r for r in range(n) if r != root]
    if op == "broadcast":
        return [Transfer(root, r, (ch,)) for r in peers for ch in range(channels)]
    return [Transfer(r, root, (ch,), True) for r in peers for ch in range(channels)]


def direct(
    op: str,
    n: int,
    nbytes: float,
    *,
    layout: Layout,
    channels: int = 1,
    root: int = 0,
    pipeline_chunks: int = 1,
) -> Schedule:
    """One-step direct schedule for ``op`` on ``n`` ranks.

    Parameters
    ----------
    op : str
        all_to_all, send_recv, broadcast or reduce.
    n : int
        Ranks in the group (2 for send_recv).
    nbytes : float
        nccl-tests size (bytes): for all_to_all each rank's send buffer.
    layout : Layout
        Rank placement (unused beyond its size).
    channels : int
        Parallel flows per peer transfer, each ``1/channels`` of it.
    root : int
        Root rank of broadcast and reduce.
    pipeline_chunks : int
        Unused.

    Raises
    ------
    UnsupportedCollectiveError
        For other ops, or send_recv with ``n != 2``.

    Examples
    --------
    >>> s = direct("all_to_all", 4, 4096.0, layout=Layout.flat(4))
    >>> s.num_steps, len(s.phases[0].steps(0)), s.chunk_bytes
    (1, 12, 1024.0)
    """
    check_args("direct", SUPPORTS, op, n, nbytes, layout, channels, root, pipeline_chunks)
    if op == "send_recv" and n != 2:
        raise UnsupportedCollectiveError(
            f"algorithm 'direct' for op 'send_recv' needs n == 2 ranks (got n={n})"
        )
    if op == "all_to_all":
        # nbytes is one rank's send buffer: n peers x channels chunks.
        nchunks, chunk_bytes = n * n * channels, nbytes / (n * channels)
        step = Phase(1, lambda k: _all_to_all(n, channels), True, "direct all_to_all")
    else:
        nchunks, chunk_bytes = channels, nbytes / channels
        step = Phase(1, lambda k: _fan(op, n, root, channels), True, f"direct {op}")
    phases = (step,) if n > 1 else ()
    return Schedule(op, "direct", n, nchunks, chunk_bytes, phases, root=root)
