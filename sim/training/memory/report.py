"""Memory per GPU: weights, gradients, optimizer states, activations, workspace.

Mixed-precision Adam: bf16 weights (2 bytes/param), bf16 gradients (2), and fp32 master
weights + momentum + variance (12) — 16 bytes per parameter (Rajbhandari et al. 2020).
ZeRO-1 shards the optimizer states over ``dp``, ZeRO-2 also the gradients, ZeRO-3 also
the weights (expert parameters shard over ``dp / ep``). Activations come from
:mod:`sim.training.memory.activations`; each stage holds the in-flight micro-batches of
its pipeline schedule (:func:`sim.training.schedule.pipeline.in_flight`).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.training.memory.activations import stage_activation_bytes
from sim.training.schedule.pipeline import in_flight, make_schedule
from sim.training.workload.comms import GRAD_BYTES, PARAM_BYTES, layer_rank_params, rank_params
from sim.training.workload.models import ModelSpec
from sim.training.workload.plan import ParallelPlan

__all__ = [
    "OPTIMIZER_BYTES",
    "MemoryParams",
    "MemoryReport",
    "memory_per_gpu",
    "memory_per_stage",
]

OPTIMIZER_BYTES = 12  # fp32 master weights, Adam m and v


@dataclass(frozen=True)
class MemoryParams:
    """Knobs of the memory model.

    Attributes
    ----------
    workspace_bytes : float
        Fixed margin per GPU for the CUDA context (~0.5 GiB), cuBLAS and NCCL workspaces
        and allocator fragmentation. Default 2 GiB: an assumption, not a measurement.
    """

    workspace_bytes: float = 2 * 2**30


@dataclass(frozen=True)
class MemoryReport:
    """Memory of the fullest GPU (the pipeline stage with the largest total).

    Attributes
    ----------
    stage : int
        Pipeline stage the numbers are for.
    weights_bytes, grads_bytes, optimizer_bytes, activations_bytes, workspace_bytes : float
        The parts, bytes.
    hbm_bytes : float
        Device memory capacity, bytes.
    """

    stage: int
    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    workspace_bytes: float
    hbm_bytes: float

    @property
    def total_bytes(self) -> float:
        """Sum of the parts, bytes."""
        return sum(self.breakdown.values())

    @property
    def fits(self) -> bool:
        """``total_bytes <= hbm_bytes``."""
        return self.total_bytes <= self.hbm_bytes

    @property
    def breakdown(self) -> dict[str, float]:
        """Part name -> bytes."""
        return {
            "weights": self.weights_bytes,
            "grads": self.grads_bytes,
            "optimizer": self.optimizer_bytes,
            "activations": self.activations_bytes,
            "workspace": self.workspace_bytes,
        }


def _states(model: ModelSpec, plan: ParallelPlan, stage: int) -> tuple[float, float, float]:
    """(weights, grads, optimizer) bytes on a rank of ``stage`` under ZeRO."""
    params = rank_params(model, plan, stage)

    def sharded(bytes_per: int, from_stage: int) -> float:
        if plan.zero < from_stage:
            return params.total * bytes_per
        return (params.dense / plan.dp + params.expert / plan.edp) * bytes_per

    weights = sharded(PARAM_BYTES, 3)
    if plan.zero == 3 and plan.dp > 1:  # the gathered current and prefetched layers
        weights += 2 * layer_rank_params(model, plan).total * PARAM_BYTES
    return weights, sharded(GRAD_BYTES, 2), sharded(OPTIMIZER_BYTES, 1)


def memory_per_stage(
    model: ModelSpec,
    plan: ParallelPlan,
    seq: int,
    hbm_bytes: float,
    params: MemoryParams | None = None,
    flash_attention: bool = True,
) -> list[MemoryReport]:
    """Memory of one GPU of each pipeline stage, in stage order."""
    params = params or MemoryParams()
    schedule = make_schedule(plan.schedule, plan.pp, plan.num_microbatches, plan.virtual_stages)
    held = in_flight(schedule)
    reports = []
    for stage in range(plan.pp):
        weights, grads, optimizer = _states(model, plan, stage)
        last = stage == plan.pp - 1
        acts = stage_activation_bytes(model, plan, seq, held[stage], last, flash_attention)
        reports.append(
            MemoryReport(stage, weights, grads, optimizer, acts, params.workspace_bytes, hbm_bytes)
        )
    return reports


def memory_per_gpu(
    model: ModelSpec,
    plan: ParallelPlan,
    seq: int,
    hbm_bytes: float,
    params: MemoryParams | None = None,
    flash_attention: bool = True,
) -> MemoryReport:
    """Memory of the fullest GPU under ``plan``; ``fits`` says whether it fits ``hbm_bytes``.

    Over capacity is an answer, not an error.

    >>> from sim.training.workload.models import model_preset
    >>> plan = ParallelPlan(global_batch=8)
    >>> memory_per_gpu(model_preset("llama2-70b"), plan, 4096, 80 * 2**30).fits
    False
    """
    reports = memory_per_stage(model, plan, seq, hbm_bytes, params, flash_attention)
    return max(reports, key=lambda r: (r.total_bytes, -r.stage))
