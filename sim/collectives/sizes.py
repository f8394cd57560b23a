"""Message sizes of a collective sweep, as nccl-tests steps them (``-b``, ``-e``, ``-f``)."""

from __future__ import annotations

import math

from sim.errors import ConfigError

__all__ = ["MAX_SWEEP_POINTS", "sweep_sizes"]

#: Most sizes of one sweep (nccl-tests' -b 8 -e 16G -f 2 gives 32 rows).
MAX_SWEEP_POINTS = 1000


def sweep_sizes(min_bytes: float, max_bytes: float, step_factor: float) -> list[float]:
    """nccl-tests' sizes: min, min*f, ... up to max (inclusive), in bytes.

    >>> sweep_sizes(8, 64, 2)
    [8.0, 16.0, 32.0, 64.0]
    """
    if min_bytes > max_bytes:
        raise ConfigError(f"--min-bytes {min_bytes:g} is larger than --max-bytes {max_bytes:g}")
    if not math.isfinite(step_factor) or step_factor <= 1:
        raise ConfigError(f"--step-factor {step_factor!r} must be a finite number > 1")
    points = math.log(max_bytes / min_bytes) / math.log(step_factor) + 1 if min_bytes > 0 else 1
    if points > MAX_SWEEP_POINTS:
        raise ConfigError(
            f"--step-factor {step_factor!r} gives {points:.3g} sizes from {min_bytes:g} to "
            f"{max_bytes:g} B; at most {MAX_SWEEP_POINTS:,} (raise --step-factor)"
        )
    sizes, s = [], float(min_bytes)
    while s <= max_bytes * (1 + 1e-12):
        sizes.append(s)
        s *= step_factor
    return sizes
