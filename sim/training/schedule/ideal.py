"""Timing of a pipeline schedule with free communication and equal stages.

:func:`simulate_ideal` times a schedule from :mod:`sim.training.schedule.pipeline`; with
equal stages and ``t_b = 2 t_f`` it reproduces the textbook bubbles exactly:

>>> from sim.training.schedule.pipeline import one_f_one_b
>>> p, m = 4, 8
>>> simulate_ideal(one_f_one_b(p, m), 1.0, 2.0).bubble_fraction == (p - 1) / (m + p - 1)
True
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.training.schedule.pipeline import Schedule, Step

__all__ = ["IdealTimeline", "simulate_ideal"]


@dataclass(frozen=True)
class IdealTimeline:
    """Timing of a schedule with free communication.

    Attributes
    ----------
    makespan_s : float
        Time from the first forward to the last backward, seconds.
    busy_s : list[float]
        Compute time of each stage, seconds.
    start_s : list[list[float]]
        Start time of each op, in each stage's schedule order, seconds.
    """

    makespan_s: float
    busy_s: list[float]
    start_s: list[list[float]]

    @property
    def bubble_fraction(self) -> float:
        """Idle share of the makespan on the busiest stage: ``1 - busy / makespan``."""
        return 1 - max(self.busy_s) / self.makespan_s


def _dependency(step: Step, s: int, p: int, v: int) -> tuple[int, Step] | None:
    """(stage, op) that ``step`` on stage ``s`` waits for; None for the very first forward."""
    virtual, last = step.chunk * p + s, p * v - 1
    if step.kind == "F":
        if virtual == 0:
            return None
        prev = virtual - 1
        return prev % p, Step("F", step.mb, prev // p)
    if virtual == last:
        return s, Step("F", step.mb, step.chunk)
    nxt = virtual + 1
    return nxt % p, Step("B", step.mb, nxt // p)


def simulate_ideal(schedule: Schedule, t_f: float, t_b: float) -> IdealTimeline:
    """Time ``schedule`` with free communication and equal stages.

    Parameters
    ----------
    schedule : list of list of Step
        One op list per stage, e.g. from :data:`SCHEDULES`.
    t_f, t_b : float
        Forward and backward time of one micro-batch through one whole stage (all its
        chunks), seconds; a chunk op takes ``t / v``.

    Returns
    -------
    IdealTimeline
        Each op starts when its stage is free and its dependency (the previous virtual
        stage's forward, the next one's backward) has finished.
    """
    p = len(schedule)
    v = 1 + max(st.chunk for ops in schedule for st in ops)
    done: dict[tuple[int, Step], float] = {}
    zero = t_f - t_f  # keeps exact types (Fraction) exact
    clock, pos = [zero] * p, [0] * p
    starts: list[list[float]] = [[] for _ in range(p)]
    remaining = sum(len(ops) for ops in schedule)
    while remaining:
        progressed = False
        for s in range(p):
            while pos[s] < len(schedule[s]):
                step = schedule[s][pos[s]]
                dep, ready = _dependency(step, s, p, v), zero
                if dep is not None:
                    if dep not in done:
                        break
                    ready = done[dep]
                start = max(clock[s], ready)
                clock[s] = start + (t_f if step.kind == "F" else t_b) / v
                done[(s, step)] = clock[s]
                starts[s].append(start)
                pos[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise ValueError("schedule deadlocks: an op waits for one that never runs first")
    busy = [sum(1 for st in ops if st.kind == "F") * (t_f + t_b) / v for ops in schedule]
    return IdealTimeline(max(clock), busy, starts)
