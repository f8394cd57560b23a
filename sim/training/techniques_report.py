"""The ``techniques`` record of a step result: what the optimizer, LoRA/QLoRA and offload
settings changed, with the numbers behind them and what is approximated.

Empty for today's full-parameter AdamW on the GPU, so default results do not change.
"""

from __future__ import annotations

from typing import Any

from sim.training.graph.buckets import stage_comm
from sim.training.graph.optimizer import pcie_Bps, stage_offload
from sim.training.memory.report import MemoryReport
from sim.training.setup import StepSetup
from sim.workload.models import param_count
from sim.workload.trainable import (
    NF4_BYTES,
    lora_trainable_params,
    optimizer_state_bytes,
)

__all__ = ["MFU_BASIS", "techniques_record"]

MFU_BASIS = (
    "MFU and model TFLOP/s count the matmul FLOPs LoRA executes (forward, input gradients, "
    "adapters), not 6·N·T: the frozen weights' gradients are never computed"
)
_LORA_NOTES = (
    "LoRA: adapters split over TP like their base matrix; adapter add and dropout left "
    "out; activations as in full fine-tuning (an upper bound)"
)


def _lora(setup: StepSetup) -> dict[str, Any]:
    sc = setup.scenario
    tech, model = sc.training.techniques, sc.model
    trainable = lora_trainable_params(model, tech)
    out: dict[str, Any] = {
        "lora_rank": tech.lora_rank,
        "lora_targets": list(tech.lora_targets),
        "trainable_params": trainable,
        "trainable_fraction": trainable / param_count(model),
        "mfu_basis": MFU_BASIS,
    }
    if tech.finetune == "qlora":
        out["base_linear_bytes_per_param"] = NF4_BYTES
    return out


def _offload(setup: StepSetup, crit: int, window_s: float) -> dict[str, Any]:
    off = stage_offload(setup, crit, window_s)
    assert off is not None
    rate, source = pcie_Bps(setup.topology)
    tech = setup.scenario.training.techniques
    return {
        "offload_overlap": tech.offload_overlap,
        "pcie_Bps": rate,
        "pcie_source": source,
        "cpu_adam_params_per_s": tech.cpu_adam_params_per_s,
        "nvme_Bps": tech.nvme_Bps if tech.offload == "nvme" else None,
        "pcie_down_s": off.pcie_down_s,
        "cpu_step_s": off.cpu_step_s,
        "pcie_up_s": off.pcie_up_s,
        "nvme_s": off.nvme_s,
        "offload_total_s": off.total_s,
        "offload_hidden_s": off.total_s - off.exposed_s,
    }


def techniques_record(
    setup: StepSetup, crit: int, mem: MemoryReport, window_s: float
) -> tuple[dict[str, Any], list[str]]:
    """(record, notes) of the techniques in use on the critical stage ``crit``; both empty
    for the defaults. ``window_s``: the critical stage's forward and backward time."""
    sc = setup.scenario
    tech = sc.training.techniques
    if tech.is_default:
        return {}, []
    out: dict[str, Any] = {
        "optimizer": tech.optimizer,
        "finetune": tech.finetune,
        "offload": tech.offload,
        "optimizer_state_bytes_per_param": optimizer_state_bytes(tech, sc.model),
        "dp_grad_bytes_per_reduction": stage_comm(setup, crit).dp_grad_bytes,
    }
    notes = []
    if tech.optimizer == "sgd":
        out["momentum"] = tech.momentum
    if tech.optimizer == "adafactor":
        notes.append("Adafactor: factored second moment averaged over the model's matrices")
    if tech.lora:
        out.update(_lora(setup))
        notes += [_LORA_NOTES, MFU_BASIS]
    if tech.offload != "none":
        out.update(_offload(setup, crit, window_s))
        out["offloaded_bytes_per_gpu"] = mem.offloaded_bytes
        notes.append(
            f"offload ({tech.offload}): optimizer states and master weights "
            f"({mem.offloaded_bytes / 2**30:.1f} GiB per GPU) in host "
            f"{'NVMe' if tech.offload == 'nvme' else 'memory'}; gradients stay on the GPU; "
            "CPU-Adam rate and NVMe bandwidth are estimates (training.cpu_adam_rate, "
            "training.nvme_bandwidth)"
        )
    return out, notes
