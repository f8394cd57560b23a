"""Answers side by side: several scenarios or ``--set`` variants, with the fabric's cost.

A study above the simulator (DESIGN.md, "Studies"): each run is a scenario in and a
:class:`~sim.StepResult` out, the way ``clustersim run`` makes it (:func:`simulate`), then
the layers over it: the fabric's bill of materials and cost per GPU-hour
(:mod:`sim.cost.fabric`), the cost per step and per million tokens with it next to the
GPU price, the energy with the fabric's power, the time and cost to train when the
scenario has ``training.tokens``. The first run is the baseline; every other run gets its
deltas in percent.

A record is the run's :meth:`~sim.StepResult.to_dict` (so ``clustersim report`` reads a
list of them as run results) plus ``label``, ``profile``, the fabric
(``fabric_capex_usd``, ``fabric_power_w``, ``fabric_per_gpu_hour_usd``), the costs
(``gpu_hour_usd``, ``gpu_cost_per_step_usd``, ``fabric_cost_per_step_usd``,
``cost_per_step_usd`` with the fabric, ``cost_per_million_tokens_usd`` likewise),
``energy_per_step_kwh``, ``train`` (steps, days, cost, energy; None without tokens) and
``delta_pct`` (per metric, against the baseline).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sim.errors import ConfigError

__all__ = ["DELTA_KEYS", "Variant", "compare", "parse_variant", "simulate"]

DELTA_KEYS = (
    "step_time_s",
    "tokens_per_s",
    "mfu",
    "memory_per_gpu_bytes",
    "cost_per_step_usd",
    "cost_per_million_tokens_usd",
    "fabric_capex_usd",
    "fabric_power_w",
    "energy_per_step_kwh",
)
"""Metrics whose change against the baseline each record gives in percent."""


@dataclass(frozen=True)
class Variant:
    """A run: ``scenario`` (preset or file) with ``sets`` (``key=value``), shown as ``label``."""

    label: str
    scenario: str
    sets: tuple[str, ...] = ()


def parse_variant(text: str) -> tuple[str | None, tuple[str, ...]]:
    """``"LABEL: k=v k=v"`` (label optional) as (label, sets).

    >>> parse_variant("roce 2:1: cluster.topology=h100-roce-400g-2to1 parallel.zero=3")
    ('roce 2:1', ('cluster.topology=h100-roce-400g-2to1', 'parallel.zero=3'))
    >>> parse_variant("parallel.zero=3")
    (None, ('parallel.zero=3',))
    """
    head, sep, tail = text.rpartition(": ")
    label = head.strip() if sep and "=" not in head else None
    body = tail if label is not None else text
    try:
        sets = tuple(shlex.split(body))
    except ValueError as e:
        raise ConfigError(f"--variant {text!r}: {e}") from None
    bad = [s for s in sets if "=" not in s]
    if not sets or bad:
        raise ConfigError(
            f"--variant {text!r}: write 'LABEL: key=value key=value' (got {bad[0] if bad else 'nothing'!r})"
        )
    return label, sets


def _chosen(sets: Sequence[str], profile: str | None, force: bool) -> list[str]:
    """A run's ``--set`` overrides with ``profile`` and ``force`` as scenario keys."""
    chosen = [*sets, *([f"profile={profile}"] if profile is not None else [])]
    return chosen + (["force_profile=true"] if force else [])


