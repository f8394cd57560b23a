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
from sim.training.setup import StepSetup
from sim.workload.comms import RankParams
from sim.workload.lora import trainable_params
from sim.workload.models import ModelSpec
from sim.workload.plan import ParallelPlan
from sim.workload.stages import stage_layers
from sim.workload.trainable import (
    PCIE_DEFAULT_BPS,
    PCIE_EFF,
    Techniques,
    optimizer_state_bytes,
    optimizer_step_bytes,
)
from sim.workload.zero import PARAM_BYTES

__all__ = [
    "OffloadTime",
    "gpu_optimizer_s",
    "offload_time",
    "optimizer_bytes_per_param",
    "optimizer_s",
    "param_tensors",
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
                    hbm_Bps: float, stream_eff: float, tensors: float = 0.0,
                    tensor_overhead_s: float = 0.0) -> float:  # fmt: skip
    """Seconds of the optimizer step over ``params`` parameters in ``tensors`` tensors:
    their bytes at ``hbm_Bps * stream_eff``, plus ``tensor_overhead_s`` per tensor (an
    eager per-tensor optimizer; 0 for a fused multi-tensor kernel).

    >>> from sim.workload.trainable import DEFAULT
    >>> from sim.workload.models import model_preset
    >>> m = model_preset("gpt2-124m")
    >>> gpu_optimizer_s(1e6, DEFAULT, m, 4, 38e9, 1.0, tensors=10, tensor_overhead_s=1e-5)
    0.0011
    """
    bytes_s = params * optimizer_step_bytes(tech, model, grad_bytes) / (hbm_Bps * stream_eff)
    return bytes_s + tensors * tensor_overhead_s


def param_tensors(model: ModelSpec, layers: int, first: bool, last: bool) -> int:
    """Parameter tensors of ``layers`` transformer layers, plus the embedding tables on the
    ``first`` stage and the final norm and head on the ``last``, as an eager GPT holds them
    (fused QKV; one tensor per weight and per bias; every expert's own tensors).

    An approximation for the per-tensor optimizer overhead: LoRA adapters and ZeRO shards
    count as the full model's tensors.

    >>> from sim.workload.models import ModelSpec
    >>> gpt = ModelSpec("gpt", 2, 128, 512, 4, 4, 1024, max_seq=128)
    >>> param_tensors(gpt, 2, True, True)  # calibrate's quick CPU step job: 29
    29
    """
    bias = 2 if model.bias else 1
    norm = 2 if model.norm == "layernorm" else 1
    mlp = (3 if model.gated_mlp else 2) * bias
    per_layer = 2 * norm + 2 * bias + model.experts * mlp + (1 if model.moe else 0)
    out = layers * per_layer
    if first:
        out += 2 if model.position == "learned" else 1
    if last:
        out += norm + (0 if model.tied_embeddings else 1)
    return out


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
    memory-bound over its (ZeRO-sharded) trainable parameters at ``stream_eff`` (plus
    ``optimizer_tensor_overhead_s`` per parameter tensor where the profile sets one), or
    the exposed part of the offloaded step (``window_s``: the step's forward and backward)."""
    off = stage_offload(setup, s, window_s)
    if off is not None:
        return off.exposed_s
    tech, plan, model = setup.scenario.training.techniques, setup.plan, setup.scenario.model
    params = shard_params(plan, trainable_params(model, plan, s, tech))
    gpu, p = setup.gpu_at(s), setup.compute_at(s)
    tensors = 0
    if p.optimizer_tensor_overhead_s > 0:
        layers = stage_layers(plan, model)[s]
        tensors = param_tensors(model, layers, s == 0, s == plan.pp - 1)
    return gpu_optimizer_s(params, tech, model, plan.grad_bytes, gpu.hbm_Bps, p.stream_eff,
                           tensors, p.optimizer_tensor_overhead_s)  # fmt: skip
