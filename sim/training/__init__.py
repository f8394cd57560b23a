"""The training-step workload: models, scenarios, parallel plans, ops, memory, schedules.

Everything here is plain data and arithmetic; the SimPy engine that times the task graph
lives in :mod:`sim.training.engine`.
"""

from __future__ import annotations
