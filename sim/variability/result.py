"""What the Monte Carlo over step times answers: :class:`VariabilityResult`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

__all__ = ["VariabilityResult", "summarise"]


@dataclass(frozen=True)
class VariabilityResult:
    """Step-time distribution under variability (seconds; slowdowns are ratios to the ideal).

    Attributes
    ----------
    ideal_step_s : float
        The simulated step (identical GPUs that never slow down).
    mean_step_s, p50_step_s, p90_step_s, p99_step_s, max_step_s : float
        Over the sampled steps (percentiles by linear interpolation).
    std_step_s : float
        Standard deviation of the sampled steps (the Monte Carlo error of the mean is
        ``std_step_s / sqrt(samples)``).
    mean_slowdown, p99_slowdown : float
        ``mean_step_s / ideal_step_s`` and ``p99_step_s / ideal_step_s``.
    straggler_sample_share : float
        Share of sampled steps in which at least one GPU straggled.
    samples, seed : int
        Number of sampled steps and the seed of their draws.
    gpus : int
        GPUs in the job (``tp * pp * dp``).
    groups : dict[str, int]
        The synchronisation structure used: ``tp``, ``pp``, ``dp``.
    config : dict
        The ``variability`` section as used.
    note : str
        The approximation behind the numbers.
    notes : list[str]
        Facts about this run (knobs without effect, breakdown parts held fixed).
    """

    ideal_step_s: float
    mean_step_s: float
    p50_step_s: float
    p90_step_s: float
    p99_step_s: float
    max_step_s: float
    std_step_s: float
    mean_slowdown: float
    p99_slowdown: float
    straggler_sample_share: float
    samples: int
    seed: int
    gpus: int
    groups: dict[str, int]
    config: dict[str, Any]
    note: str
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (plain Python types)."""
        return asdict(self)

    def to_record(self) -> dict[str, Any]:
        """Flat columns ``variability.KEY`` (``variability.groups.tp``, ``variability.config.
        compute_cv``; notes joined by ``"; "``) to join a step's CSV row."""
        out: dict[str, Any] = {}
        for key, value in asdict(self).items():
            if isinstance(value, dict):
                out.update({f"variability.{key}.{k}": v for k, v in value.items()})
            elif isinstance(value, list):
                out[f"variability.{key}"] = "; ".join(value)
            else:
                out[f"variability.{key}"] = value
        return out

    def summary(self) -> str:
        """A readable block for ``clustersim run --samples``."""
        ideal = self.ideal_step_s
        rows = [("mean", self.mean_step_s), ("p50", self.p50_step_s), ("p90", self.p90_step_s),
                ("p99", self.p99_step_s), ("max", self.max_step_s)]  # fmt: skip
        g = self.groups
        lines = [
            f"variability: {self.samples} sampled steps, seed {self.seed}, {self.gpus} GPUs "
            f"(TP {g['tp']} x PP {g['pp']} x DP {g['dp']})",
            f"  {'ideal':<6} {ideal:10.4f} s",
        ]
        lines += [f"  {k:<6} {v:10.4f} s   x{v / ideal if ideal else 1.0:.4f}" for k, v in rows]
        lines.append(f"  steps with a straggler  {self.straggler_sample_share:.1%}")
        lines += [f"note: {self.note}"] + [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def summarise(
    excess: np.ndarray, straggled: np.ndarray, ideal_s: float, **rest: Any
) -> VariabilityResult:
    """Build the result from each sampled step's excess over ``ideal_s`` (s) and its
    straggler flag. Statistics are taken of the excess and added to ``ideal_s``, so that
    no variability gives exactly the ideal step."""
    p50, p90, p99 = (ideal_s + float(v) for v in np.percentile(excess, [50.0, 90.0, 99.0]))
    mean = ideal_s + float(excess.mean())
    ratio = (lambda v: v / ideal_s) if ideal_s > 0 else (lambda v: 1.0)
    return VariabilityResult(
        ideal_step_s=float(ideal_s), mean_step_s=mean, p50_step_s=p50, p90_step_s=p90,
        p99_step_s=p99, max_step_s=ideal_s + float(excess.max()), std_step_s=float(excess.std()),
        mean_slowdown=ratio(mean), p99_slowdown=ratio(p99),
        straggler_sample_share=float(straggled.mean()), **rest,
    )  # fmt: skip
