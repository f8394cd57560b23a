"""Pipelining: cut a schedule's buffer into sub-buffers whose steps overlap.

:func:`pipeline` turns a schedule of ``T`` steps into one of ``T + C - 1`` slots for
``C`` sub-buffers: step ``k`` of sub-buffer ``c`` runs in slot ``k + c``. Sub-buffer
``c`` gets its own chunk ids: base chunk ``j`` becomes ``j*C + c``, which keeps every
chunk in its shard (``(j*C + c) // (k*C) == j // k``), so per-shard ops stay valid.
This is how NCCL's trees, chains and NVLS stream data: a rank forwards a piece as soon
as it has it, instead of waiting for the whole buffer.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from itertools import accumulate

from sim.collectives.schedule import Phase, Schedule, Transfer

__all__ = ["pipeline", "step_getter"]


def step_getter(s: Schedule) -> Callable[[int], Sequence[Transfer]]:
    """A function giving step ``k`` (0-based, across all phases) of ``s``.

    >>> from sim.collectives.schedule import Phase
    >>> a = Phase(2, lambda k: [Transfer(0, 1, (k,))])
    >>> b = Phase(1, lambda k: [Transfer(1, 0, (0,))])
    >>> step_getter(Schedule("all_reduce", "x", 2, 2, 1.0, (a, b)))(2)
    [Transfer(src=1, dst=0, chunks=(0,), reduce=False, rail=-1)]
    """
    starts = [0, *accumulate(p.repeat for p in s.phases)]

    def step(k: int) -> Sequence[Transfer]:
        i = bisect_right(starts, k) - 1
        return s.phases[i].steps(k - starts[i])

    return step


def pipeline(s: Schedule, chunks: int) -> Schedule:
    """Pipeline ``s`` over ``chunks`` sub-buffers of ``chunk_bytes / chunks`` each.

    Slots before every sub-buffer has started (ramp) and after the first has finished
    (drain) are not uniform. When ``chunks >= T`` (steps of ``s``) the middle slots each
    run every step of ``s`` once, so they form one ``uniform=True`` phase.

    Parameters
    ----------
    s : Schedule
        The unpipelined schedule.
    chunks : int
        Sub-buffers ``C`` (>= 1); ``1`` returns ``s`` unchanged.

    Returns
    -------
    Schedule
        ``nchunks * C`` chunks of ``chunk_bytes / C`` bytes over ``T + C - 1`` steps.

    Examples
    --------
    >>> from sim.collectives.schedule import Phase
    >>> chain = Phase(2, lambda k: [Transfer(k, k + 1, (0,))])
    >>> s = pipeline(Schedule("broadcast", "ring", 3, 1, 6.0, (chain,)), 3)
    >>> s.num_steps, s.nchunks, s.chunk_bytes, [p.repeat for p in s.phases]
    (4, 3, 2.0, [1, 2, 1])
    """
    total = s.num_steps
    if chunks <= 1 or total == 0:
        return s
    getter = step_getter(s)
    seen: dict[int, Sequence[Transfer]] = {}

    def base(k: int) -> Sequence[Transfer]:  # each base step built once, then shared
        got = seen.get(k)
        if got is None:
            got = seen[k] = getter(k)
        return got

    def parts(t: int) -> list[Sequence[Transfer]]:
        return [base(t - c) for c in range(max(0, t - total + 1), min(chunks, t + 1))]

    def slot(t: int) -> list[Transfer]:
        out: list[Transfer] = []
        for c in range(max(0, t - total + 1), min(chunks, t + 1)):
            for tr in base(t - c):
                moved = tuple(j * chunks + c for j in tr.chunks)
                out.append(Transfer(tr.src, tr.dst, moved, tr.reduce, tr.rail))
        return out

    label = "+".join(p.label for p in s.phases if p.label) + f" x{chunks} pipelined"
    phases: tuple[Phase, ...]
    if chunks >= total:
        ramp = total - 1
        phases = (
            Phase(ramp, slot, False, label + " (ramp)", parts=parts),
            Phase(
                chunks - ramp, lambda k: slot(k + ramp), True, label + " (steady)", streamed=True,
                parts=lambda k: parts(k + ramp),
            ),
            Phase(ramp, lambda k: slot(k + chunks), False, label + " (drain)",
                  parts=lambda k: parts(k + chunks)),
        )  # fmt: skip
    else:
        phases = (Phase(total + chunks - 1, slot, False, label, parts=parts),)
    return Schedule(
        op=s.op,
        algorithm=s.algorithm,
        n=s.n,
        nchunks=s.nchunks * chunks,
        chunk_bytes=s.chunk_bytes / chunks,
        phases=tuple(p for p in phases if p.repeat > 0),
        reducers=s.reducers,
        root=s.root,
    )
