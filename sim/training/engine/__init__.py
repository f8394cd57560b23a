"""The training-step engine: a step's setup, per-stage costs, and the two evaluators.

:mod:`.simpy_engine` runs one pipeline replica on SimPy (contention on the flow network);
:mod:`.timeline` evaluates the same model by list scheduling when nothing contends.
"""
