"""The whole training run from one simulated step: time, failures, prices, spot and energy.

DESIGN.md, "Beyond the ideal step": these are layers over a :class:`StepResult`. Given the
step and the scenario's opt-in sections (``training.tokens``, ``reliability``, ``spot``,
``price``, ``energy``), :func:`whole_run` calls the library functions of
:mod:`sim.reliability` and :mod:`sim.cost` with the step's numbers and keeps what they
return, unchanged:

* ``training_run`` - steps, failure-free and expected wall time (lost work, checkpoints and
  restarts included when ``reliability`` is given), GPU-hours, cost at the chosen price
  (:func:`sim.cost.training_cost`);
* ``reliability`` - MTBI, checkpoint size and write time, the Young, Daly, exact and chosen
  intervals, goodput, expected breakdown (:func:`sim.reliability.goodput_estimate`), and with
  ``reliability.simulate_runs: N`` the seeded event simulation's means and standard errors
  (:func:`sim.reliability.simulate_goodput`, seed = the scenario's ``seed``);
* ``prices`` - the cost to train at every shipped price preset for the step's GPU, and at
  the chosen price (``price.preset`` or ``price.gpu_hour_usd``);
* ``spot`` - spot against on-demand (:func:`sim.reliability.spot_comparison`);
* ``energy`` - kWh and CO2e (:func:`sim.cost.training_energy`).

Approximations (also in each part's ``notes``): the GPU's busy fraction for the power model
is the compute share of the simulated step's breakdown; without ``training.tokens`` the
reliability figures are steady state and energy covers one step.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from sim.budget import check_estimate, estimate_events
from sim.cost import (
    EnergyEstimate,
    PriceConfig,
    PriceQuote,
    TrainingCost,
    cost_usd,
    price_preset,
    price_preset_names,
    resolve_price,
    training_cost,
    training_energy,
)
from sim.errors import ConfigError
from sim.reliability import (
    GoodputEstimate,
    GoodputSimulation,
    ReliabilityConfig,
    SpotComparison,
    goodput_estimate,
    job_plan,
    simulate_goodput,
    spot_comparison,
)
from sim.result import StepResult, flat_record

__all__ = ["PriceRow", "PriceTable", "WholeRun", "has_run_sections", "whole_run"]


@dataclass(frozen=True)
class PriceRow:
    """The cost to train at one price (USD; ``preset`` None for a flat ``gpu_hour_usd``)."""

    preset: str | None
    gpu: str | None
    kind: str
    usd_per_gpu_hour: float
    as_of: str
    source: str
    cost_usd: float


@dataclass(frozen=True)
class PriceTable:
    """Cost to train on ``gpus`` GPUs for ``wall_time_s`` at every preset for ``gpu``.

    ``cost_usd = gpus * wall_time_s / 3600 * usd_per_gpu_hour`` in every row
    (:func:`sim.cost.cost_usd`); ``chosen`` is the scenario's price, when it sets one.
    """

    gpu: str
    gpus: int
    wall_time_s: float
    presets: dict[str, PriceRow]
    chosen: PriceRow | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True)
class WholeRun:
    """The layers over one step; a part is None when its section is absent."""

    training_run: TrainingCost | None
    reliability: GoodputEstimate | None
    simulation: GoodputSimulation | None
    prices: PriceTable | None
    spot: SpotComparison | None
    energy: EnergyEstimate | None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The present parts under stable keys: ``training_run``, ``reliability`` (with
        ``simulation`` inside when run), ``prices``, ``spot``, ``energy``."""
        out: dict[str, Any] = {}
        for key in ("training_run", "reliability", "prices", "spot", "energy"):
            part = getattr(self, key)
            if part is not None:
                out[key] = part.to_dict()
        if self.simulation is not None:
            out["reliability"]["simulation"] = self.simulation.to_dict()
        return out

    def to_record(self) -> dict[str, Any]:
        """:meth:`to_dict` flattened to dotted columns (``prices.presets.aws-p5.cost_usd``)."""
        return flat_record(self.to_dict())


def has_run_sections(scenario: Any) -> bool:
    """Whether ``scenario`` asks for any layer over the step (``training.tokens``,
    ``reliability``, ``spot`` or ``energy``)."""
    return scenario.training.tokens is not None or any(
        getattr(scenario, k, None) is not None for k in ("reliability", "spot", "energy")
    )


def _params(model: Any) -> float:
    from sim.workload.models import ModelSpec, param_count

    return float(param_count(model) if isinstance(model, ModelSpec) else model.params)


def _row(quote: PriceQuote, gpus: int, wall_s: float) -> PriceRow:
    usd = quote.usd_per_gpu_hour
    return PriceRow(quote.preset, quote.gpu, quote.kind, usd, quote.as_of, quote.source,
                    cost_usd(wall_s, gpus, usd))  # fmt: skip


def price_table(gpu: str, gpus: int, wall_time_s: float, chosen: PriceQuote | None) -> PriceTable:
    """Cost to train for ``wall_time_s`` (s) on ``gpus`` GPUs at every shipped preset for
    ``gpu`` (sorted by name) and at ``chosen``.

    >>> t = price_table("H100-SXM", 8, 3600.0, None)
    >>> t.presets["lambda-h100"].cost_usd == 8 * 1.0 * 19.92 / 8
    True
    """
    rows = {}
    for name in price_preset_names():
        if price_preset(name).gpu == gpu:
            quote = resolve_price(PriceConfig(preset=name), gpu)
            assert quote is not None  # a preset always resolves
            rows[name] = _row(quote, gpus, wall_time_s)
    picked = None if chosen is None else _row(chosen, gpus, wall_time_s)
    return PriceTable(gpu, gpus, wall_time_s, rows, picked)


