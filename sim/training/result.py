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

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (plain Python types)."""
        return asdict(self)

    def to_record(self) -> dict[str, Any]:
        """One flat row: scalars as they are, each dict field as ``field.key`` columns
        (``plan.tp``, ``breakdown.compute``, nested ones as ``a.b.c``), lists joined by ``"; "``.

        For tables: CSV rows, data frames (:func:`sim.results_frame`).
        """
        out: dict[str, Any] = {}
        _flatten(asdict(self), "", out)
        return out

    def summary(self) -> str:
        """A readable multi-line summary."""
        gib = 2**30
        lines = [
            f"{self.scenario}: {self.gpus} x {self.gpu} on {self.topology} ({self.network} network)",
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
        lines.append(
            "bytes on links   "
            + ", ".join(f"{k} {v / 1e9:.1f} GB" for k, v in self.link_bytes_by_scope.items())
        )
        if self.cost_per_step_usd is not None:
            lines.append(
                f"cost             ${self.cost_per_step_usd:.4f} per step, "
                f"${self.cost_per_million_tokens_usd:.4f} per million tokens"
            )
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


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
