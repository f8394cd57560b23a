"""Flow state of :class:`sim.network.flow.FlowNetwork` as parallel numpy arrays.

:class:`FlowArrays` holds every flow in flight (route links padded to one width, bytes left,
latency, rate cap, event, tag); :func:`new_flows` builds a block of them from transfers.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from sim.topology.linkclasses import LinkClasses
from sim.topology.paths import Path

__all__ = ["FlowArrays", "PendingTransfer", "blocks", "new_flows", "path_rows", "widen"]


PendingTransfer = tuple[
    Path, float, float, float, int, int
]  # path, bytes, latency, cap, event number, tag number


@dataclass
class FlowArrays:
    """Flows in the sharing, one row each (parallel arrays)."""

    # (n, h) link indices padded with the link count: one link per class of links
    # carrying the same flows (LinkClasses.reduce), what the solver scans
    hops: np.ndarray
    share: np.ndarray  # (n, h) share of the flow's bytes on each hop (0 in pad cells)
    remaining: np.ndarray  # bytes left to send
    rate: np.ndarray  # bytes/s
    nbytes: np.ndarray  # bytes at start
    latency: np.ndarray  # seconds from last byte sent to arrival
    cap: np.ndarray  # the flow's own rate cap, bytes/s (inf: none)
    event: np.ndarray  # number of the event each flow reports to (Arrivals.register)
    tag: np.ndarray  # number of each flow's tag (0: none)
    # route number per flow (SolveCache.route_id; -1: none), keys cached solves
    route: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.intp))
    # the network's number of each flow's Path (RouteBytes.number): its full route
    path: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.intp))

    @classmethod
    def empty(cls) -> FlowArrays:
        z = np.zeros(0)
        i = np.zeros(0, dtype=np.intp)
        return cls(np.zeros((0, 0), dtype=np.intp), np.zeros((0, 0)), z, z, z, z, z, i, i)

    def __len__(self) -> int:
        return len(self.event)

    def keep(self, mask: np.ndarray) -> None:
        """Keep only the rows where ``mask`` is true."""
        self.hops = self.hops[mask]
        self.share = self.share[mask]
        self.remaining = self.remaining[mask]
        self.rate = self.rate[mask]
        self.nbytes = self.nbytes[mask]
        self.latency = self.latency[mask]
        self.cap = self.cap[mask]
        self.route = self.route[mask]
        self.path = self.path[mask]
        self.event = self.event[mask]
        self.tag = self.tag[mask]

    def extend(self, blocks: Sequence[FlowArrays], pad: int) -> None:
        """Append the rows of ``blocks`` in order (hop arrays widened with ``pad``); one
        copy of the arrays however many blocks."""
        every = [self, *blocks]
        width = max(b.hops.shape[1] for b in every)
        self.hops = np.vstack([widen(b.hops, width, pad) for b in every])
        self.share = np.vstack([widen(b.share, width, 0.0) for b in every])
        for name in ("remaining", "rate", "nbytes", "latency", "cap", "route", "path", "event",
                     "tag"):  # fmt: skip
            setattr(self, name, np.concatenate([getattr(b, name) for b in every]))


def new_flows(
    paths: Sequence[Path],
    nbytes: Sequence[float],
    latency_s: Sequence[float],
    caps_Bps: Sequence[float],
    events: Sequence[int],
    tags: Sequence[int],
    pad: int,
    route_id: Callable[[Path], int] | None = None,
    classes: LinkClasses | None = None,
    path_no: Callable[[Sequence[Path]], np.ndarray] | None = None,
) -> FlowArrays:
    """Flows not yet sharing, one row per path: hops padded with ``pad`` (the link
    count) as :func:`~sim.network.maxmin.pad_paths` pads them (one link per class of
    ``classes``, which observes the paths first; every link without it), each path's
    shares, its route number ``route_id(path)`` (-1 without) and its path number
    ``path_no(paths)`` (-1 without)."""
    hops, share = path_rows(paths, pad)
    size = np.array(nbytes, dtype=float)
    if classes is not None:
        classes.observe_all(list(paths))
        hops, share = classes.reduce(hops, share)
    return FlowArrays(
        hops=hops,
        share=share,
        remaining=size.copy(),
        rate=np.zeros(size.size),
        nbytes=size,
        latency=np.array(latency_s, dtype=float),
        cap=np.array(caps_Bps, dtype=float),
        event=np.array(events, dtype=np.intp),
        tag=np.array(tags, dtype=np.intp),
        route=np.fromiter(
            (route_id(p) for p in paths) if route_id else itertools.repeat(-1, len(paths)),
            np.intp,
            len(paths),
        ),
        path=path_no(paths) if path_no else np.full(len(paths), -1, dtype=np.intp),
    )


def blocks(
    pending: Sequence[PendingTransfer | FlowArrays],
    pad: int,
    route_id: Callable[[Path], int] | None = None,
    classes: LinkClasses | None = None,
    path_no: Callable[[Sequence[Path]], np.ndarray] | None = None,
) -> list[FlowArrays]:
    """Queued transfers as blocks of flows, in the order they were started: each run of
    single transfers one block (:func:`new_flows`, same arguments), batches as built."""
    out: list[FlowArrays] = []
    run: list[PendingTransfer] = []
    for item in [*pending, None]:
        if run and not isinstance(item, tuple):
            paths, nbytes, lats, caps, events, tags = zip(*run, strict=True)
            out.append(new_flows(paths, nbytes, lats, caps, events, tags, pad, route_id,
                                 classes, path_no))  # fmt: skip
            run = []
        if isinstance(item, FlowArrays):
            out.append(item)
        elif item is not None:
            run.append(item)
    return out


def path_rows(paths: Sequence[Path], pad: int) -> tuple[np.ndarray, np.ndarray]:
    """Every link of each path (a row, padded with ``pad``) and the share on each."""
    lengths = np.array([len(p.links) for p in paths], dtype=np.intp)
    width = int(lengths.max()) if lengths.size else 0
    filled = np.arange(width) < lengths[:, None]
    hops = np.full((lengths.size, width), pad, dtype=np.intp)
    share = np.zeros(hops.shape)
    if lengths.size:
        hops[filled] = np.concatenate([p.links for p in paths])
        share[filled] = np.concatenate([p.shares for p in paths])
    return hops, share


def widen(a: np.ndarray, width: int, pad: float) -> np.ndarray:
    """``a`` with columns of ``pad`` added up to ``width``."""
    if a.shape[1] == width:
        return a
    out = np.full((a.shape[0], width), pad, dtype=a.dtype)
    out[:, : a.shape[1]] = a
    return out
