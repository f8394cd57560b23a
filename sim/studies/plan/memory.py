"""Memory of a layout before simulating it: the one place the planner reads the memory model.

The planner prunes layouts that cannot fit without running their step. The estimate is
the simulator's own memory model (the same function :func:`sim.simulate_step` reports),
reached here and nowhere else in ``sim.studies``, so that a change of its signature is
mended in one place; the test suite checks that it agrees with ``simulate_step``.
Whether a layout fits is finally what the simulated step says.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from sim.scenario.load import Scenario, resolve_plan
from sim.training.memory.report import memory_per_gpu

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
    scenario: Scenario, gpus: int, gpus_per_node: int, hbm_bytes: float
) -> MemoryEstimate:
    """The memory model's answer for ``scenario`` on ``gpus`` GPUs (ConfigError if invalid)."""
    plan = resolve_plan(scenario, gpus, gpus_per_node)
    mem = memory_per_gpu(
        scenario.model,
        plan,
        scenario.training.seq_len,
        hbm_bytes,
        flash_attention=scenario.training.flash_attention,
        tech=scenario.training.techniques,
    )
    return MemoryEstimate(float(mem.total_bytes), float(hbm_bytes))


def least_memory(
    scenario: Scenario, gpus: int, gpus_per_node: int, hbm_bytes: float
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
    return estimate_memory(one, gpus, gpus_per_node, hbm_bytes)