def simulate(
    scenario: str, sets: Sequence[str], network: str | None, profile: str | None, force: bool,
    record: bool = False,
) -> tuple[Any, Any, Any, dict[str, Any] | None]:  # fmt: skip
    """One run as ``clustersim run`` makes it: (scenario, result, topology, profile facts),
    through the simulator's one resolution path (:func:`sim.training.setup.prepare_step`):
    ``profile`` and ``force`` mean the scenario keys ``profile`` and ``force_profile``."""
    from sim.scenario.layer_list import LayerScenario, load_any_scenario
    from sim.training.layers import simulate_layer_step
    from sim.training.setup import cached_topology
    from sim.training.step import run_step

    sc = load_any_scenario(scenario, _chosen(sets, profile, force))
    topo = cached_topology(sc.cluster.topology, sc.cluster.nodes, sc.seed)
    if isinstance(sc, LayerScenario):
        result = simulate_layer_step(sc, network)
        return sc, result, topo, result.profile
    result, _, setup = run_step(sc, network, record=record, whole=False)
    return sc, result, setup.topology, result.profile


def _check_budget(
    runs: Sequence[Variant], network: str | None, profile: str | None, force: bool
) -> None:
    """Refuse the comparison before any run when its steps' estimates, added up
    (:func:`sim.budget.estimate_steps`), exceed the limits; a scenario that does not load
    is refused here too, named by its run's label."""
    from sim.budget import check_estimate, estimate_step, estimate_steps
    from sim.errors import ClusterSimError
    from sim.scenario.layer_list import load_any_scenario

    steps = []
    for v in runs:
        try:
            sc = load_any_scenario(v.scenario, _chosen(v.sets, profile, force))
            steps.append(estimate_step(sc, network))
        except ClusterSimError as e:
            raise _labelled(v, e) from None
    check_estimate(estimate_steps(steps, f"compare of {len(runs)} runs"))


def _labelled(run: Variant, err: Exception) -> Exception:
    """``err`` with its run's label first, unless the label is the run's scenario and the
    message names it already (a scenario file's path: ``x.yaml: scenario file not found:
    x.yaml`` said it twice); a variant's own label is always put first."""
    text = str(err)
    named = run.label == run.scenario and run.scenario in text
    return type(err)(text if named else f"{run.label}: {text}")


def _energy_kwh(sc: Any, result: Any, busy_s: float, fabric_w: float | None) -> float:
    from sim.cost import EnergyConfig, training_energy

    cfg = getattr(sc, "energy", None) or EnergyConfig()
    util = result.breakdown.get("compute", 0.0) / result.step_time_s
    e = training_energy(gpus=result.gpus, gpu=result.gpu, busy_time_s=busy_s, utilisation=util,
                        config=cfg, fabric_w_per_gpu=fabric_w)  # fmt: skip
    return float(e.facility_energy_kwh)


def _gpu_price(sc: Any, gpu: str) -> float | None:
    from sim.cost import PriceConfig, resolve_price

    price = getattr(sc, "price", None)
    if price is None:
        return None
    quote = resolve_price(PriceConfig(gpu_hour_usd=price.gpu_hour_usd, preset=price.preset), gpu)
    return None if quote is None else quote.usd_per_gpu_hour


