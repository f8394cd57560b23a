"""Bottlenecks per link and per tier: average and peak utilisation, time near capacity.

The flow network, asked to record (``record=True``), keeps the aggregate rate
on every busy link at every re-solve; rates hold until the next one. From those samples
and the bytes each link carried:

* per link: ``utilisation`` (average over the window: bytes / (capacity x duration)),
  ``peak_utilisation`` (the highest rate / capacity: the trace's counter for the same
  link reaches exactly this), ``time_above_90_s`` (time at >= 90% of capacity), bytes and
  the bytes of each collective (the network's tags);
* per tier (:func:`link_tier`: ``nvlink``, ``pcie``, ``nic up``, ``leaf down``, ``leaf
  up``, ``spine down``, ``spine up``, ``core down``, ...): links and busy links, bytes,
  average utilisation of the tier's capacity, the peak of the tier's aggregate rate over
  its capacity, the busiest link's peak, the time some link of the tier spends at >= 90%
  and how many links ever do;
* ECMP collisions per tier where routing chooses among equal cables (a switch's uplinks;
  the parallel cables between two switches going down): flows per cable, max over mean
  within each choice set (the mean taken as at least one flow's share, so that fewer
  flows than cables, one per cable, read 1.0), at every sample; the worst and the
  time-weighted average over the sets that carry flows. 1.0 is perfect spreading; 2.0
  means the busiest cable carries twice its share (hashing loss).

Bytes a step counts but does not place on links (collectives timed on their groups, such
as TP and EP collectives) are not in the samples; :func:`tier_rows` reports them per scope
as ``off_link_bytes``.

>>> import numpy as np
>>> from sim.topology.presets import load_topology
>>> t = load_topology("dgx-h100")
>>> c = float(t.capacity_Bps[0])  # link 0 at full rate for 1 s, half for 2 s, then idle
>>> samples = [(0.0, np.array([0]), np.array([c])), (1.0, np.array([0]), np.array([c / 2])),
...            (3.0, np.array([], dtype=int), np.array([]))]
>>> bytes_ = np.zeros(len(t.links)); bytes_[0] = 2 * c
>>> r = link_stats(t, samples, bytes_, {}, 4.0).rows[0]
>>> r["utilisation"], r["peak_utilisation"], r["time_above_90_s"]
(0.5, 1.0, 1.0)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["ABOVE", "LinkStats", "ecmp_groups", "link_stats", "link_tier", "tier_rows"]

ABOVE = 0.9
"""The utilisation counted as "near capacity" (time above 90%)."""

_FABRIC = ("leaf", "spine", "core", "switch")
_UP = {"leaf": "spine", "spine": "core"}


def link_tier(kind_u: str, kind_v: str, scope: str) -> str:
    """The tier of a directed link from a node of kind ``kind_u`` to one of ``kind_v``.

    >>> link_tier("nic", "leaf", "net"), link_tier("spine", "leaf", "net")
    ('nic up', 'spine down')
    """
    if scope in ("nvlink", "pcie"):
        return scope
    if kind_u == "nic":
        return "nic up"
    if kind_v == "nic":
        return f"{kind_u} down"
    if kind_u in _FABRIC and kind_v in _FABRIC:
        up = _UP.get(kind_u) == kind_v or (kind_u == "switch" and kind_v == "switch")
        return f"{kind_u} up" if up else f"{kind_u} down"
    return scope


def _tiers(topology: Any) -> list[str]:
    kinds = topology.graph.nodes
    return [link_tier(str(kinds[u].get("kind")), str(kinds[v].get("kind")), s)
            for (u, v), s in zip(topology.links, topology.link_scope, strict=True)]  # fmt: skip


def ecmp_groups(topology: Any) -> np.ndarray:
    """A choice-set number per link (-1: no choice): a switch's links up to the tier above
    (ECMP picks among them), and the parallel cables between two switches going down."""
    kinds = topology.graph.nodes
    group = np.full(len(topology.links), -1, dtype=np.intp)
    keys: dict[tuple[str, str], int] = {}
    for i, (u, v) in enumerate(topology.links):
        ku, kv = kinds[u].get("kind"), kinds[v].get("kind")
        if ku not in _FABRIC or kv not in _FABRIC:
            continue
        key = (u, "") if _UP.get(str(ku)) == kv else (u, v)
        group[i] = keys.setdefault(key, len(keys))
    if not keys:
        return group
    sizes = np.bincount(group[group >= 0], minlength=len(keys))
    group[(group >= 0) & (sizes[np.maximum(group, 0)] < 2)] = -1  # one cable: no choice
    return group


@dataclass(frozen=True)
class LinkStats:
    """Per-link rows (see the module docstring) and the per-link arrays behind them."""

    rows: list[dict[str, Any]]
    tiers: list[dict[str, Any]]
    duration_s: float


def _accumulate(
    samples: Sequence[tuple[float, np.ndarray, np.ndarray]], cap: np.ndarray, tier_of: np.ndarray,
    tier_cap: np.ndarray, end_s: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Per link: peak utilisation, time at >= 90%; per tier: peak aggregate utilisation,
    time with some link at >= 90%."""
    n, k = len(cap), len(tier_cap)
    peak, above = np.zeros(n), np.zeros(n)
    tier_peak, tier_above = np.zeros(k), np.zeros(k)
    for j, (t, links, rates) in enumerate(samples):
        nxt = samples[j + 1][0] if j + 1 < len(samples) else end_s
        dt = max(0.0, min(nxt, end_s) - t)
        if not len(links):
            continue
        u = rates / cap[links]
        np.maximum.at(peak, links, u)
        hot = u >= ABOVE - 1e-9
        above[links[hot]] += dt
        agg = np.bincount(tier_of[links], weights=rates, minlength=k)
        np.maximum(tier_peak, agg / np.maximum(tier_cap, 1e-300), out=tier_peak)
        tier_above[np.unique(tier_of[links[hot]])] += dt
    return peak, above, tier_peak, tier_above


