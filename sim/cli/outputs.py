"""Output pieces the commands share: per-link rows of a run and the ``--plot`` figure.

Only the standard library at import time (the commands' ``--help`` stays fast).
"""

from __future__ import annotations

import argparse
import math
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

__all__ = [
    "Heartbeat",
    "add_profile_options",
    "add_set_option",
    "busiest_text",
    "count",
    "link_rows",
    "link_table",
    "link_tiers",
    "plot",
    "positive_float",
    "scenario_sets",
    "tiers_text",
]


def link_rows(topology: Any, network: Any, step_time_s: float) -> list[dict[str, Any]]:
    """Per directed link with traffic: name, kind, tier, bytes, average utilisation over
    the step, peak utilisation and time at >= 90% (from the network's recorded rate
    samples; None when it did not record), all against the capacity the step runs each
    link at (line rate times the link's efficiency, as the trace's counters), and bytes
    per collective (``by``: the network's tags, e.g. ``dp reduce_scatter``).
    :mod:`sim.linkstats` computes them.

    ``network`` is the flow network of a simulated step (``None`` on the analytical one:
    no rows). Its links carry what the step put on the network: every TP rank's DP/ZeRO
    collectives and replica 0's pipeline sends; TP and EP collectives are timed on their
    groups and are not placed on links (:func:`link_tiers` reports their bytes per scope).
    """
    stats = _stats(topology, network, step_time_s)
    return [] if stats is None else stats.rows


def link_tiers(
    topology: Any, network: Any, step_time_s: float, bytes_by_scope: Mapping[str, float]
) -> list[dict[str, Any]]:
    """Per tier of links (NVLink, PCIe, NIC up, leaf up, spine down, ...): the
    aggregates of :func:`sim.linkstats.tier_rows`, ECMP collisions included."""
    from sim.linkstats import tier_rows

    stats = _stats(topology, network, step_time_s)
    used = getattr(network, "topology", topology)
    return [] if stats is None else tier_rows(stats, used, bytes_by_scope)


def _stats(topology: Any, network: Any, duration_s: float) -> Any:
    from sim.linkstats import link_stats

    if network is None or duration_s <= 0:
        return None
    # the network's own topology: capacities as the step runs them (scaled by the links'
    # efficiencies), as the trace's counters see them
    topology = getattr(network, "topology", topology)
    tags = getattr(network, "link_bytes_by_tag", {})
    samples = getattr(network, "samples", [])
    flows = getattr(network, "flow_counts", None)
    return link_stats(topology, samples, network.link_bytes, tags, duration_s,
                      flows if samples else None)  # fmt: skip


