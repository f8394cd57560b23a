"""Pipeline schedules as plain functions returning each stage's op order.

A schedule for ``p`` stages and ``m`` micro-batches is a list (one entry per stage) of
:class:`Step` tuples ``(kind, microbatch, chunk)``: ``kind`` is ``"F"`` (forward) or
``"B"`` (backward), ``chunk`` the model chunk (virtual stage) on that stage, always 0
except for the interleaved schedule. Virtual stage ``chunk * p + stage`` holds layers
in model order, as in Megatron-LM. :mod:`sim.training.schedule.ideal` times a schedule
with free communication.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import NamedTuple

from sim.workload.plan_checks import group_error

__all__ = [
    "SCHEDULES",
    "Step",
    "chunk_in_flight",
    "gpipe",
    "held",
    "in_flight",
    "interleaved_1f1b",
    "make_schedule",
    "one_f_one_b",
]


class Step(NamedTuple):
    """One pipeline op: ``kind`` ``"F"``/``"B"``, micro-batch index, model chunk."""

    kind: str
    mb: int
    chunk: int = 0


Schedule = list[list[Step]]


def _check(p: int, m: int, v: int = 1) -> None:
    if p < 1 or m < 1 or v < 1:
        raise ValueError(f"stages, micro-batches and chunks must be >= 1 (got {p}, {m}, {v})")


def gpipe(p: int, m: int) -> Schedule:
    """GPipe: every stage runs all ``m`` forwards, then all ``m`` backwards.

    >>> gpipe(2, 2)[0]
    [Step(kind='F', mb=0, chunk=0), Step(kind='F', mb=1, chunk=0), \
Step(kind='B', mb=0, chunk=0), Step(kind='B', mb=1, chunk=0)]
    """
    _check(p, m)
    fwd = [Step("F", i) for i in range(m)]
    bwd = [Step("B", i) for i in range(m)]
    return [fwd + bwd for _ in range(p)]


def one_f_one_b(p: int, m: int) -> Schedule:
    """1F1B (PipeDream-Flush): ``p - s - 1`` warm-up forwards, then alternate F and B.

    >>> [s.kind for s in one_f_one_b(2, 3)[0]]
    ['F', 'F', 'B', 'F', 'B', 'B']
    """
    _check(p, m)
    # the i-th forward (backward) is the same step on every stage: made once
    fwd = [Step("F", i) for i in range(m)]
    bwd = [Step("B", i) for i in range(m)]
    out = []
    for s in range(p):
        warm = min(p - s - 1, m)
        ops = fwd[:warm]
        for i in range(m - warm):
            ops += (fwd[warm + i], bwd[i])
        ops += bwd[m - warm :]
        out.append(ops)
    return out


def _group_table(m: int, v: int, n: int) -> list[tuple[int, int]]:
    """Megatron-Core's ``get_schedule_table``: (micro-batch, chunk) of each virtual
    micro-batch, in groups of ``n`` micro-batches run through chunk 0, then 1, ...; the
    last group takes every micro-batch left."""
    table: list[tuple[int, int]] = []
    for first in range(0, m, n):
        table += [(mb, c) for c in range(v) for mb in range(first, min(first + n, m))]
    return table


def interleaved_1f1b(p: int, m: int, v: int, n: int | None = None) -> Schedule:
    """Interleaved 1F1B (Narayanan et al. 2021) with ``v`` model chunks per stage, as
    Megatron-Core runs it.

    Micro-batches go through the chunks in groups of ``n`` (``microbatch_group_size_per_vp_
    stage``, default ``p``): chunk 0 of micro-batches ``0..n-1``, then chunk 1 of the same,
    ...; backwards in the same order with the chunks reversed. Stage ``s`` warms up with
    ``2 (p - s - 1) + (v - 1) n`` chunk forwards (all of them if fewer), then alternates.
    ``n`` must satisfy :func:`sim.workload.plan_checks.group_error` (with ``n = p``:
    ``m % p == 0``, the original schedule's condition).

    >>> [f"{s.kind}{s.mb}.{s.chunk}" for s in interleaved_1f1b(2, 2, 2)[1]][:4]
    ['F0.0', 'F1.0', 'F0.1', 'B0.1']
    >>> [f"{s.mb}.{s.chunk}" for s in interleaved_1f1b(2, 6, 2, 3)[0] if s.kind == "F"][:6]
    ['0.0', '1.0', '2.0', '0.1', '1.1', '2.1']
    """
    _check(p, m, v)
    n = p if n is None else n
    why = group_error(p, m, n)
    if why is not None:
        raise ValueError(f"interleaved schedule: micro-batch group {why}")
    table = _group_table(m, v, n)
    # the k-th forward (backward) is the same step on every stage: made once
    fwd = [Step("F", mb, c) for mb, c in table]
    bwd = [Step("B", mb, v - 1 - c) for mb, c in table]
    total = m * v
    out = []
    for s in range(p):
        warm = min(2 * (p - s - 1) + (v - 1) * n, total)
        ops = fwd[:warm]
        for k in range(total - warm):
            ops += (fwd[warm + k], bwd[k])
        ops += bwd[total - warm :]
        out.append(ops)
    return out


SCHEDULES: dict[str, Callable[..., Schedule]] = {
    "gpipe": gpipe,
    "1f1b": one_f_one_b,
    "interleaved": interleaved_1f1b,
}


def make_schedule(name: str, p: int, m: int, v: int = 1, n: int | None = None) -> Schedule:
    """Build schedule ``name`` from :data:`SCHEDULES` (``v`` and the micro-batch group
    ``n`` only for ``interleaved``)."""
    if name == "interleaved":
        return interleaved_1f1b(p, m, v, n)
    return SCHEDULES[name](p, m)


def in_flight(schedule: Schedule) -> list[float]:
    """Most micro-batches whose activations a stage holds at once (forward done, backward not).

    Counted in whole-stage micro-batches: an interleaved chunk counts ``1 / v``.

    >>> in_flight(one_f_one_b(4, 8)), in_flight(gpipe(4, 8))[0]
    ([4.0, 3.0, 2.0, 1.0], 8.0)
    """
    v = 1 + max(st.chunk for ops in schedule for st in ops)
    out = []
    for ops in schedule:
        held = peak = 0
        for st in ops:  # the peak can only rise on a forward (a planner asks often)
            if st.kind == "F":
                held += 1
                if held > peak:
                    peak = held
            else:
                held -= 1
        out.append(peak / v)
    return out


def chunk_in_flight(schedule: Schedule) -> list[list[int]]:
    """Most micro-batches of each model chunk a stage holds at once (forward done,
    backward not), per stage and chunk.

    >>> chunk_in_flight(interleaved_1f1b(2, 4, 2))[1]  # the last stage's chunk 1: F then B
    [3, 1]
    """
    v = 1 + max(st.chunk for ops in schedule for st in ops)
    out = []
    for ops in schedule:
        held, peak = [0] * v, [0] * v
        for st in ops:  # as in_flight, per chunk
            c = st.chunk
            if st.kind == "F":
                h = held[c] = held[c] + 1
                if h > peak[c]:
                    peak[c] = h
            else:
                held[c] -= 1
        out.append(peak)
    return out


@lru_cache(maxsize=512)
def held(
    name: str, p: int, m: int, v: int = 1, n: int | None = None
) -> tuple[tuple[float, ...], tuple[tuple[int, ...], ...]]:
    """:func:`in_flight` and :func:`chunk_in_flight` of schedule ``name``, cached: a memory
    estimate asks for them once per plan, a planner for hundreds of plans of few shapes.

    GPipe and 1F1B in closed form (the schedule is never built: a search's new batch size
    asks for a new ``m``): GPipe holds all ``m`` micro-batches on every stage; 1F1B's stage
    ``s`` runs ``min(p - s - 1, m)`` warm-up forwards and one more forward before its first
    backward, so it holds ``min(p - s, m)`` (tests check both against the schedules).

    >>> held("1f1b", 4, 8)[0]
    (4.0, 3.0, 2.0, 1.0)
    """
    if name in ("gpipe", "1f1b"):
        _check(p, m)
        peaks = [m if name == "gpipe" else min(p - s, m) for s in range(p)]
        return tuple(float(x) for x in peaks), tuple((x,) for x in peaks)
    schedule = make_schedule(name, p, m, v, n)
    return tuple(in_flight(schedule)), tuple(tuple(c) for c in chunk_in_flight(schedule))
