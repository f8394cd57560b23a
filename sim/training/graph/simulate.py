"""The simulating executor: a step's task graph on SimPy over a network backend.

Every stream is a SimPy process running its tasks in order; a task without a stream is a
process of its own. A task waits for its dependencies, then:

- ``COMPUTE``: holds its stream for ``duration_s``;
- ``COLLECTIVE``: runs the tuner's schedule of each part on every group at once, as
  transfers on the shared network (:func:`sim.collectives.process.run_schedule`); each
  uniform phase (a ring's steps) runs as one step of all its bytes (:data:`COALESCE`);
- ``TRANSFER``: starts its transfers on the network, then waits its software latency.

So gathers, gradient reductions, pipeline sends and offload copies contend for the links,
and the network's counters hold every byte the step moved. ``progress``, when given, is
called every :data:`PROGRESS_EVERY_S` seconds of wall time with (simulated seconds so
far, tasks done, tasks in all).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Sequence

import simpy

from sim.collectives.process import run_schedule
from sim.network import make_network
from sim.network.base import Network
from sim.network.solvecache import SolveCache
from sim.training.compute.passes import CollectiveTimer
from sim.training.graph.task import COLLECTIVE, COMPUTE, Comm, StepGraph

__all__ = ["COALESCE", "PROGRESS_EVERY_S", "Progress", "simulate_graph"]

#: Run each uniform phase of a collective (a ring's steps) as one step of all its bytes on
#: the simulated network (``run_schedule``'s ``coalesce``): within 0.3% of lockstep steps
#: and 7-22x faster on ``benchmarks/coalesce.py``'s cases. False: strict lockstep (slow).
COALESCE = True

#: Wall-clock seconds between two calls of the progress callback.
PROGRESS_EVERY_S = 2.0

Progress = Callable[[float, int, int], None]


class _Run:
    """State of one simulated graph (private: :func:`simulate_graph` is the interface)."""

    def __init__(self, graph: StepGraph, timer: CollectiveTimer, net: Network,
                 progress: Progress | None, skip: Sequence[bool] | None) -> None:  # fmt: skip
        self.graph, self.timer, self.net = graph, timer, net
        self.skip = skip
        self.env = net.env
        n = len(graph)
        self.start, self.end = [0.0] * n, [0.0] * n
        needed = {d for deps in graph.deps for d in deps}
        self.done: dict[int, simpy.Event] = {i: self.env.event() for i in needed}
        self.finished = 0
        self.progress = progress
        self._wall = self._last = time.monotonic()

    def stream(self, order: list[int]) -> Generator[simpy.Event, object, None]:
        for i in order:
            yield from self.task(i)

    def task(self, i: int) -> Generator[simpy.Event, object, None]:
        g, env = self.graph, self.env
        waits = [ev for d in g.deps[i] if not (ev := self.done[d]).triggered]
        if waits:
            yield waits[0] if len(waits) == 1 else env.all_of(waits)
        self.start[i] = env.now
        kind = g.kind[i]
        if self.skip is not None and self.skip[i]:
            pass
        elif kind == COMPUTE:
            if g.duration_s[i] > 0:
                yield env.timeout(g.duration_s[i])
        elif kind == COLLECTIVE:
            procs = [p for c in g.comm[i] for p in self._collective(c)]
            if procs:
                yield env.all_of(procs)
        else:
            yield from self._transfers(g.comm[i])
        self.end[i] = env.now
        done = self.done.get(i)
        if done is not None:
            done.succeed()
        self.finished += 1
        if self.progress is not None:
            self._report()

    def _collective(self, c: Comm) -> list[simpy.Process]:
        if c.nbytes <= 0:
            return []
        out = []
        for group in c.groups:
            if len(group) < 2:
                continue
            sched, proto = self.timer.plan(group, c.op, c.nbytes)
            cs = self.timer.setup(group)
            body = run_schedule(
                self.env, self.net, sched, cs.endpoints(sched), cs.routes, cs.params, proto,
                nccl_channels=cs.nccl_channels(sched.algorithm, proto, c.nbytes), tag=c.tag,
                coalesce=COALESCE,
            )  # fmt: skip
            out.append(self.env.process(body))
        return out

    def _transfers(self, parts: tuple[Comm, ...]) -> Generator[simpy.Event, object, None]:
        for c in parts:
            events = [
                self.net.transfer(x, y, c.nbytes, c.rate_cap_Bps, tag=c.tag)
                for x, y in c.groups
                if x != y and c.nbytes > 0
            ]
            if not events:
                continue
            yield self.env.all_of(events)
            if c.latency_s > 0:
                yield self.env.timeout(c.latency_s)

    def _report(self) -> None:
        now = time.monotonic()
        if now - self._last >= PROGRESS_EVERY_S:
            self._last = now
            assert self.progress is not None
            self.progress(float(self.env.now), self.finished, len(self.graph))


def simulate_graph(
    graph: StepGraph,
    timer: CollectiveTimer,
    network: str,
    *,
    record: bool = False,
    progress: Progress | None = None,
    skip: Sequence[bool] | None = None,
) -> tuple[list[float], list[float], Network]:
    """Run ``graph`` on a fresh ``network`` backend built on the timer's topology; tasks
    marked in ``skip`` take no time (and put nothing on the network).

    Returns
    -------
    tuple
        (start, end) of every task in seconds, and the network (its counters and, with
        ``record``, its per-link records).
    """
    env = simpy.Environment()
    net = make_network(network, env, timer.topology, record=record, solve_cache=SolveCache())
    run = _Run(graph, timer, net, progress, skip)
    for order in graph.stream_order:
        if order:
            env.process(run.stream(order))
    for i, s in enumerate(graph.stream_of):
        if s < 0:
            env.process(run.task(i))
    env.run()
    if run.finished != len(graph):
        raise AssertionError(
            f"task graph deadlocked: {len(graph) - run.finished} of {len(graph)} tasks never ran"
        )
    return run.start, run.end, net
