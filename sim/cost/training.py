"""Time and cost to train on ``training.tokens`` tokens, from one simulated step.

    steps      = ceil(tokens / tokens_per_step)
    useful     = steps * step_time_s                          (the ideal, failure-free time)
    wall       = useful, or the reliability layer's expected wall time (lost work, restarts,
                 checkpoints) when given
    GPU-hours  = gpus * wall / 3600
    cost       = GPU-hours * USD per GPU-hour

>>> c = training_cost(tokens=1e9, tokens_per_step=2**20, step_time_s=2.0, gpus=64,
...                   usd_per_gpu_hour=2.0)
>>> c.steps, round(c.wall_time_s), round(c.cost_usd, 2)
(954, 1908, 67.84)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from sim.errors import ConfigError

__all__ = ["TrainingCost", "cost_usd", "steps_for_tokens", "training_cost"]


def _positive(value: float, what: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (math.isfinite(value) and value > 0)
    ):
        raise ConfigError(f"{what}: must be a finite number > 0 (got {value!r})")
    return float(value)


def steps_for_tokens(tokens: float, tokens_per_step: float) -> int:
    """Optimizer steps to consume ``tokens`` tokens (the last step may be partial; it counts).

    >>> steps_for_tokens(15.6e12, 16e6)
    975000
    """
    return math.ceil(
        _positive(tokens, "training.tokens") / _positive(tokens_per_step, "tokens per step")
    )


def cost_usd(wall_time_s: float, gpus: int, usd_per_gpu_hour: float) -> float:
    """``gpus * wall_time_s / 3600 * usd_per_gpu_hour`` (every GPU is billed for the wall time).

    >>> cost_usd(3600.0, 8, 2.5)
    20.0
    """
    if not (math.isfinite(usd_per_gpu_hour) and usd_per_gpu_hour >= 0):
        raise ConfigError(
            f"price: USD per GPU-hour must be a finite number >= 0 (got {usd_per_gpu_hour!r})"
        )
    return gpus * _positive(wall_time_s, "wall time") / 3600.0 * usd_per_gpu_hour


@dataclass(frozen=True)
class TrainingCost:
    """Time and money to train on ``tokens`` tokens (SI units; USD).

    Attributes
    ----------
    steps : int
        Optimizer steps.
    useful_time_s : float
        ``steps * step_time_s``: the failure-free time.
    wall_time_s : float
        Time to train: ``useful_time_s`` or the reliability layer's expected wall time.
    gpu_hours : float
        ``gpus * wall_time_s / 3600``.
    cost_usd, cost_per_million_tokens_usd : float or None
        None without a price.
    """

    tokens: float
    tokens_per_step: float
    steps: int
    step_time_s: float
    gpus: int
    useful_time_s: float
    wall_time_s: float
    gpu_hours: float
    usd_per_gpu_hour: float | None
    cost_usd: float | None
    cost_per_million_tokens_usd: float | None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


def training_cost(
    *,
    tokens: float,
    tokens_per_step: float,
    step_time_s: float,
    gpus: int,
    usd_per_gpu_hour: float | None,
    wall_time_s: float | None = None,
) -> TrainingCost:
    """Time to train and cost to train (see the module docstring for the formulas).

    Parameters
    ----------
    tokens : float
        ``training.tokens``.
    tokens_per_step : float
        ``global_batch * seq_len``.
    step_time_s : float
        The simulated step time.
    gpus : int
        GPUs billed.
    usd_per_gpu_hour : float or None
        Price (``PriceQuote.usd_per_gpu_hour``); None: no cost.
    wall_time_s : float, optional
        Expected wall time including failures (``GoodputEstimate.expected_wall_time_s``);
        default: the failure-free time.

    Raises
    ------
    ConfigError
        Non-positive, NaN or infinite inputs, or a wall time shorter than the useful time.
    """
    steps = steps_for_tokens(tokens, tokens_per_step)
    useful = steps * _positive(step_time_s, "step time")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ConfigError(f"gpus: must be an integer >= 1 (got {gpus!r})")
    wall = useful if wall_time_s is None else _positive(wall_time_s, "wall time")
    if wall < useful * (1 - 1e-12):
        raise ConfigError(f"wall time {wall:g} s is shorter than the useful time {useful:g} s")
    notes = (
        []
        if wall_time_s is not None
        else ["time to train assumes no failures (no reliability section)"]
    )
    cost = None if usd_per_gpu_hour is None else cost_usd(wall, gpus, usd_per_gpu_hour)
    return TrainingCost(
        tokens=float(tokens),
        tokens_per_step=float(tokens_per_step),
        steps=steps,
        step_time_s=float(step_time_s),
        gpus=gpus,
        useful_time_s=useful,
        wall_time_s=wall,
        gpu_hours=gpus * wall / 3600.0,
        usd_per_gpu_hour=usd_per_gpu_hour,
        cost_usd=cost,
        cost_per_million_tokens_usd=None if cost is None else cost / (tokens / 1e6),
        notes=notes,
    )