def _ecmp(
    samples: Sequence[tuple[float, np.ndarray, np.ndarray]], flows: Sequence[np.ndarray],
    group: np.ndarray, tier_of: np.ndarray, k: int, end_s: float,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Per tier: worst and time-weighted mean of (max / mean flows per cable) over the
    choice sets carrying flows."""
    sizes = np.bincount(group[group >= 0]) if (group >= 0).any() else np.zeros(0, dtype=np.intp)
    worst, weighted, weight = np.zeros(k), np.zeros(k), np.zeros(k)
    set_tier = np.zeros(len(sizes), dtype=np.intp)
    set_tier[group[group >= 0]] = tier_of[group >= 0]
    for j, ((t, links, _), count) in enumerate(zip(samples, flows, strict=True)):
        g = group[links]
        sel = g >= 0
        if not sel.any():
            continue
        nxt = samples[j + 1][0] if j + 1 < len(samples) else end_s
        dt = max(0.0, min(nxt, end_s) - t)
        total = np.bincount(g[sel], weights=count[sel], minlength=len(sizes))
        top, least = np.zeros(len(sizes)), np.full(len(sizes), np.inf)
        np.maximum.at(top, g[sel], count[sel])
        np.minimum.at(least, g[sel], np.where(count[sel] > 0, count[sel], np.inf))
        busy = np.flatnonzero(total > 0)
        # the mean, but at least one flow's share: k < n flows spread one per cable is 1.0
        ratio = top[busy] / np.maximum(total[busy] / sizes[busy], least[busy])
        tiers = set_tier[busy]
        np.maximum.at(worst, tiers, ratio)
        np.add.at(weighted, tiers, ratio * dt)
        np.add.at(weight, tiers, dt)
    mean = np.divide(weighted, weight, out=np.zeros(k), where=weight > 0)
    return worst, mean


def link_stats(
    topology: Any,
    samples: Sequence[tuple[float, np.ndarray, np.ndarray]],
    link_bytes: np.ndarray,
    tags: Mapping[str, np.ndarray],
    duration_s: float,
    flows: Sequence[np.ndarray] | None = None,
) -> LinkStats:
    """Statistics of every link with traffic, and of every tier, over ``duration_s``.

    Parameters
    ----------
    topology : Topology
        The links (capacities, endpoints) the samples refer to.
    samples : sequence of (time_s, link indices, rate in bytes/s)
        The flow network's :attr:`~sim.network.flow.FlowNetwork.samples` (empty: averages
        only; peaks and time above 90% are then None).
    link_bytes : numpy.ndarray
        Bytes each link carried.
    tags : mapping of str to numpy.ndarray
        Bytes each link carried per collective (tag).
    duration_s : float
        The window (a step's time), seconds.
    flows : sequence of numpy.ndarray, optional
        Flows per link at each sample (:attr:`~sim.network.flow.FlowNetwork.flow_counts`),
        for ECMP collisions.
    """
    cap = np.asarray(topology.capacity_Bps, dtype=float)
    names = _tiers(topology)
    order = sorted(set(names), key=names.index)
    tier_of = np.array([order.index(x) for x in names], dtype=np.intp)
    tier_cap = np.bincount(tier_of, weights=cap, minlength=len(order))
    timed = bool(samples)
    peak, above, tier_peak, tier_above = _accumulate(samples, cap, tier_of, tier_cap, duration_s)
    rows = []
    for i in np.flatnonzero(link_bytes).tolist():
        src, dst = topology.links[i]
        ids = topology.link_ids[(src, dst)]
        cable = f"[{ids.index(i)}]" if len(ids) > 1 else ""  # parallel cables: each its own
        b = float(link_bytes[i])
        rows.append({
            "name": f"{src}->{dst}{cable}", "kind": topology.link_kind[i], "tier": names[i],
            "bytes": b,
            "utilisation": min(1.0, b / float(cap[i] * duration_s)) if duration_s > 0 else 0.0,
            "peak_utilisation": float(peak[i]) if timed else None,
            "time_above_90_s": float(above[i]) if timed else None,
            "by": {t: float(v[i]) for t, v in sorted(tags.items()) if v[i] > 0},
        })  # fmt: skip
    worst = mean = None
    if flows is not None and timed:
        worst, mean = _ecmp(samples, flows, ecmp_groups(topology), tier_of, len(order), duration_s)
    tiers = []
    for j, name in enumerate(order):
        mine = tier_of == j
        b = float(link_bytes[mine].sum())
        busy = mine & (link_bytes > 0)
        tiers.append({
            "tier": name, "links": int(mine.sum()), "busy_links": int(busy.sum()), "bytes": b,
            "utilisation": b / float(tier_cap[j] * duration_s) if duration_s > 0 else 0.0,
            "peak_utilisation": float(tier_peak[j]) if timed else None,
            "peak_link_utilisation": float(peak[mine].max()) if timed and mine.any() else None,
            "time_above_90_s": float(tier_above[j]) if timed else None,
            "links_above_90": int((above[mine] > 0).sum()) if timed else None,
            "ecmp_max_over_mean": float(worst[j]) if worst is not None and worst[j] > 0 else None,
            "ecmp_mean_max_over_mean": float(mean[j]) if mean is not None and mean[j] > 0 else None,
        })  # fmt: skip
    return LinkStats(rows, tiers, float(duration_s))


def tier_rows(
    stats: LinkStats, topology: Any, bytes_by_scope: Mapping[str, float]
) -> list[dict[str, Any]]:
    """``stats.tiers``, the NVLink and PCIe tiers with the bytes of their scope that the
    step counts but does not place on links (``off_link_bytes``) and their average
    utilisation with those counted in (``utilisation_with_off_link``)."""
    cap: dict[str, float] = {}
    for c, s in zip(topology.capacity_Bps, topology.link_scope, strict=True):
        cap[s] = cap.get(s, 0.0) + float(c)
    out = []
    for row in stats.tiers:
        scope = row["tier"]
        if scope in ("nvlink", "pcie") and bytes_by_scope.get(scope, 0.0) > 0:
            off = max(0.0, float(bytes_by_scope[scope]) - row["bytes"])
            whole = cap[scope] * stats.duration_s
            row = {**row, "off_link_bytes": off,
                   "utilisation_with_off_link": (row["bytes"] + off) / whole if whole else 0.0}  # fmt: skip
        out.append(row)
    return out
