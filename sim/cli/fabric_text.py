"""Text of a fabric's design review: the summary, the bill of materials, the cost lines.

Pure formatting of the records :func:`sim.topology.summary.fabric_summary`,
:meth:`sim.cost.bom.BillOfMaterials.to_dict` and :meth:`sim.cost.fabric.FabricCost.to_dict`
return (JSON-ready dicts in, lines out).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["bom_lines", "fabric_cost_line", "fabric_step_lines", "summary_lines", "usd"]


def _rate(bps: float) -> str:
    """Bytes/s as a line rate: ``400G``, ``12.8T``."""
    bits = bps * 8
    return f"{bits / 1e12:g}T" if bits >= 1e12 else f"{bits / 1e9:g}G"


def usd(x: float | None, digits: str = ",.2f") -> str:
    """Dollars for a table: ``$1.26M``, ``$18.0k``, ``$300.00`` (``-`` for None)."""
    if x is None:
        return "-"
    if x >= 1e6:
        return f"${x / 1e6:,.2f}M"
    if x >= 1e3:
        return f"${x / 1e3:,.1f}k"
    return f"${x:{digits}}"


def _tier_lines(tiers: list[Mapping[str, Any]]) -> list[str]:
    if tiers and "radix" not in tiers[0]:  # an explicit graph: counts only
        return [f"  {t['name']:<6} {t['count']:>6}" for t in tiers]
    lines = [f"  {'tier':<6} {'count':>6}  {'switch':<20} {'radix':>10} {'used':>5}  "
             f"{'down':>6} {'up':>6} {'oversub':>8}  count chosen by"]  # fmt: skip
    for t in tiers:
        ratio = t["oversubscription"]
        over = f"{ratio:.3g}:1" if ratio is not None else "-"
        flag = " (over radix)" if t["over_radix"] else ""
        radix = f"{t['radix']}x{_rate(t['port_Bps'])}"
        up = _rate(t["up_Bps"]) if t["up_Bps"] else "-"
        lines.append(
            f"  {t['name']:<6} {t['count']:>6}  {t['switch']:<20} {radix:>10} {t['ports_used']:>5}  "
            f"{_rate(t['down_Bps']):>6} {up:>6} {over:>8}  {t['how']}{flag}"
        )
    return lines


def summary_lines(s: Mapping[str, Any]) -> list[str]:
    """The summary of :func:`sim.topology.summary.fabric_summary` as text lines."""
    models = " + ".join(f"{n} {m}" for m, n in s["gpu_models"].items())
    lines = [
        f"{s['topology']}: {s['gpus']:,} GPUs ({s['servers']} servers x {s['gpus_per_server']}; "
        f"{models}), fabric {s['fabric']}, routing {s['routing']}",
    ]
    if s["description"]:
        lines.append(f"  {s['description'].splitlines()[0]}")
    nics = ", ".join(f"{n['count']:,} x {n['kind']} at {_rate(n['rate_Bps'])}b/s"
                     for n in s["nics"])  # fmt: skip
    lines.append(f"NICs          {nics or 'none on a network'}")
    if not s["tiers"]:
        lines.append("switches      none (no scale-out network)")
        return lines
    lines.append(f"switches      {s['switches']:,} in {len(s['tiers'])} tier(s)")
    lines += _tier_lines(s["tiers"])
    lines.append(f"cables        {sum(c['count'] for c in s['cables']):,}, "
                 f"pluggable optics {s['optics']:,}")  # fmt: skip
    lines.append(f"  {'between':<11} {'count':>7} {'speed':>6}  {'kind':<12} {'reach':<5}  "
                 f"{'part':<16} {'optics':>7}")  # fmt: skip
    for c in s["cables"]:
        lines.append(
            f"  {c['between']:<11} {c['count']:>7,} {_rate(c['rate_Bps']):>6}  {c['kind']:<12} "
            f"{c['reach']:<5}  {c['part'] or '(none)':<16} {c['count'] * c['transceivers']:>7,}"
        )
    bis = s["bisection_bandwidth_Bps"]
    lines.append(f"bisection     {bis * 8 / 1e12:,.1f} Tb/s ({bis / 1e12:,.2f} TB/s) each way, "
                 f"{s['bisection_cut']}")  # fmt: skip
    if s["ecmp_paths"]:
        paths = ", ".join(f"{k} {v:,}" for k, v in s["ecmp_paths"].items())
        lines.append(f"ECMP paths    {paths} (NIC to NIC; each parallel cable counts)")
    lines += [f"note: {n}" for n in s["notes"]]
    return lines


def bom_lines(b: Mapping[str, Any]) -> list[str]:
    """The bill of materials of :meth:`sim.cost.bom.BillOfMaterials.to_dict` as text."""
    if not b["items"]:
        return ["bill of materials: no scale-out network"]
    lines = [
        f"bill of materials: {usd(b['capex_usd'])} capex, {b['power_w'] / 1e3:,.1f} kW "
        f"({usd(b['capex_per_gpu_usd'])} and {b['power_per_gpu_w']:.0f} W per GPU)",
        f"  {'part':<24} {'count':>7} {'each':>9} {'total':>9} {'W each':>7} {'kW':>7}  as of",
    ]
    for i in b["items"]:
        star = "*" if i["estimate"] else " "
        lines.append(
            f"  {i['part']:<24} {i['count']:>7,} {usd(i['unit_usd']):>9} {usd(i['usd']):>9} "
            f"{i['unit_w']:>7g} {i['watts'] / 1e3:>7.2f}  {i['as_of']}{star}"
        )
    lines.append("  * estimate: see its source in topologies/catalog/network-parts.yaml")
    lines += [f"note: {n}" for n in b["notes"] if not n.startswith("prices or watts marked")]
    return lines


def fabric_cost_line(c: Mapping[str, Any], gpu_hour_usd: float | None = None) -> str:
    """One line: the fabric per GPU-hour over its lifetime, next to the GPU's price."""
    gpu = f", next to the GPU's ${gpu_hour_usd:.2f}" if gpu_hour_usd is not None else ""
    return (
        f"fabric        ${c['per_gpu_hour_usd']:.4f} per GPU-hour (capex "
        f"${c['capex_per_gpu_hour_usd']:.4f} over {c['lifetime_years']:g} years + energy "
        f"${c['energy_per_gpu_hour_usd']:.4f} at ${c['usd_per_kwh']:g}/kWh, PUE {c['pue']:g}){gpu}"
    )


def fabric_step_lines(f: Mapping[str, Any]) -> list[str]:
    """A run's fabric lines: capex and power, per GPU-hour, and the step's cost with it."""
    lines = [
        f"fabric          {usd(f['capex_usd'])} capex, {f['power_w'] / 1e3:,.1f} kW "
        f"({usd(f['capex_per_gpu_usd'])}, {f['power_per_gpu_w']:.0f} W per GPU; "
        "clustersim topologies --show for the bill of materials)",
        "  " + fabric_cost_line(f["cost"], f["gpu_hour_usd"]).replace("fabric        ", "", 1),
    ]
    s = f["step"]
    if s["per_step_usd"] is not None:
        lines.append(
            f"cost w/ fabric  ${s['per_step_usd']:.4f} per step, ${s['per_million_tokens_usd']:.4f} "
            f"per million tokens (GPUs ${s['gpu_per_million_tokens_usd']:.4f} + fabric "
            f"${s['fabric_per_million_tokens_usd']:.4f})"
        )
    else:
        lines.append(
            f"cost w/ fabric  fabric ${s['fabric_per_step_usd']:.4f} per step, "
            f"${s['fabric_per_million_tokens_usd']:.4f} per million tokens (no GPU price: price.preset)"
        )
    return lines
