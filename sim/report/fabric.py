"""A drawing of a fabric's tiers (SVG or PNG) from its design-review summary.

One row per tier, servers at the bottom: a box per switch (at most :data:`SHOWN` per
row; the rest elided as ``... N more``), lines from each switch to the ones above it, and
the tier's label: count, switch and radix, cables per pair and their speed, the
oversubscription. Drawn from :func:`sim.topology.summary.fabric_summary`'s record only.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sim.errors import ConfigError
from sim.report.backend import figure_bytes, styled

__all__ = ["SHOWN", "fabric_figure", "write_fabric_drawing"]

SHOWN = 12
"""Switches drawn per tier; the others are elided."""


def _xs(n: int) -> list[float]:
    """x positions (0..1) of the boxes of a row of ``n`` switches (``None`` gap elided)."""
    shown = min(n, SHOWN)
    return [(i + 0.5) / shown for i in range(shown)]


def _label(t: Mapping[str, Any]) -> str:
    if "radix" not in t:
        return f"{t['name']}: {t['count']}"
    ratio = t["oversubscription"]
    over = f", {ratio:.3g}:1 over" if ratio is not None else ""
    pair = f", {t['cables_per_pair']} cable(s) to each above" if t["cables_per_pair"] else ""
    return (f"{t['name']}: {t['count']} x {t['switch']} ({t['radix']} x "
            f"{t['port_Bps'] * 8 / 1e9:g}G){pair}{over}")  # fmt: skip


def fabric_figure(summary: Mapping[str, Any]) -> Any:
    """A matplotlib Figure of the tiers of ``summary`` (needs the ``[plot]`` extra)."""
    tiers = list(summary["tiers"])
    rows = [{"name": "servers", "count": summary["servers"]}, *tiers]
    with styled() as figure_cls:
        fig = figure_cls(figsize=(9.0, 1.3 * len(rows) + 0.6))
        ax = fig.add_subplot()
        ax.set_axis_off()
        ax.set_xlim(-0.02, 1.02)
        ax.set_ylim(-0.6, len(rows) - 0.2)
        for y in range(1, len(rows)):
            lower, upper = _xs(rows[y - 1]["count"]), _xs(rows[y]["count"])
            for i, x0 in enumerate(lower):
                # servers reach the leaves of their group; switches every switch above
                above = [upper[i * len(upper) // len(lower)]] if y == 1 else upper
                for x1 in above:
                    ax.plot([x0, x1], [y - 1 + 0.12, y - 0.12], color="0.7", lw=0.4)
        for y, row in enumerate(rows):
            for x in _xs(row["count"]):
                ax.add_patch(_box(x, y, row["count"]))
            if row["count"] > SHOWN:
                ax.text(1.0, y + 0.22, f"... {row['count'] - SHOWN:,} more", ha="right", fontsize=7)
            label = (f"servers: {summary['servers']:,} x {summary['gpus_per_server']} GPUs"
                     if y == 0 else _label(row))  # fmt: skip
            ax.text(0.0, y + 0.22, label, ha="left", fontsize=8)
        bis = summary["bisection_bandwidth_Bps"] * 8 / 1e12
        ax.set_title(f"{summary['topology']}: {summary['gpus']:,} GPUs, {summary['fabric']}, "
                     f"bisection {bis:,.1f} Tb/s")  # fmt: skip
    return fig


def _box(x: float, y: float, n: int) -> Any:
    from matplotlib.patches import Rectangle

    w = min(0.8 / min(n, SHOWN), 0.06)
    return Rectangle((x - w / 2, y - 0.12), w, 0.24, facecolor="#4878a8", edgecolor="none")


def write_fabric_drawing(summary: Mapping[str, Any], path: str) -> None:
    """Draw ``summary`` into ``path`` (``.svg`` or ``.png``), written atomically."""
    from sim.files import write_atomic

    fmt = Path(path).suffix.lower().lstrip(".")
    if fmt not in ("svg", "png"):
        raise ConfigError(f"--draw {path!r}: write .svg or .png")
    data = figure_bytes(fabric_figure(summary), fmt)
    write_atomic(path, data, "--draw")
