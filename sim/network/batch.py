"""The closed form of a batch of transfers started together (no SimPy: the training
step's list scheduling and the collective tuner's callers import it without the event
loop; :class:`sim.network.analytical.AnalyticalNetwork` charges the same)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sim.topology.congestion import effective_capacity
from sim.topology.model import Topology
from sim.topology.paths import Path

__all__ = ["batch_times_s"]


def batch_times_s(
    topology: Topology, paths: Sequence[Path], nbytes: np.ndarray, max_rate_Bps: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The analytical model of one batch of transfers started together: each lands
    ``latency + max over its links (batch bytes on the link / capacity)`` after the start,
    no sooner than ``nbytes / max_rate_Bps`` (seconds), less the incast loss of lossy
    links crossed by several of them. Returns (seconds per transfer, bytes per link).

    The closed form the analytical backend charges; the training step's list scheduling
    asks it for the time of its transfers too, so both agree by construction.
    """
    load = np.zeros(len(topology.capacity_Bps))
    counts = np.array([len(p.links) for p in paths], dtype=np.intp)
    times = np.zeros(len(paths))
    if not counts.sum():
        return times, load
    flat = np.concatenate([p.links for p in paths])
    share = np.concatenate([p.shares for p in paths])
    owner = np.repeat(np.arange(len(paths)), counts)
    used, local = np.unique(flat, return_inverse=True)  # the batch's links only
    here = np.zeros(len(used))
    np.add.at(here, local, nbytes[owner] * share)
    cap = topology.capacity_Bps[used]
    loss = topology.link_loss[used]
    if np.any(loss > 0):  # incast on lossy links crossed by several transfers
        cap = effective_capacity(cap, loss, np.bincount(local, minlength=len(used)))
    drain = np.zeros(len(paths))
    lat = np.zeros(len(paths))
    np.maximum.at(drain, owner, here[local] / cap[local])
    np.add.at(lat, owner, topology.latency_s[flat] * share)
    drain = np.where(counts > 0, np.maximum(drain, nbytes / max_rate_Bps), 0.0)
    load[used] = here
    return lat + drain, load
