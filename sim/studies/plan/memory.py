"""Memory of a layout before simulating it: the one place the planner reads the memory model.

The planner prunes layouts that cannot fit without running their step. The estimate is
the simulator's own memory model (the same function :func:`sim.simulate_step` reports),
reached here and nowhere else in ``sim.studies``, so that a change of its signature is
mended in one place; the test suite checks that it agrees with ``simulate_step``.
Whether a layout fits is finally what the simulated step says.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from sim.catalog import GpuSpec
from sim.scenario.load import Scenario, resolve_plan
from sim.training.memory.report import scenario_memory

__all__ = ["MemoryEstimate", "estimate_memory", "least_memory"]


@dataclass(frozen=True)
class MemoryEstimate:
    """Memory of the fullest GPU of a layout, bytes, and the GPU's capacity."""

    total_bytes: float
    hbm_bytes: float

    @property
    def fits(self) -> bool:
        """``total_bytes <= hbm_bytes``."""
        return self.total_bytes <= self.hbm_bytes

    @property
    def over_bytes(self) -> float:
        """Bytes over capacity (negative: headroom)."""
        return self.total_bytes - self.hbm_bytes


def estimate_memory(
    scenario: Scenario, gpus: int, gpus_per_node: int, models: Sequence[GpuSpec]
) -> MemoryEstimate:
    """The memory model's answer for ``scenario`` on ``gpus`` GPUs of the cluster's GPU
    ``models`` (ConfigError if invalid): the same call as the simulated step's."""
    plan = resolve_plan(scenario, gpus, gpus_per_node)
    mem = scenario_memory(scenario, plan, models)
    return MemoryEstimate(float(mem.total_bytes), float(mem.hbm_bytes))


def least_memory(
    scenario: Scenario, gpus: int, gpus_per_node: int, models: Sequence[GpuSpec]
) -> MemoryEstimate:
    """A cheap lower bound of :func:`estimate_memory`: one micro-batch in flight, 1F1B.

    Weights, gradients and optimizer states are the layout's; activations are those of a
    single micro-batch, which every schedule holds at least. Costs no pipeline schedule.
    """
    par = scenario.parallel
    one = dataclasses.replace(
        scenario,
        parallel=dataclasses.replace(par, schedule="1f1b", virtual_stages=1),
        training=dataclasses.replace(
            scenario.training, global_batch=par.micro_batch * (par.dp or 1)
        ),
    )
    return estimate_memory(one, gpus, gpus_per_node, models)
