"""The answer to "what does one training step cost, and why": :class:`StepResult`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["StepResult", "flat_record"]


@dataclass(frozen=True)
class StepResult:
    """One simulated training step (SI units; FLOP/s rates per GPU).

    Attributes
    ----------
    step_time_s : float
        Wall time of one optimizer step (the slowest pipeline stage).
    tokens_per_s : float
        ``global_batch * seq_len / step_time_s``.
    tflops_per_gpu : float
        Model FLOPs (no recompute) per second per GPU, in TFLOP/s.
    hw_tflops_per_gpu : float
        Hardware FLOPs (recompute included) per second per GPU, in TFLOP/s.
    mfu, hfu : float
        Model and hardware FLOP utilisation against the GPU's dense peak at the
        training precision.
    fits : bool
        Whether the fullest GPU's memory fits its HBM (an answer, not an error).
    memory_per_gpu_bytes : float
        Total memory of the fullest GPU.
    memory_breakdown : dict[str, float]
        weights, grads, optimizer, activations, workspace (bytes).
    breakdown : dict[str, float]
        The critical stage's step time split into compute, exposed TP/EP communication,
        pipeline bubble, exposed pipeline sends, exposed DP communication, optimizer and
        parameter gathers (seconds); the parts sum to ``step_time_s``.
    link_bytes_by_scope : dict[str, float]
        Bytes on the wire per link class (nvlink, pcie, net) in the whole cluster per step.
    cost_per_step_usd, cost_per_million_tokens_usd : float or None
        From ``price.gpu_hour_usd`` when given.
    notes : list[str]
        Facts worth knowing: estimated compute parameters, placement, why a plan does not
        fit and what would.
    compute_params : dict
        Which compute parameters were used: ``gpu``, ``estimate`` (True when they were not
        fitted to measurements of this GPU), ``basis`` and ``validation`` (their errors
        on published data).
    cp_bytes_per_gpu : float
        Bytes one GPU sends around its context-parallel ring in a step (ring attention's
        K/V and, in backward, their gradients; 0 without ``parallel.cp``). What it leaves
        exposed is ``breakdown["cp_comm_exposed"]``.
    gpu_types : dict or None
        On a heterogeneous cluster (or a speed-based split): per GPU model its ``count``,
        ``microbatches``, ``compute_per_microbatch_s``, ``compute_per_step_s``, ``idle_s``
        (waiting for the slowest model's compute) and ``bottleneck``
        (:mod:`sim.training.hetero.report`). None (and left out of dicts) otherwise.
    techniques : dict
        Data-parallel communication techniques when any is active (gradient compression,
        parameter server, local SGD: :mod:`sim.training.techniques`): their parameters
        and a ``dp_comm`` block (wire bytes per GPU per step before and after, exposed
        seconds, compute overhead) and ``memory_added_bytes``; and what the optimizer,
        LoRA/QLoRA and offload settings changed (``optimizer``, trainable parameters, state
        bytes, offload timings, how MFU is counted: :mod:`sim.training.techniques_report`).
        Empty (and left out of :meth:`to_dict`) for the defaults.
    profile : dict
        The parameter profile the step used: ``name``, ``how`` it was chosen (``selected``
        by hardware, ``requested``, ``forced`` or ``defaults``), the ``hardware`` it was
        measured on, the scopes left at the shipped defaults and its ``error_bars``
        (:func:`sim.profile_select.describe`).
    """

    scenario: str
    topology: str
    network: str
    gpus: int
    gpu: str
    plan: dict[str, Any]
    step_time_s: float
    tokens_per_s: float
    tflops_per_gpu: float
    hw_tflops_per_gpu: float
    mfu: float
    hfu: float
    fits: bool
    memory_per_gpu_bytes: float
    memory_breakdown: dict[str, float]
    breakdown: dict[str, float]
    critical_stage: int
    link_bytes_by_scope: dict[str, float]
    cost_per_step_usd: float | None
    cost_per_million_tokens_usd: float | None
    notes: list[str] = field(default_factory=list)
    compute_params: dict[str, Any] = field(default_factory=dict)
    cp_bytes_per_gpu: float = 0.0
    gpu_types: dict[str, dict[str, Any]] | None = None
    techniques: dict[str, Any] = field(default_factory=dict)
    profile: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (plain Python types); ``gpu_types`` only when given,
        ``techniques`` only when active."""
        out = asdict(self)
        if out["gpu_types"] is None:
            del out["gpu_types"]
        if not self.techniques:
            del out["techniques"]
        return out

    def to_record(self) -> dict[str, Any]:
        """One flat row: scalars as they are, each dict field as ``field.key`` columns
        (``plan.tp``, ``breakdown.compute``, nested ones as ``a.b.c``), lists joined by ``"; "``.

        For tables: CSV rows, data frames (:func:`sim.results_frame`).
        """
        out: dict[str, Any] = {}
        _flatten(self.to_dict(), "", out)
        return out

    def summary(self) -> str:
        """A readable multi-line summary."""
        gib = 2**30
        gpus = f"{self.gpus} x {self.gpu}"
        if self.gpu_types and len(self.gpu_types) > 1:
            mix = " + ".join(f"{t['count']} {n}" for n, t in self.gpu_types.items())
            gpus = f"{self.gpus} GPUs ({mix})"
        lines = [
            f"{self.scenario}: {gpus} on {self.topology} ({self.network} network)",
            "plan: " + ", ".join(f"{k}={v}" for k, v in self.plan.items()),
            f"step time        {self.step_time_s:.4f} s   ({self.tokens_per_s:,.0f} tokens/s)",
            f"model TFLOP/s    {self.tflops_per_gpu:.1f} per GPU   MFU {self.mfu:.1%}   HFU {self.hfu:.1%}",
            f"memory per GPU   {self.memory_per_gpu_bytes / gib:.1f} GiB  "
            + ("fits" if self.fits else "DOES NOT FIT")
            + "  ("
            + ", ".join(f"{k} {v / gib:.1f}" for k, v in self.memory_breakdown.items())
            + ")",
            f"breakdown (stage {self.critical_stage}, s):",
        ]
        for k, v in self.breakdown.items():
            share = v / self.step_time_s if self.step_time_s else 0.0
            lines.append(f"  {k:<22} {v:10.4f}  {share:6.1%}")
        if self.plan.get("cp", 1) > 1:
            exposed = self.breakdown.get("cp_comm_exposed", 0.0)
            lines.append(
                f"context parallel cp={self.plan['cp']}: ring attention sends "
                f"{self.cp_bytes_per_gpu / 1e9:.2f} GB per GPU per step, {exposed:.4f} s exposed"
            )
        lines.append(
            "bytes on links   "
            + ", ".join(f"{k} {v / 1e9:.1f} GB" for k, v in self.link_bytes_by_scope.items())
        )
        if "dp_comm" in self.techniques:
            lines.append(_techniques_line(self.techniques))
        if self.cost_per_step_usd is not None:
            lines.append(
                f"cost             ${self.cost_per_step_usd:.4f} per step, "
                f"${self.cost_per_million_tokens_usd:.4f} per million tokens"
            )
        lines += _gpu_type_lines(self.gpu_types)
        lines += _technique_lines(self.techniques)
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def _gpu_type_lines(types: dict[str, dict[str, Any]] | None) -> list[str]:
    """Per GPU model rows of the summary and which model is the bottleneck."""
    if not types:
        return []
    lines = [f"{'GPU type':<16} {'count':>6} {'micro-batches':>14} {'compute/mb s':>13} "
             f"{'compute/step s':>15} {'idle s':>8}"]  # fmt: skip
    for name, t in types.items():
        mbs = ",".join(map(str, t["microbatches"]))
        lines.append(
            f"{name:<16} {t['count']:>6} {mbs:>14} {t['compute_per_microbatch_s']:>13.4f} "
            f"{t['compute_per_step_s']:>15.4f} {t['idle_s']:>8.4f}"
        )
    slow = next(n for n, t in types.items() if t["bottleneck"])
    lines.append(f"bottleneck GPU type: {slow} (the others wait for its compute: idle s)")
    return lines


def _technique_lines(t: dict[str, Any]) -> list[str]:
    """Summary lines of the optimizer/LoRA/offload settings (none for the defaults)."""
    if "optimizer" not in t:
        return []
    lines = [
        f"techniques       optimizer {t['optimizer']} "
        f"({t['optimizer_state_bytes_per_param']:.3g} B/param of state), "
        f"finetune {t['finetune']}, offload {t['offload']}"
    ]
    if "trainable_params" in t:
        lines.append(
            f"  trainable        {t['trainable_params'] / 1e6:,.1f} M params "
            f"({t['trainable_fraction']:.3%}), rank {t['lora_rank']} on "
            f"{','.join(t['lora_targets'])}; DP gradients {t['dp_grad_bytes_per_reduction'] / 1e6:,.1f} MB"
        )
    if "offload_total_s" in t:
        lines.append(
            f"  offload step     {t['offload_total_s']:.4f} s (PCIe down {t['pcie_down_s']:.4f}, "
            f"CPU {t['cpu_step_s']:.4f}, up {t['pcie_up_s']:.4f}, NVMe {t['nvme_s']:.4f}; "
            f"hidden {t['offload_hidden_s']:.4f}); host {t['offloaded_bytes_per_gpu'] / 2**30:.1f} GiB/GPU"
        )
    return lines


def flat_record(tree: dict[str, Any]) -> dict[str, Any]:
    """``tree`` as one flat row, as :meth:`StepResult.to_record` flattens (dotted keys).

    >>> flat_record({"a": {"b": 1}, "n": ["x", "y"]})
    {'a.b': 1, 'n': 'x; y'}
    """
    out: dict[str, Any] = {}
    _flatten(tree, "", out)
    return out


def _flatten(tree: dict[str, Any], prefix: str, out: dict[str, Any]) -> None:
    """Flatten nested dicts into ``out`` as dotted keys; lists joined by ``"; "``."""
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            _flatten(value, f"{name}.", out)
        elif isinstance(value, list):
            out[name] = "; ".join(str(v) for v in value)
        else:
            out[name] = value


def _techniques_line(block: dict[str, Any]) -> str:
    """One summary line of the data-parallel techniques' block."""
    dp = block["dp_comm"]
    return (
        f"DP techniques    compression {block['grad_compression']}, {block['dp_mode']}, "
        f"sync every {block['sync_every']}: {dp['wire_bytes_per_gpu_before'] / 1e9:.2f} -> "
        f"{dp['wire_bytes_per_gpu_after'] / 1e9:.2f} GB per GPU per step, exposed "
        f"{dp['exposed_s_per_step']:.4f} s, compression compute "
        f"{dp['compute_overhead_s_per_step']:.4f} s, memory "
        f"+{sum(block['memory_added_bytes'].values()) / 2**30:.2f} GiB"
    )
