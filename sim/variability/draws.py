"""Random multipliers of one step's times: per GPU (compute) and per phase (network).

Every multiplier scales a time of the simulated ideal step: 1 is the ideal, 1.2 is 20%
slower. All draws come from the one :class:`numpy.random.Generator` passed in.

>>> import numpy as np
>>> m = jitter(np.random.default_rng(0), (4000, 8), 0.1, "gamma")
>>> round(float(m.mean()), 2), round(float(m.std() / m.mean()), 2)
(1.0, 0.1)
"""

from __future__ import annotations

import math

import numpy as np

from sim.variability.config import VariabilityConfig

__all__ = ["gpu_multipliers", "jitter", "phase_multipliers", "throttled"]


def jitter(
    rng: np.random.Generator, shape: tuple[int, ...], cv: float, distribution: str
) -> np.ndarray:
    """Mean-1 multipliers with coefficient of variation ``cv`` (dimensionless).

    Parameters
    ----------
    rng : numpy.random.Generator
        The source of randomness.
    shape : tuple of int
        Shape of the array of draws.
    cv : float
        Coefficient of variation (standard deviation over mean), >= 0.
    distribution : str
        ``normal`` (``1 + cv * Z``, clipped at 0), ``lognormal`` (``sigma^2 = ln(1 + cv^2)``,
        ``mu = -sigma^2 / 2``) or ``gamma`` (shape ``1/cv^2``, scale ``cv^2``).

    Returns
    -------
    numpy.ndarray
        Float64 multipliers; all ones when ``cv`` is 0 (no draws are taken).
    """
    if cv == 0:
        return np.ones(shape)
    if distribution == "normal":
        out = rng.standard_normal(shape)
        out *= cv
        out += 1.0
        return np.maximum(out, 0.0, out=out)
    if distribution == "lognormal":
        sigma2 = math.log1p(cv * cv)
        return rng.lognormal(-sigma2 / 2, math.sqrt(sigma2), shape)
    assert distribution == "gamma", distribution  # the config admits only these three
    return rng.gamma(1.0 / (cv * cv), cv * cv, shape)


def throttled(rng: np.random.Generator, gpus: int, config: VariabilityConfig) -> np.ndarray:
    """Per-GPU multiplier of persistent throttling: ``round(throttle_fraction * gpus)`` GPUs,
    drawn once, run ``1 + throttle_clock_drop`` times slower; the others at 1.

    >>> throttled(np.random.default_rng(0), 4, VariabilityConfig(throttle_fraction=0.5)).tolist()
    [1.0, 1.0, 1.1, 1.1]
    """
    out = np.ones(gpus)
    count = math.floor(config.throttle_fraction * gpus + 0.5)
    if count and config.throttle_clock_drop > 0:
        out[rng.choice(gpus, size=count, replace=False)] = 1.0 + config.throttle_clock_drop
    return out


def gpu_multipliers(
    rng: np.random.Generator, samples: int, throttle: np.ndarray, config: VariabilityConfig
) -> tuple[np.ndarray, np.ndarray]:
    """Compute-time multipliers of every GPU in ``samples`` steps, and which steps straggled.

    Parameters
    ----------
    rng : numpy.random.Generator
        The source of randomness.
    samples : int
        Number of steps (rows).
    throttle : numpy.ndarray
        Per-GPU persistent multiplier from :func:`throttled` (its length is the GPU count).
    config : VariabilityConfig
        The section.

    Returns
    -------
    multipliers : numpy.ndarray
        Shape ``(samples, gpus)``: jitter x straggler x throttle.
    straggled : numpy.ndarray
        Shape ``(samples,)``, bool: whether at least one GPU straggled in that step.
    """
    shape = (samples, throttle.size)
    out = jitter(rng, shape, config.compute_cv, config.distribution)
    out *= throttle
    p = config.straggler_probability
    if p == 0:
        return out, np.zeros(samples, dtype=bool)
    slow = rng.random(shape) < p
    if config.straggler_slowdown != 1:
        out[slow] *= config.straggler_slowdown
    straggled = np.any(slow, axis=1)
    return out, straggled


def phase_multipliers(
    rng: np.random.Generator, shape: tuple[int, ...], config: VariabilityConfig
) -> np.ndarray:
    """Lognormal multipliers of an exposed communication phase's time (network tail).

    Mean 1 with ``network_cv``; median 1 with ``network_p99_p50``; ones without either.
    """
    mu, sigma = config.network_lognormal()
    if sigma == 0:
        return np.ones(shape)
    return rng.lognormal(mu, sigma, shape)
