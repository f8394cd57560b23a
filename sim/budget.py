"""What a run will cost before it starts: wall time and peak memory, and the limits.

Every entry point asks this module before any work whose size the input decides (the
simulated GPUs, transfers, micro-batches, collective sizes, sweep points, samples):
a run whose estimate exceeds the limits is refused up front, in one line giving the
estimate, the limit and what would make it fit (``--network analytical``, fewer
nodes), instead of running for an hour or until the machine runs out of memory.

The limits
    :func:`time_limit_s`: ``CLUSTERSIM_TIME_LIMIT`` (seconds; ``0`` or ``none``: no
    limit), else :data:`DEFAULT_TIME_LIMIT_S`. :func:`memory_limit_bytes`:
    ``CLUSTERSIM_MEMORY_LIMIT`` (bytes, ``16GiB``...), else the smallest of the
    process's address-space limit (``ulimit -v``) and :data:`MEMORY_SHARE` of the
    machine's physical memory.

Caps that do not depend on the machine (:data:`MAX_SWEEP_POINTS`...) are fixed, so the
same input is refused everywhere.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from sim.errors import ConfigError

__all__ = [
    "DEFAULT_TIME_LIMIT_S",
    "MAX_SWEEP_POINTS",
    "MEMORY_SHARE",
    "SWEEP_ROW_BYTES",
    "Estimate",
    "check_estimate",
    "check_sweep_points",
    "memory_limit_bytes",
    "time_limit_s",
]

#: Wall-time limit of one run when ``CLUSTERSIM_TIME_LIMIT`` is not set (seconds): the
#: slowest shipped example (Llama-2-70B ZeRO-3 on 256 GPUs, flow network) takes ~2 min.
DEFAULT_TIME_LIMIT_S = 600.0
#: Share of the machine's physical memory one run may plan to use.
MEMORY_SHARE = 0.8
#: Most points of one sweep. Each finished row is kept until the file is rewritten in
#: point order (about 1 KB in memory, measured 0.5-1 KB); the fastest points take
#: ~0.03 s (analytical network), most 0.1-60 s: 100,000 points are an hour to months of
#: simulation on one core. Split a bigger study into several sweeps.
MAX_SWEEP_POINTS = 100_000
#: Memory one sweep row holds until the sweep ends (bytes, rounded up from ~1 KB).
SWEEP_ROW_BYTES = 2048


@dataclass(frozen=True)
class Estimate:
    """A run's predicted cost.

    Attributes
    ----------
    what : str
        The run, for messages (``"a step on 80,000 GPUs (flow network)"``).
    time_s : float
        Predicted wall time (s) on one core of a typical machine.
    memory_bytes : float
        Predicted peak resident memory (bytes).
    suggestion : str
        What would make it cheaper, for the refusal (``"--network analytical"``).
    """

    what: str
    time_s: float
    memory_bytes: float
    suggestion: str = ""


def _env_limit(name: str, parse: Callable[[object, str], float], example: str) -> float | None:
    """The limit in the environment variable ``name`` (None: unset; inf: ``0``/``none``)."""
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    if text.lower() in ("0", "none", "off", "inf"):
        return float("inf")
    try:
        return parse(text, name)
    except ConfigError:
        raise ConfigError(f"{name}={text!r}: expected e.g. {example}, or none") from None


def _seconds_of(text: object, what: str) -> float:
    from sim.units import parse_time

    try:
        value = float(str(text))
    except ValueError:
        return parse_time(text, what)
    return parse_time(value, what)


def time_limit_s() -> float:
    """The wall-time limit of one run (s); ``inf`` when switched off."""
    env = _env_limit("CLUSTERSIM_TIME_LIMIT", _seconds_of, "600 (seconds) or 600s")
    return DEFAULT_TIME_LIMIT_S if env is None else env


def _physical_memory() -> float:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return float("inf")


def memory_limit_bytes() -> float:
    """The peak-memory limit of one run (bytes); ``inf`` when switched off."""
    from sim.units import parse_bytes

    env = _env_limit("CLUSTERSIM_MEMORY_LIMIT", parse_bytes, "16GiB")
    if env is not None:
        return env
    limit = MEMORY_SHARE * _physical_memory()
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            limit = min(limit, float(soft))
    except (ImportError, ValueError, OSError):  # pragma: no cover - not POSIX
        pass
    return limit


def _seconds(t: float) -> str:
    if t < 120:
        return f"{t:.0f} s"
    if t < 7200:
        return f"{t / 60:.0f} min"
    if t < 2 * 86400:
        return f"{t / 3600:.1f} h"
    return f"{t / 86400:,.0f} days"


def _bytes(b: float) -> str:
    from sim.units import format_bytes

    return format_bytes(b)


def check_estimate(est: Estimate) -> Estimate:
    """Refuse ``est`` when it exceeds :func:`time_limit_s` or :func:`memory_limit_bytes`.

    Returns
    -------
    Estimate
        ``est``, when it fits.

    Raises
    ------
    ConfigError
        One line: the run, its estimate, the limit it exceeds and the suggestion.
    """
    t_limit, m_limit = time_limit_s(), memory_limit_bytes()
    over_t, over_m = est.time_s > t_limit, est.memory_bytes > m_limit
    if not (over_t or over_m):
        return est
    if over_t:
        limit = f"the time limit is {_seconds(t_limit)} (CLUSTERSIM_TIME_LIMIT)"
    else:
        limit = f"the memory limit is {_bytes(m_limit)} (CLUSTERSIM_MEMORY_LIMIT)"
    hint = f"; {est.suggestion}" if est.suggestion else ""
    raise ConfigError(
        f"{est.what} would take about {_seconds(est.time_s)} and {_bytes(est.memory_bytes)}; "
        f"{limit}{hint}, or raise the limit"
    )


def check_sweep_points(points: int) -> None:
    """Refuse a sweep of more than :data:`MAX_SWEEP_POINTS` points before listing any.

    >>> check_sweep_points(10**6)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    sim.errors.ConfigError: sweep: 1,000,000 points; at most 100,000 in one sweep (...
    """
    if points > MAX_SWEEP_POINTS:
        raise ConfigError(
            f"sweep: {points:,} points; at most {MAX_SWEEP_POINTS:,} in one sweep (each row "
            f"is kept until the end, ~{SWEEP_ROW_BYTES // 1024} KiB, and takes 0.03 s to "
            "minutes to simulate); split the grid into several sweeps"
        )