def _record(v: Variant, sc: Any, result: Any, topo: Any, info: dict[str, Any] | None,
            catalog: Any, lifetime_years: float) -> dict[str, Any]:  # fmt: skip
    from sim.cost import steps_for_tokens
    from sim.cost.fabric import fabric_record
    from sim.topology.presets import nodes_override_note

    tr = sc.training
    per_step_tokens = float(tr.global_batch * tr.seq_len)
    usd = _gpu_price(sc, result.gpu)
    fab = None
    if topo is not None:
        fab = fabric_record(topo, step_time_s=result.step_time_s, gpus=result.gpus,
                            tokens_per_step=per_step_tokens, gpu_hour_usd=usd, catalog=catalog,
                            lifetime_years=lifetime_years)  # fmt: skip
    step = fab["step"] if fab else None
    fabric_w = fab["power_per_gpu_w"] if fab else None
    rec = result.to_dict()
    notes = list(rec["notes"])
    override = nodes_override_note(sc.cluster.topology, sc.cluster.nodes)
    if override is not None:
        notes.append(override)
    gpu_step = None if usd is None else result.gpus * result.step_time_s / 3600 * usd
    per_step = step["per_step_usd"] if step else gpu_step
    per_m = None if per_step is None else per_step / per_step_tokens * 1e6
    rec.update(
        label=v.label, sets=list(v.sets), notes=notes, profile=info, gpu_hour_usd=usd,
        fabric_capex_usd=fab["capex_usd"] if fab else 0.0,
        fabric_power_w=fab["power_w"] if fab else 0.0,
        fabric_per_gpu_hour_usd=fab["cost"]["per_gpu_hour_usd"] if fab else 0.0,
        fabric_lifetime_years=lifetime_years,
        gpu_cost_per_step_usd=gpu_step,
        fabric_cost_per_step_usd=step["fabric_per_step_usd"] if step else 0.0,
        cost_per_step_usd=per_step, cost_per_million_tokens_usd=per_m,
        energy_per_step_kwh=_energy_kwh(sc, result, result.step_time_s, fabric_w),
    )  # fmt: skip
    rec["train"] = None
    if tr.tokens is not None:
        steps = steps_for_tokens(tr.tokens, per_step_tokens)
        wall = steps * result.step_time_s
        rec["train"] = {
            "tokens": float(tr.tokens), "steps": steps, "days": wall / 86400.0,
            "cost_usd": None if per_step is None else steps * per_step,
            "fabric_cost_usd": steps * rec["fabric_cost_per_step_usd"],
            "energy_mwh": _energy_kwh(sc, result, wall, fabric_w) / 1000.0,
        }  # fmt: skip
    return rec


def _deltas(records: list[dict[str, Any]]) -> None:
    base = records[0]
    for rec in records:
        d: dict[str, float | None] = {}
        for k in DELTA_KEYS:
            a, b = base.get(k), rec.get(k)
            ok = isinstance(a, (int, float)) and isinstance(b, (int, float)) and a
            d[k] = 100.0 * (b / a - 1.0) if ok else None  # type: ignore[operator]
        rec["delta_pct"] = d


def compare(
    runs: Sequence[Variant],
    *,
    network: str | None = None,
    profile: str | None = None,
    force_profile: bool = False,
    parts: str | None = None,
    lifetime_years: float | None = None,
    progress: Any = None,
) -> list[dict[str, Any]]:
    """Simulate every run and return its record (see the module docstring), baseline first.

    Parameters
    ----------
    runs : sequence of Variant
        At least two; the first is the baseline.
    network : str, optional
        ``flow`` or ``analytical`` for every run (default: each scenario's).
    profile : str, optional
        Profile for every run (``none``: the shipped defaults, like for like across
        fabrics); default: each run's, chosen by hardware as ``clustersim run`` does.
    force_profile : bool
        Use ``profile`` even on other hardware.
    parts : str, optional
        The user's parts catalog (prices, watts) for the fabrics.
    lifetime_years : float, optional
        Years the fabric's capex is spread over (default 5).
    progress : callable, optional
        Called with ``(index, label)`` before each run.

    Raises
    ------
    ConfigError
        Fewer than two runs, or a run the simulator refuses (its message, with the label).
    """
    from sim.cost.fabric import DEFAULT_LIFETIME_YEARS
    from sim.errors import ClusterSimError
    from sim.topology.parts import parts_catalog

    if len(runs) < 2:
        raise ConfigError(
            "compare: give two or more scenarios, or one with --variant twice or more"
        )
    catalog = parts_catalog(parts)
    _check_budget(runs, network, profile, force_profile)
    years = DEFAULT_LIFETIME_YEARS if lifetime_years is None else lifetime_years
    out = []
    for i, v in enumerate(runs):
        if progress is not None:
            progress(i, v.label)
        try:
            sc, result, topo, info = simulate(v.scenario, v.sets, network, profile, force_profile)
            out.append(_record(v, sc, result, topo, info, catalog, years))
        except ClusterSimError as e:
            raise _labelled(v, e) from None
    _deltas(out)
    return out
