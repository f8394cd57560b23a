"""One training step of a scenario: from the job's description to its time and memory.

What runs (model shapes, the parallel plan, per-rank ops, FLOPs and communication volumes)
is described by :mod:`sim.workload`; the scenario files by :mod:`sim.scenario`; the step's
result record is :class:`sim.result.StepResult`. The layers here, each importing only those
listed before it:

- :mod:`.schedule`: pipeline schedules (the order of each stage's passes) and their ideal
  timing.
- :mod:`.compute`: how long an op takes on a GPU (roofline), and a whole pass with its
  exposed TP/EP collectives.
- :mod:`.memory`: memory per GPU (model states under ZeRO, activations).
- :mod:`.setup`: the one resolution path: topology, profile and plan, for every entry point.
- :mod:`.graph`: the step as an explicit task graph (every framework semantic lives in its
  builder) and the two executors that run it: list scheduling on a closed-form network,
  SimPy on a simulated one.
- :mod:`.step`: :func:`~.step.simulate_step`, the entry point, returning a
  :class:`~sim.result.StepResult`; :mod:`.trace` writes the step as a Chrome trace.
"""

from __future__ import annotations
