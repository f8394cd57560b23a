"""The dependency order of a task graph's tasks (what an export numbers nodes by, and what an
import checks for circles before it runs).

>>> from sim.training.graph.task import COMPUTE, StepGraph
>>> g = StepGraph()
>>> a = g.add(COMPUTE, g.stream("s"), ())
>>> b = g.add(COMPUTE, -1, ())
>>> c = g.add(COMPUTE, -1, (b,))
>>> g.deps[a].append(c)
>>> dependency_order(g)
[1, 2, 0]
"""

from __future__ import annotations

import heapq

from sim.training.graph.task import StepGraph

__all__ = ["dependency_order"]


def dependency_order(graph: StepGraph) -> list[int]:
    """The tasks of ``graph`` in dependency order (dependencies and stream order; ties by
    task number). Shorter than the graph where tasks wait for each other in a circle: those
    never come."""
    preds = graph.predecessors()
    succs: list[list[int]] = [[] for _ in range(len(graph))]
    waiting = [len(p) for p in preds]
    for i, ps in enumerate(preds):
        for p in ps:
            succs[p].append(i)
    ready = [i for i, w in enumerate(waiting) if not w]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in succs[i]:
            waiting[j] -= 1
            if not waiting[j]:
                heapq.heappush(ready, j)
    return order