def _simulate(est: GoodputEstimate, rel: ReliabilityConfig, step_s: float, gpn: int,
              seed: int) -> GoodputSimulation:  # fmt: skip
    if est.steps is None:
        raise ConfigError(
            "reliability.simulate_runs: needs training.tokens (the simulation runs the whole job)"
        )
    assert rel.simulate_runs is not None
    job = rel.job(est.gpus, gpn)
    plan = job_plan(job, step_time_s=step_s, checkpoint_s=est.checkpoint_write_s,
                    steps=est.steps, policy=rel.interval)  # fmt: skip
    segments = -(-est.steps // plan.interval_steps)  # before the segments are listed
    expected = plan.expected_interruptions  # the closed form's, before any is simulated
    check_estimate(estimate_events(segments, rel.simulate_runs, expected or 0.0))
    return simulate_goodput(plan.segment_work_s(), est.checkpoint_write_s, job,
                            runs=rel.simulate_runs, seed=seed)  # fmt: skip


def _energy(scenario: Any, step: StepResult, est: GoodputEstimate | None,
            train: TrainingCost | None, fabric_w_per_gpu: float | None) -> EnergyEstimate:  # fmt: skip
    util = step.breakdown.get("compute", 0.0) / step.step_time_s
    notes = [f"GPU busy fraction {util:.3f} = compute share of the simulated step; "
             "communication-only and bubble time count at idle power"]  # fmt: skip
    if est is not None and est.busy_time_s is not None and est.idle_time_s is not None:
        busy, idle = est.busy_time_s, est.idle_time_s
    elif train is not None:
        busy, idle = train.wall_time_s, 0.0
    else:
        busy, idle = step.step_time_s, 0.0
        notes.append("no training.tokens: energy of one step")
    e = training_energy(gpus=step.gpus, gpu=step.gpu, busy_time_s=busy, idle_time_s=idle,
                        utilisation=util, config=scenario.energy,
                        fabric_w_per_gpu=fabric_w_per_gpu)  # fmt: skip
    return replace(e, notes=[*e.notes, *notes])


def whole_run(
    step: StepResult, scenario: Any, gpus_per_node: int, fabric_w_per_gpu: float | None = None
) -> WholeRun:
    """Run every layer the scenario asks for over ``step`` (see the module docstring).

    Parameters
    ----------
    step : StepResult
        The simulated step (its ``step_time_s``, ``gpus``, ``gpu`` and breakdown are used).
    scenario : Scenario or LayerScenario
        The validated scenario (``training``, ``price``, ``reliability``, ``spot``,
        ``energy``, ``model`` for the checkpoint size, ``seed`` for the event simulation).
    gpus_per_node : int
        GPUs per server (failures and preemptions strike whole servers).
    fabric_w_per_gpu : float, optional
        The fabric's switches, NICs and optics per GPU (W), counted in the energy unless
        ``energy.network_w_per_gpu`` is given.

    Raises
    ------
    ConfigError
        ``reliability.simulate_runs`` without ``training.tokens``; bad inputs the library
        functions refuse.

    Examples
    --------
    >>> from sim.scenario.load import load_scenario
    >>> from sim.training.step import simulate_step
    >>> sc = load_scenario("gpt2-1gpu", ["training.tokens=1e9"])
    >>> run = whole_run(simulate_step(sc), sc, gpus_per_node=1)
    >>> run.training_run.steps, sorted(run.to_dict())
    (15259, ['prices', 'training_run'])
    """
    tr, rel = scenario.training, scenario.reliability
    tokens, per_step = tr.tokens, float(tr.global_batch * tr.seq_len)
    quote = resolve_price(PriceConfig(gpu_hour_usd=scenario.price.gpu_hour_usd,
                                      preset=scenario.price.preset), step.gpu)  # fmt: skip
    usd = None if quote is None else quote.usd_per_gpu_hour
    job = {"step_time_s": step.step_time_s, "gpus": step.gpus, "gpus_per_node": gpus_per_node,
           "params": _params(scenario.model)}  # fmt: skip
    budget = {"tokens": tokens, "tokens_per_step": per_step}
    est = sim = None
    if rel is not None:
        est = goodput_estimate(config=rel, usd_per_gpu_hour=usd, **job, **budget)  # type: ignore[arg-type]
        if rel.simulate_runs is not None:
            sim = _simulate(est, rel, step.step_time_s, gpus_per_node, scenario.seed)
    train = table = None
    if tokens is not None:
        wall = None if est is None else est.expected_wall_time_s
        train = training_cost(tokens=tokens, tokens_per_step=per_step, step_time_s=step.step_time_s,
                              gpus=step.gpus, usd_per_gpu_hour=usd, wall_time_s=wall)  # fmt: skip
        table = price_table(step.gpu, step.gpus, train.wall_time_s, quote)
    spot = None
    if scenario.spot is not None:
        spot = spot_comparison(reliability=rel, spot=scenario.spot, usd_per_gpu_hour=usd,
                               **job, **budget)  # type: ignore[arg-type]  # fmt: skip
    energy = (None if scenario.energy is None
              else _energy(scenario, step, est, train, fabric_w_per_gpu))  # fmt: skip
    notes = [] if quote is None else list(quote.notes)
    if tokens is not None and tr.seq_len == 1:
        notes.append("training.tokens counts samples here (one token per sample)")
    return WholeRun(train, est, sim, table, spot, energy, notes)
