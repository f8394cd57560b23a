"""Seeded discrete-event simulation of a checkpointed job under injected failures (SimPy).

Two processes share one SimPy clock:

* the **trainer** runs each segment (its steps' compute, then the blocking checkpoint
  write); an interruption throws it out of the segment, the work since the last completed
  checkpoint is lost, and it restarts (``R_i`` for cause ``i``); an interruption during a
  restart begins a new restart of the new cause;
* the **failure source** draws exponential inter-arrival times with the job's total rate
  and a cause with probability ``lambda_i / lambda``, and interrupts the trainer.

It checks the closed forms of :mod:`.renewal` (the tests compare the mean wall time of many
seeded runs with ``E[W]`` within a stated number of standard errors) and is the way to
extend the model where the closed forms stop (other failure laws, correlated failures).
All randomness comes from the ``numpy.random.Generator`` passed in.

>>> import numpy as np
>>> from sim.reliability.interruptions import Cause, Interruptions
>>> job = Interruptions((Cause("gpu", 1 / 3600.0, 300.0),))
>>> run = simulate_run([600.0] * 10, 30.0, job, np.random.default_rng(0))
>>> run.useful_s, run.wall_s >= 6300.0
(6000.0, True)
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Generator, Sequence
from dataclasses import asdict, dataclass
from itertools import accumulate
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from sim.errors import ConfigError
from sim.reliability.interruptions import Interruptions

if TYPE_CHECKING:  # SimPy is imported when a run is simulated: every scenario load imports
    import simpy  # this package (its config), and most never simulate a run

__all__ = ["GoodputSimulation", "SimulatedRun", "simulate_goodput", "simulate_run"]


@dataclass(frozen=True)
class SimulatedRun:
    """Where one simulated run's wall time went (s), and how many interruptions it saw."""

    wall_s: float
    useful_s: float
    checkpoint_s: float
    lost_s: float
    restart_s: float
    interruptions: int


class _Ledger:
    def __init__(self) -> None:
        self.useful = self.checkpoint = self.lost = self.restart = 0.0
        self.interruptions = 0


def _restart(
    env: simpy.Environment, job: Interruptions, cause: int, book: _Ledger
) -> Generator[Any, Any, None]:
    import simpy

    while True:
        began = env.now
        try:
            yield env.timeout(job.causes[cause].restart_s)
            book.restart += env.now - began
            return
        except simpy.Interrupt as hit:
            book.restart += env.now - began
            cause = cast(int, hit.cause)


def _trainer(
    env: simpy.Environment,
    work: Sequence[float],
    checkpoint_s: float,
    job: Interruptions,
    book: _Ledger,
) -> Generator[Any, Any, None]:
    import simpy

    for seconds in work:
        while True:
            began = env.now
            try:
                yield env.timeout(seconds)
                yield env.timeout(checkpoint_s)
            except simpy.Interrupt as hit:
                book.lost += env.now - began
                yield from _restart(env, job, cast(int, hit.cause), book)
                continue
            book.useful += seconds
            book.checkpoint += checkpoint_s
            break


def _failures(
    env: simpy.Environment,
    trainer: simpy.Process,
    job: Interruptions,
    rng: np.random.Generator,
    book: _Ledger,
) -> Generator[Any, Any, None]:
    rate = job.rate_per_s
    cumulative = list(accumulate(c.rate_per_s / rate for c in job.causes))
    while True:
        yield env.timeout(float(rng.exponential(1.0 / rate)))
        if not trainer.is_alive:
            return
        cause = min(bisect.bisect_right(cumulative, float(rng.random())), len(cumulative) - 1)
        book.interruptions += 1
        trainer.interrupt(cause)


def simulate_run(
    work_s: Sequence[float], checkpoint_s: float, job: Interruptions, rng: np.random.Generator
) -> SimulatedRun:
    """Simulate one job: segments of ``work_s`` seconds, each followed by a checkpoint.

    Parameters
    ----------
    work_s : sequence of float
        Useful compute per segment (s), e.g. :meth:`JobPlan.segment_work_s`.
    checkpoint_s : float
        Blocking checkpoint write time (s).
    job : Interruptions
        Causes, rates and restart times.
    rng : numpy.random.Generator
        The only source of randomness.
    """
    if not work_s or any(not (math.isfinite(w) and w > 0) for w in work_s):
        raise ConfigError("event simulation: every segment needs a finite work time > 0 s")
    import simpy

    env = simpy.Environment()
    book = _Ledger()
    trainer = env.process(_trainer(env, work_s, checkpoint_s, job, book))
    if job.rate_per_s > 0:
        env.process(_failures(env, trainer, job, rng, book))
    env.run(until=trainer)
    return SimulatedRun(
        env.now, book.useful, book.checkpoint, book.lost, book.restart, book.interruptions
    )


@dataclass(frozen=True)
class GoodputSimulation:
    """Sample means (and standard errors) over independent seeded runs of the same job.

    ``goodput`` is total useful time / total wall time (the ratio of the means), the
    estimator of ``useful / E[W]`` that :class:`.GoodputEstimate` reports.
    """

    runs: int
    seed: int
    mean_wall_s: float
    sem_wall_s: float
    goodput: float
    mean_breakdown_s: dict[str, float]
    sem_breakdown_s: dict[str, float]
    mean_interruptions: float
    sem_interruptions: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


def simulate_goodput(
    work_s: Sequence[float], checkpoint_s: float, job: Interruptions, *, runs: int, seed: int
) -> GoodputSimulation:
    """Run ``runs`` independent simulations with one ``numpy`` generator seeded by ``seed``.

    >>> from sim.reliability.interruptions import Interruptions
    >>> simulate_goodput([100.0], 10.0, Interruptions(()), runs=3, seed=1).goodput
    0.9090909090909091
    """
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 2:
        raise ConfigError(f"event simulation: runs must be an integer >= 2 (got {runs!r})")
    rng = np.random.default_rng(seed)
    sims = [simulate_run(work_s, checkpoint_s, job, rng) for _ in range(runs)]
    columns = ("wall_s", "useful_s", "checkpoint_s", "lost_s", "restart_s", "interruptions")
    table = np.array([[float(getattr(s, c)) for c in columns] for s in sims])
    mean = dict(zip(columns, table.mean(axis=0).tolist(), strict=True))
    sem = dict(zip(columns, (table.std(axis=0, ddof=1) / math.sqrt(runs)).tolist(), strict=True))
    parts = ("useful", "checkpoint", "lost", "restart")
    return GoodputSimulation(
        runs=runs,
        seed=seed,
        mean_wall_s=mean["wall_s"],
        sem_wall_s=sem["wall_s"],
        goodput=mean["useful_s"] / mean["wall_s"],
        mean_breakdown_s={p: mean[f"{p}_s"] for p in parts},
        sem_breakdown_s={p: sem[f"{p}_s"] for p in parts},
        mean_interruptions=mean["interruptions"],
        sem_interruptions=sem["interruptions"],
    )
