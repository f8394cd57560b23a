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

from sim.chakra.trace import heap_order
from sim.training.graph.task import StepGraph

__all__ = ["dependency_order"]


def dependency_order(graph: StepGraph) -> list[int]:
    """The tasks of ``graph`` in dependency order (dependencies and stream order; ties by
    task number). Shorter than the graph where tasks wait for each other in a circle: those
    never come."""
    return heap_order(graph.predecessors())
