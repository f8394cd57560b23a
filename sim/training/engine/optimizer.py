"""The optimizer step of one rank: on the GPU (memory-bound over its states), or offloaded
to the host CPU (ZeRO-Offload, Ren et al. 2021, arXiv:2101.06840) and optionally NVMe
(ZeRO-Infinity, Rajbhandari et al. 2021, arXiv:2104.07857).

Offloaded, per step and per rank (its ZeRO shard of the trainable parameters ``P``):
bf16 gradients go down over PCIe (``2 P`` bytes), the CPU runs the optimizer
(``P / cpu_adam_rate``), the updated bf16 parameters come back up (``2 P`` bytes); with
NVMe the optimizer states and master weights are read and written once
(``2 x state bytes x P / nvme_bandwidth``). The four run one after the other; ZeRO-Offload's
delayed parameter update (``offload_overlap``) runs them beside the next step's forward
and backward, leaving only what exceeds that window exposed. The PCIe rate is the GPU's
own PCIe link in the topology at :data:`PCIE_EFF` (the host uplink shared by GPUs behind
one switch is not modelled), else PCIe Gen5 x16.

>>> t = OffloadTime(1.0, 2.0, 1.0, 0.0, overlap_window_s=3.0)
>>> t.total_s, t.exposed_s
(4.0, 1.0)
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.topology.model import Topology
from sim.training.engine.setup import StepSetup
from sim.training.workload.comms import RankParams
from sim.training.workload.lora import trainable_params
from sim.training.workload.models import ModelSpec
from sim.training.workload.plan import ParallelPlan
from sim.training.workload.trainable import (
    PCIE_DEFAULT_BPS,
    PCIE_EFF,
    Techniques,
    optimizer_state_bytes,
    optimizer_step_bytes,
)
from sim.training.workload.zero import PARAM_BYTES

__all__ = [
    "OffloadTime",
    "gpu_optimizer_s",
    "offload_time",
    "optimizer_bytes_per_param",
    "optimizer_s",
    "pcie_Bps",
    "shard_params",
    "stage_offload",
]


def optimizer_bytes_per_param(grad_bytes: int) -> int:
    """HBM bytes of a mixed-precision Adam step per parameter.

    Read and write fp32 master weights, m and v (24), write the bf16 weight (2), read the
    gradient for the step and for the global norm and zero it (3 x ``grad_bytes``).

    >>> optimizer_bytes_per_param(4)
    38
    """
    return 26 + 3 * grad_bytes


@dataclass(frozen=True)
class OffloadTime:
    """Seconds of one offloaded optimizer step, by part."""

    pcie_down_s: float
    cpu_step_s: float
    pcie_up_s: float
    nvme_s: float
    overlap_window_s: float = 0.0

    @property
    def total_s(self) -> float:
        """All parts one after the other."""
        return self.pcie_down_s + self.cpu_step_s + self.pcie_up_s + self.nvme_s

    @property
    def exposed_s(self) -> float:
        """What the step waits for: ``total_s`` less the overlap window (0 without DPU)."""
        return max(0.0, self.total_s - self.overlap_window_s)


def shard_params(plan: ParallelPlan, p: RankParams) -> float:
    """Parameters whose optimizer step this rank runs (its ZeRO-1+ shard)."""
    if plan.zero >= 1:
        return p.dense / plan.shard + p.expert / plan.edp
    return p.total


def pcie_Bps(topology: Topology) -> tuple[float, str]:
    """Achievable host<->GPU copy rate (bytes/s, one direction) and where it comes from."""
    gpu = topology.gpus[0]
    for _, _, d in topology.graph.out_edges(gpu, data=True):
        if d.get("scope") == "pcie":
            return float(d["capacity_Bps"]) * PCIE_EFF, f"topology link {d['kind']}"
    return PCIE_DEFAULT_BPS * PCIE_EFF, "default PCIe Gen5 x16"


def gpu_optimizer_s(params: float, tech: Techniques, model: ModelSpec, grad_bytes: int,
                    hbm_Bps: float, stream_eff: float) -> float:  # fmt: skip
    """Seconds of a fused multi-tensor optimizer kernel over ``params`` parameters."""
    return params * optimizer_step_bytes(tech, model, grad_bytes) / (hbm_Bps * stream_eff)


def offload_time(params: float, tech: Techniques, model: ModelSpec, topology: Topology,
                 window_s: float = 0.0) -> OffloadTime:  # fmt: skip
    """The offloaded step of ``params`` parameters; ``window_s``: the forward and backward
    it may hide behind (used only with ``offload_overlap``)."""
    rate, _ = pcie_Bps(topology)
    nvme = 0.0
    if tech.offload == "nvme":
        nvme = 2 * optimizer_state_bytes(tech, model) * params / tech.nvme_Bps
    return OffloadTime(
        pcie_down_s=PARAM_BYTES * params / rate,
        cpu_step_s=params / tech.cpu_adam_params_per_s,
        pcie_up_s=PARAM_BYTES * params / rate,
        nvme_s=nvme,
        overlap_window_s=window_s if tech.offload_overlap else 0.0,
    )


def stage_offload(setup: StepSetup, s: int, window_s: float = 0.0) -> OffloadTime | None:
    """The offloaded optimizer step of a rank of stage ``s`` (None when not offloaded)."""
    tech = setup.scenario.training.techniques
    if tech.offload == "none":
        return None
    model = setup.scenario.model
    params = shard_params(setup.plan, trainable_params(model, setup.plan, s, tech))
    return offload_time(params, tech, model, setup.topology, window_s)


def optimizer_s(setup: StepSetup, s: int, window_s: float = 0.0) -> float:
    """Optimizer step time of a rank of stage ``s``: a fused multi-tensor kernel,
    memory-bound over its (ZeRO-sharded) trainable parameters at ``stream_eff``, or the
    exposed part of the offloaded step (``window_s``: the step's forward and backward)."""
    off = stage_offload(setup, s, window_s)
    if off is not None:
        return off.exposed_s
    tech, plan, model = setup.scenario.training.techniques, setup.plan, setup.scenario.model
    params = shard_params(plan, trainable_params(model, plan, s, tech))
    gpu = setup.gpu_at(s)
    return gpu_optimizer_s(params, tech, model, plan.grad_bytes, gpu.hbm_Bps,
                           setup.compute_at(s).stream_eff)  # fmt: skip
