"""Output pieces the commands share: per-link rows of a run and the ``--plot`` figure.

Only the standard library at import time (the commands' ``--help`` stays fast).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["add_set_option", "link_rows", "plot"]


def link_rows(topology: Any, network: Any, step_time_s: float) -> list[dict[str, Any]]:
    """Per directed link with traffic: name, kind, bytes and utilisation over the step.

    ``network`` is the flow network of a simulated step (``None`` on the analytical one:
    no rows). Its links carry what the step put on the network: every TP rank's DP
    reduction and replica 0's pipeline sends; TP and EP collectives are timed on their
    groups and are not placed on links.
    """
    if network is None or step_time_s <= 0:
        return []
    rows = []
    for i in network.link_bytes.nonzero()[0]:
        nbytes = float(network.link_bytes[i])
        src, dst = topology.links[i]
        cap = float(topology.capacity_Bps[i])
        rows.append(
            {
                "name": f"{src}->{dst}",
                "kind": topology.link_kind[i],
                "bytes": nbytes,
                "utilisation": min(1.0, nbytes / (cap * step_time_s)) if cap > 0 else 0.0,
            }
        )
    return rows


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
