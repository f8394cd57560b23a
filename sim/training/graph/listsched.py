"""The closed-form executor: list scheduling of a step's task graph, every duration known.

On a backend whose transfers' times are fixed when they start (``closed_form``: the
analytical network), the step is a longest-path problem over the graph: a task starts when
its dependencies and the task before it on its stream have ended, and lasts

- ``COMPUTE``: its ``duration_s``;
- ``COLLECTIVE``: for each part, the tuner's closed form of the operation on every group
  at once (:meth:`sim.training.compute.passes.CollectiveTimer.concurrent_time_s`: the
  slowest group alone plus the extra load of the most loaded link), over ``peers`` where
  the builder names them; parts one after the other;
- ``TRANSFER``: the analytical network's time of its transfers started together
  (:func:`sim.network.batch.batch_times_s`), plus the software latency.

This runs in O(tasks + dependencies), which is what makes sweeps of thousands of
configurations cheap. One contention rule beyond those closed forms (an approximation,
stated): tasks that share a NIC resource (``nic``) and ``fill`` (gradient reductions under
ZeRO-3/FSDP) use only the gaps the others (parameter gathers) leave on it
(:func:`fill_gaps`): the gathers go first, and a stage's total network work is what a
NIC-bound stage takes. The simulated network shares the bandwidth instead.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from sim.training.compute.passes import CollectiveTimer
from sim.training.graph.task import COLLECTIVE, COMPUTE, Comm, StepGraph

__all__ = ["comm_time_s", "fill_gaps", "list_schedule"]


def fill_gaps(start_s: float, work_s: float, windows: Sequence[tuple[float, float]]) -> float:
    """When ``work_s`` seconds of network work begun at ``start_s`` end if it yields to
    ``windows`` (sorted, disjoint busy intervals of higher priority).

    >>> fill_gaps(0.0, 2.0, [(1.0, 3.0)])
    4.0
    >>> fill_gaps(0.0, 1.0, [(1.0, 3.0)])
    1.0
    """
    return _fill(windows, 0, start_s, work_s)[0]


def _fill(
    windows: Sequence[tuple[float, float]], lo: int, start_s: float, work_s: float
) -> tuple[float, int]:
    """:func:`fill_gaps` from window ``lo`` on (those before end before ``start_s``), and the
    first window a later start (>= this one) need look at: a stage's reductions start in
    order, so the whole step's gap filling is linear in its windows."""
    t, work = start_s, work_s
    n = len(windows)
    while lo < n and windows[lo][1] <= t:
        lo += 1
    i = lo
    while i < n:
        a, b = windows[i]
        if a >= t + work:
            break
        work -= max(0.0, a - t)
        t = max(t, b)
        i += 1
    return t + work, lo


def comm_time_s(timer: CollectiveTimer, kind: int, parts: tuple[Comm, ...]) -> float:
    """Closed-form seconds of a communication task (see the module docstring)."""
    if kind == COLLECTIVE:
        return sum(timer.concurrent_time_s(c.peers or c.groups, c.op, c.nbytes) for c in parts)
    total = 0.0
    for c in parts:
        if c.nbytes <= 0 or not any(x != y for x, y in c.groups):
            continue
        total += timer.transfers_time_s(c.groups, c.nbytes, c.rate_cap_Bps) + c.latency_s
    return total


def _durations(
    graph: StepGraph, timer: CollectiveTimer, skip: Sequence[bool] | None
) -> list[float]:
    """Every task's duration (0 where ``skip``); a communication task's parts are costed
    once per content."""
    out = list(graph.duration_s)
    seen: dict[int, float] = {}  # id of the parts tuple (the builder shares equal ones)
    for i, kind in enumerate(graph.kind):
        if skip is not None and skip[i]:
            out[i] = 0.0
            continue
        if kind == COMPUTE:
            continue
        parts = graph.comm[i]
        t = seen.get(id(parts))
        if t is None:
            t = seen[id(parts)] = comm_time_s(timer, kind, parts)
        out[i] = t
    return out


def list_schedule(
    graph: StepGraph, timer: CollectiveTimer, skip: Sequence[bool] | None = None
) -> tuple[list[float], list[float]]:
    """(start, end) of every task of ``graph`` in seconds (see the module docstring);
    tasks marked in ``skip`` take no time.

    Tasks become ready when their dependencies and the task before them on their stream
    have ended; ready tasks that do not fill gaps are taken first, so every window a
    gap-filling task must yield to is known when it is placed (no gather waits for a
    reduction).
    """
    n = len(graph)
    dur = _durations(graph, timer, skip)
    deps, stream_of, fill, nic = graph.deps, graph.stream_of, graph.fill, graph.nic
    succs: list[list[int]] = [[] for _ in range(n)]
    indeg = [len(d) for d in deps]
    for i, ds in enumerate(deps):
        for d in ds:
            succs[d].append(i)
    after = [-1] * n  # the next task on the same stream
    stream_end = [0.0] * len(graph.streams)
    for order in graph.stream_order:
        for a, b in zip(order, order[1:], strict=False):  # noqa: RUF007 (tight loop)
            after[a] = b
            indeg[b] += 1
    windows: dict[int, list[tuple[float, float]]] = {}
    cursor: dict[int, int] = {}
    start, end = [0.0] * n, [0.0] * n
    normal = deque(i for i in range(n) if not indeg[i] and not fill[i])
    filling = deque(i for i in range(n) if not indeg[i] and fill[i])
    done = 0
    while normal or filling:
        i = normal.popleft() if normal else filling.popleft()
        s = stream_of[i]
        t0 = stream_end[s] if s >= 0 else 0.0
        for d in deps[i]:
            e = end[d]
            if e > t0:
                t0 = e
        start[i] = t0
        k = nic[i]
        if fill[i]:
            end[i], cursor[k] = _fill(windows.get(k, ()), cursor.get(k, 0), t0, dur[i])
        else:
            end[i] = t0 + dur[i]
            if k >= 0:
                windows.setdefault(k, []).append((t0, end[i]))
        if s >= 0:
            stream_end[s] = end[i]
        done += 1
        for j in succs[i]:
            indeg[j] -= 1
            if not indeg[j]:
                (filling if fill[j] else normal).append(j)
        j = after[i]
        if j >= 0:
            indeg[j] -= 1
            if not indeg[j]:
                (filling if fill[j] else normal).append(j)
    if done != n:
        raise AssertionError(f"task graph has a cycle: {n - done} of {n} tasks never ran")
    return start, end