def link_table(topology: Any, link_bytes: Any, tags: Mapping[str, Any],
               duration_s: float) -> list[dict[str, Any]]:  # fmt: skip
    """Rows of :func:`link_rows` from per-link byte counters over ``duration_s`` seconds
    (no rate samples: averages only)."""
    from sim.linkstats import link_stats

    return link_stats(topology, [], link_bytes, tags, duration_s).rows


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _secs(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def busiest_text(rows: Sequence[Mapping[str, Any]], top: int) -> str:
    """The ``top`` busiest links as a text table: most time at >= 90% first, then the
    average utilisation, then bytes."""
    best = sorted(rows, key=lambda r: (-(r.get("time_above_90_s") or 0.0), -r["utilisation"],
                                       -r["bytes"], r["name"]))[:top]  # fmt: skip
    lines = [f"busiest links ({len(best)} of {len(rows)} with traffic):",
             f"  {'link':<34} {'kind':<10} {'avg':>6} {'peak':>6} {'>=90% s':>8} {'GB':>10}"]  # fmt: skip
    for r in best:
        by = ", ".join(f"{t} {b / 1e9:.1f} GB" for t, b in r.get("by", {}).items())
        lines.append(
            f"  {r['name']:<34} {r['kind']:<10} {r['utilisation']:>6.1%} "
            f"{_pct(r.get('peak_utilisation')):>6} {_secs(r.get('time_above_90_s')):>8} "
            f"{r['bytes'] / 1e9:>10.2f}" + (f"  ({by})" if by else "")
        )
    return "\n".join(lines)


def tiers_text(tiers: Sequence[Mapping[str, Any]], duration_s: float) -> str:
    """The per-tier view: average and peak utilisation, time near capacity, ECMP spread."""
    lines = [
        f"links by tier (over {duration_s:.4g} s; peak and >=90% from the flow network's rate "
        "at every re-solve):",
        f"  {'tier':<11} {'links':>6} {'busy':>6} {'GB':>11} {'avg':>6} {'peak':>6} "
        f"{'link pk':>7} {'>=90% s':>8} {'hot':>5}  ECMP flows/cable max/mean",
    ]
    for t in tiers:
        ecmp = "-"
        if t.get("ecmp_max_over_mean") is not None:
            ecmp = f"worst {t['ecmp_max_over_mean']:.2f}, mean {t['ecmp_mean_max_over_mean']:.2f}"
        lines.append(
            f"  {t['tier']:<11} {t['links']:>6} {t['busy_links']:>6} {t['bytes'] / 1e9:>11,.1f} "
            f"{t['utilisation']:>6.1%} {_pct(t.get('peak_utilisation')):>6} "
            f"{_pct(t.get('peak_link_utilisation')):>7} {_secs(t.get('time_above_90_s')):>8} "
            f"{t.get('links_above_90') if t.get('links_above_90') is not None else '-':>5}  {ecmp}"
        )
        off = t.get("off_link_bytes", 0.0)
        if off:
            lines.append(
                f"  {'':<11} + {off / 1e9:,.1f} GB the step counts but does not place on links "
                f"(collectives timed on their groups, e.g. TP/EP): "
                f"{t['utilisation_with_off_link']:.1%} average with them"
            )
    return "\n".join(lines)


def plot(records: Sequence[Mapping[str, Any]], kind: str | None, path: str) -> None:
    """Draw the figure that fits ``records`` into ``path`` and say so on stderr."""
    from sim.report import plot_for

    written = plot_for(list(records), kind, path)
    print(f"figure written to {written}", file=sys.stderr)


def check_plot_path(path: str) -> None:
    """Refuse ``--plot FILE`` before any simulation: an image type other than .png and
    .svg, or a file that cannot be written (:func:`sim.files.check_output_path`)."""
    from sim.files import check_output_path
    from sim.report.backend import plot_format

    plot_format(path)
    check_output_path(path, "--plot")


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


def add_profile_options(p: argparse.ArgumentParser) -> None:
    """``--profile`` and ``--force-profile``: every command that simulates a scenario takes
    them, and they mean what the scenario keys ``profile`` and ``force_profile`` mean."""
    p.add_argument(
        "--profile",
        help="calibrated profile (name or YAML file), overriding the scenario's; default: the "
        "shipped profile measured on the topology's hardware; none: the shipped defaults",
    )
    p.add_argument(
        "--force-profile",
        action="store_true",
        help="use the profile even if measured on other hardware",
    )


def scenario_sets(args: argparse.Namespace) -> list[str]:
    """The command's ``--set`` items, then its ``--profile`` and ``--force-profile`` as the
    scenario keys they stand for (one resolution path: :func:`sim.training.setup.prepare_step`)."""
    sets = list(getattr(args, "sets", []))
    if getattr(args, "profile", None) is not None:
        sets.append(f"profile={args.profile}")
    if getattr(args, "force_profile", False):
        sets.append("force_profile=true")
    return sets


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


def positive_float(text: str) -> float:
    """An argparse ``type``: a finite number > 0 (years, seconds). ``nan``, ``inf``, ``0``
    and ``-1`` are refused by argparse with what is allowed, before anything runs.

    >>> positive_float("2.5")
    2.5
    >>> positive_float("nan")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: 'nan' is not allowed: expected a finite number > 0
    """
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number > 0") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r} is not allowed: expected a finite number > 0"
        )
    return value


class Heartbeat:
    """A line on stderr whenever a long command has said nothing for ``every_s`` seconds
    (one flow simulation of a large collective can take minutes): a daemon thread that
    checks once a second; :meth:`touch` after every line of output the command prints.

    >>> with Heartbeat("simulating", every_s=60.0) as beat:
    ...     beat.touch()
    """

    def __init__(self, what: str, every_s: float = 6.0) -> None:
        self.what, self.every_s = what, every_s
        self.start = self.last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()

    def touch(self) -> None:
        """The command printed something: the silence starts again."""
        self.last = time.monotonic()

    def _beat(self) -> None:
        while not self._stop.wait(1.0):
            now = time.monotonic()
            if now - self.last >= self.every_s:
                self.last = now
                print(f"clustersim: still {self.what}: {now - self.start:.0f} s elapsed",
                      file=sys.stderr, flush=True)  # fmt: skip
