"""Memory per GPU: weights, gradients, optimizer states, activations, workspace.

Mixed-precision Adam: bf16 weights (2 bytes/param), gradients in ``plan.grad_bytes``
(fp32 main gradients, 4, by default: Megatron-LM accumulates them in an fp32 buffer and
never allocates bf16 ``.grad``), and fp32 master weights + momentum + variance (12):
18 bytes per parameter, or ``6 + 12 / d`` under the distributed optimizer (Megatron-LM,
docs/distrib_optimizer.md). ZeRO-1 shards the optimizer states over the shard group
(``dp``, or HYBRID_SHARD's group), ZeRO-2 also the gradients, ZeRO-3 also the weights
(expert parameters shard over ``dp / ep``). ZeRO-2/3 add the unsharded gradients of one
unit and their cast to the reduction dtype; ZeRO-3 keeps two gathered layers (the running
one and the prefetched one, FSDP's ``limit_all_gathers``) and the root unit (embedding,
head). Under PyTorch FSDP FULL_SHARD the sharded parameter *is* the fp32 master weight, so
no bf16 shard is counted beside it (DeepSpeed ZeRO-3 keeps one). Activations come from
:mod:`sim.training.memory.activations`; each stage holds the in-flight micro-batches of
its pipeline schedule
(:func:`sim.training.schedule.pipeline.in_flight`). On top: a fixed workspace (CUDA
context, cuBLAS and NCCL buffers) and allocator fragmentation as a fraction of the rest.

Given a framework's :class:`~sim.workload.frameworks.Semantics`, the states are
held as that framework holds them (:func:`sim.training.memory.states.framework_states`:
parameter, gradient-buffer and reduction dtypes, distributed-optimizer shards, gathered
units, FSDP2 with pipeline parallelism, bucket copies), activations follow its selective
recompute, pipeline buffers and logits (:func:`sim.training.memory.activations.
framework_activation_bytes`), and the workspace and fragmentation come from
:mod:`sim.training.memory.allocator` (CUDA context and NCCL outside the allocator,
cuBLAS inside it; at the capacity, 2% with expandable segments or room for the step's
largest transient allocation without; ``reserved_bytes`` what the allocator reserves
on a roomy device). Without one, nothing changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sim.catalog import GpuSpec
from sim.scenario.load import Scenario
from sim.training.memory.activations import (
    framework_activation_bytes,
    largest_transient_bytes,
    stage_activation_bytes,
)
from sim.training.memory.allocator import (
    CUBLAS_BYTES,
    OUTSIDE_ALLOCATOR_BYTES,
    device_memory_bytes,
    limit_fragmentation_bytes,
    reserved_when_roomy,
)
from sim.training.memory.states import framework_states, model_states
from sim.training.schedule.pipeline import held as held_in_flight
from sim.workload.frameworks import Semantics
from sim.workload.models import ModelSpec
from sim.workload.plan import ParallelPlan
from sim.workload.stages import stage_layers
from sim.workload.trainable import DEFAULT, Techniques

__all__ = [
    "OPTIMIZER_BYTES",
    "MemoryParams",
    "MemoryReport",
    "capacity_bytes",
    "framework_memory_params",
    "memory_per_gpu",
    "memory_per_stage",
    "scenario_memory",
]

OPTIMIZER_BYTES = 12  # fp32 master weights, Adam m and v


@dataclass(frozen=True)
class MemoryParams:
    """Knobs of the memory model.

    Attributes
    ----------
    workspace_bytes : float
        Fixed per GPU: CUDA context (~0.5 GiB), cuBLAS workspaces and NCCL buffers.
        Default 1.5 GiB, an assumption.
    fragmentation : float
        Allocator fragmentation and caching overhead as a fraction of everything else.
        Default 0.039, just under 0.0398: the largest fraction under which every run of the
        llm-foundry H100 and A100 tables (139 + 59 runs) still fits with the default
        workspace (``python -m calibrate.fit_training --gpu H100-SXM --memory``, the same
        for A100-SXM): an upper bound fitted to runs that did fit.

    outside_allocator_bytes : float
        The part of ``workspace_bytes`` the caching allocator does not manage (CUDA
        context, NCCL buffers): a framework's "reserved" reading excludes it.
    """

    workspace_bytes: float = 1.5 * 2**30
    fragmentation: float = 0.039
    outside_allocator_bytes: float = 0.0


def framework_memory_params(sem: Semantics) -> MemoryParams:
    """Workspace under framework ``sem`` (:mod:`.allocator`); its fragmentation is not a
    fixed fraction but the allocator's rule (:func:`.allocator.limit_fragmentation_bytes`),
    so ``fragmentation`` is 0 here.

    >>> from sim.workload.frameworks import PRESETS
    >>> framework_memory_params(PRESETS["megatron-core"]).outside_allocator_bytes
    1240000000.0
    """
    return MemoryParams(
        workspace_bytes=OUTSIDE_ALLOCATOR_BYTES + CUBLAS_BYTES,
        fragmentation=0.0,
        outside_allocator_bytes=OUTSIDE_ALLOCATOR_BYTES,
    )


@dataclass(frozen=True)
class MemoryReport:
    """Memory of one GPU (by default the fullest: the stage with the largest total).

    Attributes
    ----------
    stage : int
        Pipeline stage the numbers are for.
    weights_bytes, grads_bytes, optimizer_bytes, activations_bytes : float
        Model states and activations, bytes.
    workspace_bytes, fragmentation_bytes : float
        Fixed workspace and allocator fragmentation, bytes.
    hbm_bytes : float
        Device memory capacity, bytes.
    offloaded_bytes : float
        Optimizer states and master weights moved to host memory or NVMe (``training.
        offload``), bytes; not part of ``total_bytes``.
    outside_allocator_bytes : float
        Part of ``workspace_bytes`` outside PyTorch's caching allocator, bytes.
    roomy_reserved_bytes : float or None
        What the caching allocator reserves at the peak on a device with room to spare
        (framework semantics only; None: ``total_bytes - outside_allocator_bytes``).
    """

    stage: int
    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    workspace_bytes: float
    fragmentation_bytes: float
    hbm_bytes: float
    offloaded_bytes: float = 0.0
    outside_allocator_bytes: float = 0.0
    roomy_reserved_bytes: float | None = None

    @property
    def total_bytes(self) -> float:
        """Sum of the parts, bytes."""
        return sum(self.breakdown.values())

    @property
    def reserved_bytes(self) -> float:
        """What PyTorch's caching allocator reserves at the peak (``max_memory_reserved``)
        on a device with room to spare, bytes (at the capacity it reserves less: it
        frees its cache before failing)."""
        if self.roomy_reserved_bytes is not None:
            return self.roomy_reserved_bytes
        return self.total_bytes - self.outside_allocator_bytes

    @property
    def fits(self) -> bool:
        """``total_bytes <= hbm_bytes``."""
        return self.total_bytes <= self.hbm_bytes

    @property
    def over_bytes(self) -> float:
        """How much more than the HBM the plan needs (0 when it fits), bytes."""
        return max(0.0, self.total_bytes - self.hbm_bytes)

    @property
    def breakdown(self) -> dict[str, float]:
        """Part name -> bytes."""
        return {
            "weights": self.weights_bytes,
            "grads": self.grads_bytes,
            "optimizer": self.optimizer_bytes,
            "activations": self.activations_bytes,
            "workspace": self.workspace_bytes,
            "fragmentation": self.fragmentation_bytes,
        }


def memory_per_stage(
    model: ModelSpec,
    plan: ParallelPlan,
    seq: int,
    hbm_bytes: float,
    params: MemoryParams | None = None,
    flash_attention: bool = True,
    cross_entropy: str = "fp32",
    tech: Techniques = DEFAULT,
    semantics: Semantics | None = None,
) -> list[MemoryReport]:
    """Memory of one GPU of each pipeline stage, in stage order (``tech``: optimizer,
    LoRA/QLoRA and offload, :mod:`sim.workload.trainable`; ``semantics``: as a
    framework holds it, or None for the framework-neutral model)."""
    if semantics is not None:
        return _framework_stages(
            model, plan, seq, hbm_bytes, params, flash_attention, cross_entropy, tech, semantics
        )
    params = params or MemoryParams()
    held = held_in_flight(plan.schedule, plan.pp, plan.num_microbatches, plan.virtual_stages,
                          plan.microbatch_group_size)[0]  # fmt: skip
    layers = stage_layers(plan, model)
    reports = []
    for stage in range(plan.pp):
        states = model_states(model, plan, stage, tech)
        weights, grads, optimizer = states.weights, states.grads, states.optimizer
        last = stage == plan.pp - 1
        acts = stage_activation_bytes(
            model, plan, seq, held[stage], layers[stage], last, flash_attention, cross_entropy
        )
        frag = params.fragmentation * (weights + grads + optimizer + acts)
        parts = (weights, grads, optimizer, acts, params.workspace_bytes, frag)
        reports.append(MemoryReport(stage, *parts, hbm_bytes, states.offloaded))
    return reports


def _framework_stages(
    model: ModelSpec,
    plan: ParallelPlan,
    seq: int,
    hbm_bytes: float,
    params: MemoryParams | None,
    flash_attention: bool,
    cross_entropy: str,
    tech: Techniques,
    sem: Semantics,
) -> list[MemoryReport]:
    """:func:`memory_per_stage` under framework ``sem``."""
    params = params or framework_memory_params(sem)
    held, chunks = held_in_flight(
        plan.schedule, plan.pp, plan.num_microbatches, plan.virtual_stages,
        plan.microbatch_group_size,
    )  # fmt: skip
    layers = stage_layers(plan, model)
    inside = params.workspace_bytes - params.outside_allocator_bytes
    reports = []
    for stage in range(plan.pp):
        s = framework_states(model, plan, stage, tech, sem)
        acts = framework_activation_bytes(
            model, plan, seq, stage, (held[stage], chunks[stage][-1]), layers[stage],
            flash_attention, cross_entropy, sem,
        )  # fmt: skip
        allocated = s.weights + s.grads + s.optimizer + acts + inside
        largest = largest_transient_bytes(
            model, plan, seq, stage, flash_attention, cross_entropy, sem
        )
        frag = params.fragmentation * allocated + limit_fragmentation_bytes(sem, allocated, largest)
        parts = (s.weights, s.grads, s.optimizer, acts, params.workspace_bytes, frag)
        outside, roomy = params.outside_allocator_bytes, reserved_when_roomy(sem, allocated)
        reports.append(MemoryReport(stage, *parts, hbm_bytes, s.offloaded, outside, roomy))
    return reports


def memory_per_gpu(
    model: ModelSpec,
    plan: ParallelPlan,
    seq: int,
    hbm_bytes: float,
    params: MemoryParams | None = None,
    flash_attention: bool = True,
    cross_entropy: str = "fp32",
    tech: Techniques = DEFAULT,
    semantics: Semantics | None = None,
) -> MemoryReport:
    """Memory of the fullest GPU under ``plan``; ``fits`` says whether it fits ``hbm_bytes``.

    ``semantics``: hold it as that framework does (module doc); None keeps the
    framework-neutral model.

    Over capacity is an answer, not an error (:func:`sim.training.memory.advice.memory_advice`
    says what to change).

    >>> from sim.workload.models import model_preset
    >>> plan = ParallelPlan(global_batch=8)
    >>> memory_per_gpu(model_preset("llama2-70b"), plan, 4096, 80 * 2**30).fits
    False
    """
    reports = memory_per_stage(
        model, plan, seq, hbm_bytes, params, flash_attention, cross_entropy, tech, semantics
    )
    return max(reports, key=lambda r: (r.total_bytes, -r.stage))


def scenario_memory(
    scenario: Scenario, plan: ParallelPlan, gpus: Sequence[GpuSpec]
) -> MemoryReport:
    """:func:`memory_per_gpu` of ``scenario`` under ``plan`` on ``gpus`` (the cluster's GPU
    models: it must fit the smallest), held as the scenario's framework holds it: the one
    call the step's result and the planner share.

    Capacity: :func:`capacity_bytes`.
    """
    tr = scenario.training
    return memory_per_gpu(scenario.model, plan, tr.seq_len, capacity_bytes(scenario, gpus), None,
                          tr.flash_attention, tr.cross_entropy, tr.techniques,
                          scenario.framework)  # fmt: skip


def capacity_bytes(scenario: Scenario, gpus: Sequence[GpuSpec]) -> float:
    """Memory a GPU of ``gpus`` offers the step (the smallest): what a process can use
    (:func:`sim.training.memory.allocator.device_memory_bytes`) when the scenario names a
    framework, else the catalog's HBM (the framework-neutral model)."""
    smallest = min(gpus, key=lambda g: g.hbm_bytes)
    if scenario.framework is None:
        return float(smallest.hbm_bytes)
    return device_memory_bytes(smallest.name, smallest.hbm_bytes)
