"""Output pieces the commands share: per-link rows of a run and the ``--plot`` figure.

Only the standard library at import time (the commands' ``--help`` stays fast).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["add_set_option", "busiest_text", "count", "link_rows", "link_table", "plot"]


def link_rows(topology: Any, network: Any, step_time_s: float) -> list[dict[str, Any]]:
    """Per directed link with traffic: name, kind, bytes, utilisation over the step, and
    bytes per collective (``by``: the network's tags, e.g. ``dp reduce_scatter``).

    ``network`` is the flow network of a simulated step (``None`` on the analytical one:
    no rows). Its links carry what the step put on the network: every TP rank's DP/ZeRO
    collectives and replica 0's pipeline sends; TP and EP collectives are timed on their
    groups and are not placed on links.
    """
    if network is None or step_time_s <= 0:
        return []
    tags = getattr(network, "link_bytes_by_tag", {})
    return link_table(topology, network.link_bytes, tags, step_time_s)


def link_table(topology: Any, link_bytes: Any, tags: Mapping[str, Any],
               duration_s: float) -> list[dict[str, Any]]:  # fmt: skip
    """Rows of :func:`link_rows` from per-link byte counters over ``duration_s`` seconds."""
    rows = []
    for i in link_bytes.nonzero()[0]:
        nbytes = float(link_bytes[i])
        src, dst = topology.links[i]
        cap = float(topology.capacity_Bps[i])
        by = {t: float(b[i]) for t, b in sorted(tags.items()) if b[i] > 0}
        rows.append(
            {
                "name": f"{src}->{dst}",
                "kind": topology.link_kind[i],
                "bytes": nbytes,
                "utilisation": min(1.0, nbytes / (cap * duration_s)) if cap > 0 else 0.0,
                "by": by,
            }
        )
    return rows


def busiest_text(rows: Sequence[Mapping[str, Any]], top: int) -> str:
    """The ``top`` busiest links (by utilisation, then bytes) as a text table."""
    best = sorted(rows, key=lambda r: (-r["utilisation"], -r["bytes"], r["name"]))[:top]
    lines = [f"busiest links ({len(best)} of {len(rows)} with traffic):"]
    for r in best:
        by = ", ".join(f"{t} {b / 1e9:.1f} GB" for t, b in r.get("by", {}).items())
        lines.append(
            f"  {r['name']:<34} {r['kind']:<10} {r['utilisation']:>6.1%} "
            f"{r['bytes'] / 1e9:>10.2f} GB" + (f"  ({by})" if by else "")
        )
    return "\n".join(lines)


def plot(records: Sequence[Mapping[str, Any]], kind: str | None, path: str) -> None:
    """Draw the figure that fits ``records`` into ``path`` and say so on stderr."""
    from sim.report import plot_for

    written = plot_for(list(records), kind, path)
    print(f"figure written to {written}", file=sys.stderr)


def add_set_option(p: argparse.ArgumentParser, what: str = "override a scenario field") -> None:
    """The repeatable ``--set KEY=VALUE`` option of the commands that take a scenario."""
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"{what}, e.g. parallel.tp=4 (repeatable)",
    )


def count(low: int = 1, high: int | None = None) -> Any:
    """An argparse ``type``: a whole number in ``[low, high]`` (a count: GPUs, nodes,
    jobs, iterations). ``1e9``, ``2.5``, ``-1`` and ``0`` (when ``low`` is 1) are refused
    by argparse with the allowed range, before anything runs.

    >>> count(1)("8"), count(0)("0")
    (8, 0)
    >>> count(1)("0")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: 0 is not allowed: expected a whole number >= 1
    """
    bound = f">= {low}" if high is None else f"from {low} to {high:,}"

    def parse(text: str) -> int:
        digits = text.strip().lstrip("+-")
        if not digits.isdigit() or len(digits) > 18:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number {bound}")
        value = int(text)
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(
                f"{value} is not allowed: expected a whole number {bound}"
            )
        return value

    parse.__name__ = "count"  # argparse names the type in its messages
    return parse
