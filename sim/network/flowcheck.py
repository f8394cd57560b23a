"""What a flow network's rates give on every link of every route: the debug check of
max-min fairness and the per-link load samples (both over full routes, not the one link
per class the solver sees)."""

from __future__ import annotations

import numpy as np

from sim.network.maxmin import check_maxmin, with_flow_caps
from sim.topology.congestion import effective_capacity
from sim.topology.model import Topology

__all__ = ["check_rates", "link_loads"]


def check_rates(
    hops: np.ndarray, share: np.ndarray, topology: Topology, caps: np.ndarray, rates: np.ndarray
) -> None:
    """Raise AssertionError unless ``rates`` (bytes/s) are max-min fair for flows on the
    routes ``hops`` (padded with the link count) with ``share`` per hop and rate ``caps``,
    on ``topology``'s links less their incast loss (:mod:`sim.topology.congestion`)."""
    n = len(topology.capacity_Bps)
    capacity = topology.capacity_Bps
    if np.any(topology.link_loss > 0):
        flows = np.bincount(hops.ravel(), minlength=n + 1)[:n]
        capacity = effective_capacity(capacity, topology.link_loss, flows)
    full, capacity = with_flow_caps(hops, capacity, caps)
    share = np.hstack([share, np.ones((len(rates), full.shape[1] - hops.shape[1]))])
    paths = [row[row < capacity.size] for row in full]
    shares = [s[r < capacity.size] for r, s in zip(full, share, strict=True)]
    check_maxmin(paths, capacity, rates, weights=shares)


def link_loads(
    hops: np.ndarray, share: np.ndarray, rates: np.ndarray, num_links: int
) -> tuple[np.ndarray, np.ndarray]:
    """Links carrying traffic and their aggregate rate (bytes/s) for flows at ``rates``."""
    load = np.bincount(hops.ravel(), weights=(share * rates[:, None]).ravel(),
                       minlength=num_links + 1)  # fmt: skip
    links = np.flatnonzero(load[:num_links])
    return links, load[links]
