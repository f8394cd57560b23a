"""The whole run as a compact text block, printed by ``clustersim run`` after the step summary.

>>> duration(90.0), duration(7200.0), duration(86400.0 * 3)
('90.0 s', '2.00 h', '3.00 d')
>>> usd(52_000_000.0), usd(1234.5), usd(12.0)
('$52.0M', '$1.23k', '$12.00')
>>> scaled(26.4e6, "Wh", 1e3), scaled(540.0, "W")
('26.40 GWh', '540.00 W')
"""

from __future__ import annotations

from sim.beyond.whole_run import PriceRow, PriceTable, WholeRun
from sim.cost import EnergyEstimate, TrainingCost
from sim.reliability import GoodputEstimate, GoodputSimulation, SpotComparison

__all__ = ["duration", "scaled", "usd", "whole_run_text"]

_DAY = 86400.0
_SOURCE_CHARS = 44


def duration(seconds: float) -> str:
    """Seconds as ``s``, ``h`` or ``d``, whichever reads best."""
    if seconds < 3600.0:
        return f"{seconds:.1f} s"
    if seconds < 2 * _DAY:
        return f"{seconds / 3600.0:.2f} h"
    return f"{seconds / _DAY:.2f} d"


def usd(amount: float) -> str:
    """USD with a k/M/B suffix."""
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(amount) >= scale:
            return f"${amount / scale:.{1 if scale >= 1e6 else 2}f}{suffix}"
    return f"${amount:.2f}"


def scaled(value: float, unit: str, base: float = 1.0) -> str:
    """``value * base`` in ``unit`` with an SI prefix (k, M, G, T), two decimals."""
    amount = value * base
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(amount) >= factor:
            return f"{amount / factor:.2f} {prefix}{unit}"
    return f"{amount:.2f} {unit}"


def _gpu_hours(hours: float) -> str:
    return f"{hours / 1e6:,.2f}M GPU-hours" if hours >= 1e6 else f"{hours:,.1f} GPU-hours"


def _training(t: TrainingCost, chosen: PriceRow | None) -> list[str]:
    lines = [
        f"whole run: training.tokens {t.tokens:.4g} = {t.steps:,} steps of "
        f"{t.tokens_per_step:,.0f} tokens",
        f"  time to train     {duration(t.useful_time_s)} of steps, {duration(t.wall_time_s)} "
        f"wall, {_gpu_hours(t.gpu_hours)}",
    ]
    if t.cost_usd is not None and chosen is not None:
        name = chosen.preset or "price.gpu_hour_usd"
        lines.append(
            f"  cost to train     {usd(t.cost_usd)} at {name} (${chosen.usd_per_gpu_hour:.3f}"
            f"/GPU-h), ${t.cost_per_million_tokens_usd:.4g} per million tokens"
        )
    return lines


def _reliability(e: GoodputEstimate, sim: GoodputSimulation | None) -> list[str]:
    lines = [
        f"reliability (failure rates: {_source(e.failures_source)})",
        f"  MTBI              {duration(e.mtbi_s)}"
        + ("" if e.expected_interruptions is None else
           f"; {e.expected_interruptions:,.1f} interruptions expected"),
        f"  checkpoint        {scaled(e.checkpoint_bytes, 'B')} in {e.checkpoint_write_s:.2f} s "
        f"to {e.storage} ({scaled(e.checkpoint_bandwidth_Bps, 'B/s')})",
        f"  interval          Young {e.interval_young_s:.1f} s, Daly {e.interval_daly_s:.1f} s, "
        f"exact {e.interval_exact_s:.1f} s; {e.interval_policy}: every {e.interval_steps} steps "
        f"({e.interval_s:.1f} s)",
        f"  goodput           {e.goodput:.4f}"
        + ("" if e.expected_breakdown_s is None else "; wall: " + ", ".join(
            f"{k} {duration(v)}" for k, v in e.expected_breakdown_s.items())),
    ]  # fmt: skip
    if sim is not None:
        expected = e.expected_wall_time_s or 0.0
        lines.append(
            f"  event simulation  {sim.runs} runs (seed {sim.seed}): wall "
            f"{sim.mean_wall_s / _DAY:.2f} +- {sim.sem_wall_s / _DAY:.2f} d, goodput "
            f"{sim.goodput:.4f} (analytical {expected / _DAY:.2f} d, {e.goodput:.4f})"
        )
    return lines


