"""What interrupts a synchronous training job, and how often: Poisson causes with restart times.

A synchronous data/tensor/pipeline-parallel job stops whenever any of its GPUs, hosts or
links fails (the Llama 3 paper: "a single GPU failure may require a restart of the entire
job"). With independent exponential lifetimes the job sees a Poisson stream of
interruptions whose rate is the sum of its components' rates:

    lambda = N_gpu * (r_gpu + r_link) + N_node * (r_node + r_software)       (1/s)

and the job's mean time between interruptions is ``M = 1 / lambda``. Per-component rates
come from published observations (``failures.yaml``: counts by cause over GPUs x days).

>>> rates = failure_preset("llama3-405b-h100")
>>> job = job_interruptions(rates, gpus=16384, gpus_per_node=8, restart_s=600.0)
>>> round(job.mtbi_s / 3600, 3)   # 54 days * 24 h / 419 interruptions
3.093
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from sim.errors import ConfigError
from sim.packaged import lookup, read_table

__all__ = [
    "CATEGORIES",
    "Cause",
    "FailureRates",
    "Interruptions",
    "failure_preset",
    "failure_preset_names",
    "job_interruptions",
]

#: Failure categories; ``gpu`` and ``link`` scale with GPUs, ``node`` and ``software`` with nodes.
CATEGORIES = ("gpu", "link", "node", "software")
_PER_GPU = ("gpu", "link")
_HOUR_S = 3600.0


@dataclass(frozen=True)
class FailureRates:
    """Per-component failure rates (1/s): per GPU for gpu and link, per node for node and software.

    Attributes
    ----------
    per_s : dict[str, float]
        Category (:data:`CATEGORIES`) -> rate of one component in failures per second.
    source : str
        Where the rates come from.
    """

    per_s: dict[str, float]
    source: str

    def mtbf_h(self, category: str) -> float:
        """Mean time between failures of one component of ``category``, in hours (inf if 0)."""
        rate = self.per_s[category]
        return math.inf if rate == 0 else 1.0 / (rate * _HOUR_S)

    def with_mtbf_h(self, overrides: Mapping[str, float]) -> FailureRates:
        """A copy with some categories set from an MTBF in hours (``inf`` = never fails)."""
        per_s = dict(self.per_s)
        for category, mtbf_h in overrides.items():
            if category not in CATEGORIES:
                raise ConfigError(
                    f"failure category {category!r}; allowed: {', '.join(CATEGORIES)}"
                )
            per_s[category] = 0.0 if math.isinf(mtbf_h) else 1.0 / (mtbf_h * _HOUR_S)
        return FailureRates(per_s, self.source + " (with user overrides)")


@dataclass(frozen=True)
class Cause:
    """One Poisson source of interruptions of the whole job.

    Attributes
    ----------
    name : str
        e.g. ``"gpu"``, ``"preemption"``.
    rate_per_s : float
        Interruptions of the job per second from this cause.
    restart_s : float
        Wall time from such an interruption until training resumes (detect, replace or
        reacquire nodes, relaunch, load the last checkpoint).
    """

    name: str
    rate_per_s: float
    restart_s: float


@dataclass(frozen=True)
class Interruptions:
    """The job's interruption process: independent Poisson causes, each with its restart time."""

    causes: tuple[Cause, ...]

    @property
    def rate_per_s(self) -> float:
        """Total interruption rate ``lambda`` (1/s)."""
        return math.fsum(c.rate_per_s for c in self.causes)

    @property
    def mtbi_s(self) -> float:
        """Mean time between interruptions ``M = 1/lambda`` (s); inf when nothing fails."""
        rate = self.rate_per_s
        return math.inf if rate == 0 else 1.0 / rate

    def restart_survival(self) -> float:
        """``q = sum_i p_i exp(-lambda R_i)``: chance that a restart finishes uninterrupted.

        ``p_i = lambda_i / lambda`` is the share of cause ``i``; a restart of type ``i`` lasts
        ``R_i`` and is itself exposed to the whole stream of interruptions (1.0 if none).
        """
        rate = self.rate_per_s
        if rate == 0:
            return 1.0
        return math.fsum(c.rate_per_s / rate * math.exp(-rate * c.restart_s) for c in self.causes)

    def plus(self, cause: Cause) -> Interruptions:
        """These causes and one more (e.g. spot preemptions)."""
        return Interruptions((*self.causes, cause))


def failure_preset_names() -> list[str]:
    """Names of the shipped failure-rate presets.

    >>> "llama3-405b-h100" in failure_preset_names()
    True
    """
    return sorted(read_table("sim.reliability", "failures.yaml"))


def failure_preset(name: str) -> FailureRates:
    """Per-component rates derived from a published observation in ``failures.yaml``.

    ``gpu`` and ``link`` counts are divided by GPU-hours, ``node`` and ``software`` counts by
    node-hours of the observed run.

    Raises
    ------
    ConfigError
        Unknown preset (the message lists the known ones).

    Examples
    --------
    >>> round(failure_preset("llama3-405b-h100").mtbf_h("gpu"))  # 16384 * 1296 h / 268
    79230
    """
    entry = lookup(read_table("sim.reliability", "failures.yaml"), name, "reliability.failures")
    hours = float(entry["days"]) * 24.0
    gpu_hours = float(entry["gpus"]) * hours
    node_hours = gpu_hours / float(entry["gpus_per_node"])
    counts = entry["interruptions"]
    per_s = {
        c: float(counts[c]) / ((gpu_hours if c in _PER_GPU else node_hours) * _HOUR_S)
        for c in CATEGORIES
    }
    return FailureRates(per_s, " ".join(str(entry["source"]).split()))


def job_interruptions(
    rates: FailureRates, gpus: int, gpus_per_node: int, restart_s: float
) -> Interruptions:
    """The interruption process of a job on ``gpus`` GPUs (``gpus_per_node`` per node).

    Parameters
    ----------
    rates : FailureRates
        Per-component rates.
    gpus, gpus_per_node : int
        Job size; nodes = ceil(gpus / gpus_per_node).
    restart_s : float
        Restart time after any of these failures (s).

    Returns
    -------
    Interruptions
        One :class:`Cause` per category with ``lambda_c = count_c * r_c``.
    """
    if gpus < 1 or gpus_per_node < 1:
        raise ConfigError(
            f"job size: gpus and gpus_per_node must be >= 1 (got {gpus}, {gpus_per_node})"
        )
    nodes = math.ceil(gpus / gpus_per_node)
    return Interruptions(
        tuple(
            Cause(c, rates.per_s[c] * (gpus if c in _PER_GPU else nodes), restart_s)
            for c in CATEGORIES
        )
    )
