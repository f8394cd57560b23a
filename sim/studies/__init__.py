"""Studies above the simulator: sweeps over scenario keys, layout search, result tables.

Everything here calls the simulator as a user would (a scenario in, a
:class:`~sim.StepResult` out) and never reaches into its internals, except
:mod:`sim.studies.plan.memory`, the planner's one window on the memory model::

    from sim.studies import sweep_spec, run_sweep, plan, results_frame
    rows = run_sweep(sweep_spec("llama3-8b-dgx", ["cluster.nodes=1,2,4"]), "out.csv", jobs=2)
"""

from sim.studies.frame import flat_record, results_frame
from sim.studies.grid import SweepSpec, sweep_spec
from sim.studies.plan.search import PlanResult, plan
from sim.studies.runner import run_sweep

__all__ = [
    "PlanResult",
    "SweepSpec",
    "flat_record",
    "plan",
    "results_frame",
    "run_sweep",
    "sweep_spec",
]