def _source(text: str) -> str:
    return text if len(text) <= _SOURCE_CHARS else text[: _SOURCE_CHARS - 3] + "..."


def _prices(t: PriceTable) -> list[str]:
    lines = [
        f"prices ({t.gpu}, {t.gpus:,} GPUs)",
        f"  {'preset':<24} {'$/GPU-h':>8}  {'as of':<10} {'time':>8} {'cost':>9}  source",
    ]
    rows = list(t.presets.values())
    if t.chosen is not None and t.chosen.preset not in t.presets:
        rows.append(t.chosen)
    chosen = None if t.chosen is None else t.chosen.preset or "price.gpu_hour_usd"
    for r in sorted(rows, key=lambda r: (r.usd_per_gpu_hour, r.preset or "")):
        name = r.preset or "price.gpu_hour_usd"
        mark = "*" if name == chosen else " "
        lines.append(
            f" {mark}{name:<24} {r.usd_per_gpu_hour:>8.3f}  {r.as_of or '-':<10} "
            f"{duration(t.wall_time_s):>8} {usd(r.cost_usd):>9}  {_source(r.source)}"
        )
    if not rows:
        lines.append(f"  (no shipped price preset for {t.gpu})")
    return lines


def _spot(s: SpotComparison) -> list[str]:
    lines = [f"spot ({s.discount:.0%} off, {s.spot.preemptions_per_node_hour:.2e} "
             "preemptions per node-hour)"]  # fmt: skip
    for o in (s.on_demand, s.spot):
        wall = (
            "" if o.expected_wall_time_s is None else f", wall {duration(o.expected_wall_time_s)}"
        )
        cost = "" if o.cost_usd is None else f", {usd(o.cost_usd)}"
        lines.append(f"  {o.name:<10} goodput {o.goodput:.4f}{wall}{cost}")
    lines.append(
        f"  spot costs {s.relative_cost:.3f} x on-demand ({'pays off' if s.pays_off else 'does not pay off'});"
        f" break-even discount {s.break_even_discount:.1%}, break-even "
        f"{s.break_even_preemptions_per_node_hour:.2e} preemptions per node-hour"
    )
    return lines


def _energy(e: EnergyEstimate) -> list[str]:
    return [
        f"energy (PUE {e.pue:g}, grid {e.grid_g_per_kwh:g} g CO2e/kWh)",
        f"  {e.gpu_power_w:.0f} W per GPU busy, IT {scaled(e.it_power_w, 'W')}; "
        f"{scaled(e.facility_energy_kwh, 'Wh', 1e3)}, {scaled(e.co2e_kg / 1e3, 't')} CO2e",
    ]


def whole_run_text(run: WholeRun) -> str:
    """The parts of ``run`` that are present, as indented lines, then their notes."""
    lines: list[str] = []
    notes = list(run.notes)
    if run.training_run is not None:
        chosen = None if run.prices is None else run.prices.chosen
        lines += _training(run.training_run, chosen)
        notes += run.training_run.notes
    if run.reliability is not None:
        lines += _reliability(run.reliability, run.simulation)
        notes += run.reliability.notes
    if run.prices is not None:
        lines += _prices(run.prices)
    if run.spot is not None:
        lines += _spot(run.spot)
        notes += run.spot.notes
    if run.energy is not None:
        lines += _energy(run.energy)
        notes += run.energy.notes
    return "\n".join([*lines, *(f"note: {n}" for n in dict.fromkeys(notes))])
