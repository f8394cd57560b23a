"""Studies above the simulator: sweeps over scenario keys, layout search, result tables.

Everything here calls the simulator as a user would (a scenario in, a
:class:`~sim.StepResult` out) and never reaches into its internals, except
:mod:`sim.studies.plan.memory`, the planner's one window on the memory model::

    from sim.studies import sweep_spec, run_sweep, results_frame
    rows = run_sweep(sweep_spec("llama3-8b-dgx", ["cluster.nodes=1,2,4"]), "out.csv", jobs=2)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sim.lazy import lazy_attr

if TYPE_CHECKING:
    from sim.studies.frame import flat_record, results_frame
    from sim.studies.grid import SweepSpec, sweep_spec
    from sim.studies.plan.search import PlanResult
    from sim.studies.runner import run_sweep

#: where each name lives: imported on first use, so that ``sim.studies.files`` (the CSV
#: writer of ``collective`` and ``run``) does not pull in the scenario stack (0.2 s). The
#: layout search is ``sim.studies.plan.search.plan``: ``sim.studies.plan`` is its package.
_HOME = {
    "flat_record": "sim.studies.frame",
    "results_frame": "sim.studies.frame",
    "SweepSpec": "sim.studies.grid",
    "sweep_spec": "sim.studies.grid",
    "PlanResult": "sim.studies.plan.search",
    "run_sweep": "sim.studies.runner",
}


def __getattr__(name: str) -> Any:
    """Import a public name from its home module on first access, then keep it here."""
    return lazy_attr("sim.studies", name, _HOME, globals())


__all__ = [
    "PlanResult",
    "SweepSpec",
    "flat_record",
    "results_frame",
    "run_sweep",
    "sweep_spec",
]
