"""Schedule steps as arrays, for the closed form and link counters at thousands of ranks.

A step of a 2,048-rank tree has tens of thousands of transfers; costing it one
:class:`~sim.collectives.schedule.Transfer` at a time (route lookup, link gather, a
``numpy.add.at`` per transfer) made the tuner take seconds per candidate. Here each route
``(src, dst, rail)`` gets a number the first time it is seen (:class:`RouteTable`, its
links and shares kept in one CSR array), a step becomes three arrays (route number,
chunk count and sender per transfer: :class:`StepArrays`), and the step's cost is a
handful of vectorised operations. A pipelined phase's slot is the concatenation of the
base steps in flight (``Phase.parts``), so each base step is turned into arrays once.

The arithmetic is the per-transfer code's, in the same order (loads and sender totals
summed in transfer order), so the results are bit-identical to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Protocol

import numpy as np

from sim.collectives.schedule import Phase, Schedule, Transfer
from sim.topology.model import Topology
from sim.topology.paths import Path, latencies

__all__ = [
    "RouteTable",
    "StepArrays",
    "StepMemo",
    "cached_step",
    "phase_step",
    "step_arrays",
    "step_loads",
]

# Transfer's fields by position (src, dst, chunks, rail)
_SRC, _DST, _CHUNKS, _RAIL = itemgetter(0), itemgetter(1), itemgetter(2), itemgetter(4)

#: Most transfers whose step arrays a route table keeps across schedules (about 24 bytes
#: each): the steps of a sweep's sizes past that are converted again.
MAX_KEPT_TRANSFERS = 8_000_000

#: A step's link loads are summed over every link of the topology (one ``bincount``)
#: when its link crossings times this reach the link count, else over the links it
#: touches (a sort). Both sum each link's load in transfer order: the same bits.
DENSE_RATIO = 16


#: Links whose route facts :meth:`RouteTable.freeze` computes in one go (bounds its
#: temporary arrays on adaptive routes of hundreds of links each).
FACTS_CHUNK_LINKS = 1 << 20


#: Fewer new routes than this are costed one by one at a freeze, where the arrays' fixed
#: cost is more (a 1,024-GPU step on the flow network freezes 152 times, 1-19 new routes).
FEW_ROUTES = 32


class _Routes(Protocol):  # sim.collectives.engine.RouteCache
    topology: Topology

    def path(self, src: str, dst: str, rail: int = -1) -> Path: ...

    def scope_ranks(self) -> np.ndarray: ...


class RouteTable:
    """Routes numbered in order of first use; their links and shares in CSR arrays.

    Attributes (after :meth:`freeze`): ``ptr`` (route ``i``'s links are
    ``links[ptr[i]:ptr[i+1]]``), ``links``, ``shares``, ``latency_s`` and ``scope``
    (scope rank) per route, ``count`` (links per route).
    """

    def __init__(self, routes: _Routes) -> None:
        self.routes = routes
        self._ids: dict[tuple[str, str, int], int] = {}
        self._keys: list[tuple[str, str, int]] = []  # route number -> key (filled on demand)
        self._paths: list[Path] = []
        self._frozen = 0  # routes in the arrays below
        self.lossy = bool(np.any(routes.topology.link_loss > 0))
        self.ptr = np.zeros(1, dtype=np.intp)
        self.links = np.zeros(0, dtype=np.intp)
        self.shares = np.zeros(0)
        self.latency_s = np.zeros(0)
        self.scope = np.zeros(0, dtype=np.intp)
        self.count = np.zeros(0, dtype=np.intp)
        # step arrays by (Schedule.key, phase index, step): equal keys, equal steps
        self.steps: dict[tuple[object, ...], StepArrays] = {}
        self.kept = 0  # transfers in ``steps``
        # a kept step's facts at one byte per chunk, by id (the step is kept alive beside)
        self.unit: dict[int, tuple[StepArrays, Any]] = {}

    def id(self, src: str, dst: str, rail: int) -> int:
        """The number of route ``src -> dst`` on ``rail`` (assigned on first use)."""
        key = (src, dst, rail)
        i = self._ids.get(key)
        if i is None:
            i = self._ids[key] = len(self._paths)
            self._paths.append(self.routes.path(src, dst, rail))
        return i

    def ids(self, keys: Sequence[tuple[str, str, int]]) -> list[int]:
        """:meth:`id` of each ``(src, dst, rail)`` key, numbered in the same order (one
        dict lookup per key where every route is known)."""
        got = list(map(self._ids.get, keys))
        if None in got:
            rid = self.id
            return [rid(*k) if i is None else i for k, i in zip(keys, got, strict=True)]
        return got  # type: ignore[return-value]  # no None left

    @property
    def paths(self) -> list[Path]:
        """Route ``i``'s :class:`~sim.topology.paths.Path` at index ``i``."""
        return self._paths

    def endpoints(self, i: int) -> tuple[str, str, int]:
        """``(src, dst, rail)`` of route ``i`` (graph node names)."""
        if len(self._keys) < len(self._ids):
            self._keys = list(self._ids)
        return self._keys[i]

    def freeze(self) -> None:
        """Bring the CSR arrays up to date with every route numbered so far."""
        if self._frozen == len(self._paths):
            return
        new = self._paths[self._frozen :]
        counts = np.array([len(p.links) for p in new], dtype=np.intp)
        self.ptr = np.concatenate([self.ptr, self.ptr[-1] + np.cumsum(counts)])
        self.links = np.concatenate([self.links, *(p.links for p in new)]).astype(np.intp)
        self.shares = np.concatenate([self.shares, *(p.shares for p in new)])
        self.count = np.diff(self.ptr)
        lat, scope = self._facts(self._frozen)
        self.latency_s = np.concatenate([self.latency_s, lat])
        self.scope = np.concatenate([self.scope, scope])
        self._frozen = len(self._paths)

    def _facts(self, first: int) -> tuple[np.ndarray, np.ndarray]:
        """Latency (s: :meth:`~sim.topology.paths.Path.latency_s`) and scope rank (the
        widest link class crossed; 0 for an empty route) of routes ``first`` onwards,
        from the CSR arrays, in chunks of about :data:`FACTS_CHUNK_LINKS` links (under
        :data:`FEW_ROUTES` routes, from each path)."""
        topo, rank = self.routes.topology, self.routes.scope_ranks()
        a, end = first, len(self.count)
        if end - a < FEW_ROUTES:  # route by route: less than the arrays' fixed cost
            paths = self._paths[a:end]
            few = [int(rank[p.links].max()) if len(p.links) else 0 for p in paths]
            return np.array([p.latency_s(topo.latency_s) for p in paths]), np.array(few, np.intp)
        lat, scope = [np.zeros(0)], [np.zeros(0, dtype=np.intp)]
        while a < end:
            b = int(np.searchsorted(self.ptr, self.ptr[a] + FACTS_CHUNK_LINKS, "right")) - 1
            b = min(max(b, a + 1), end)
            ptr = self.ptr[a : b + 1]
            lat.append(latencies(ptr, self.links, self.shares, topo.latency_s))
            widest = np.zeros(b - a, dtype=np.intp)
            some = np.flatnonzero(self.count[a:b])
            if some.size:  # max over each non-empty route's links
                ranks = rank[self.links[ptr[0] : ptr[-1]]]
                widest[some] = np.maximum.reduceat(ranks, ptr[some] - ptr[0])
            scope.append(widest)
            a = b
        return np.concatenate(lat), np.concatenate(scope)


@dataclass(frozen=True)
class StepArrays:
    """One step: per transfer its route number, chunk count and sender (participant)."""

    route: np.ndarray
    chunks: np.ndarray
    src: np.ndarray

    def __len__(self) -> int:
        return len(self.route)

    @staticmethod
    def join(parts: Sequence[StepArrays]) -> StepArrays:
        """The steps' transfers one after the other (a pipelined slot)."""
        if len(parts) == 1:
            return parts[0]
        return StepArrays(
            np.concatenate([p.route for p in parts]),
            np.concatenate([p.chunks for p in parts]),
            np.concatenate([p.src for p in parts]),
        )


def step_arrays(trs: Sequence[Transfer], endpoints: Sequence[str], table: RouteTable) -> StepArrays:
    """``trs`` as arrays, routes numbered in ``table``."""
    n, name = len(trs), endpoints.__getitem__
    # C-level maps over the named tuples' fields: tens of thousands of transfers per tuning
    srcs, dsts = map(name, map(_SRC, trs)), map(name, map(_DST, trs))
    keys = list(zip(srcs, dsts, map(_RAIL, trs), strict=True))
    route = np.array(table.ids(keys), dtype=np.intp) if n else np.zeros(0, dtype=np.intp)
    chunks = np.fromiter(map(len, map(_CHUNKS, trs)), float, n)
    src = np.fromiter(map(_SRC, trs), np.intp, n)
    return StepArrays(route, chunks, src)


class StepMemo:
    """What one pass over a schedule's steps keeps, so that equal steps are one object.

    A pipelined phase's slot joins the base steps in flight. Base steps that differ only
    in the chunk ids they carry (NVLS-tree's ring steps over the servers, a ring's steps)
    give equal arrays; they are kept once (``content``), so slots made of equal base
    steps join to one object (``joins``), costed once by the engine's one-byte cache
    (keyed by identity). Equal arrays give equal costs bit for bit, so nothing changes
    but the work.
    """

    def __init__(self) -> None:
        # base step list's identity -> (the list, kept alive; its arrays)
        self.base: dict[int, tuple[object, StepArrays]] = {}
        self.content: dict[tuple[bytes, bytes, bytes], StepArrays] = {}
        # identities of the parts -> (the parts, kept alive; their join)
        self.joins: dict[tuple[int, ...], tuple[tuple[StepArrays, ...], StepArrays]] = {}

    def arrays(
        self, base: Sequence[Transfer], endpoints: Sequence[str], table: RouteTable
    ) -> StepArrays:
        """``base`` as arrays (:func:`step_arrays`), one object per distinct content."""
        hit = self.base.get(id(base))
        if hit is None:
            step = step_arrays(base, endpoints, table)
            key = (step.route.tobytes(), step.chunks.tobytes(), step.src.tobytes())
            step = self.content.setdefault(key, step)
            hit = self.base[id(base)] = (base, step)
        return hit[1]

    def join(self, parts: Sequence[StepArrays]) -> StepArrays:
        """:meth:`StepArrays.join` of ``parts``, one object per sequence of part objects."""
        if len(parts) == 1:
            return parts[0]
        key = tuple(map(id, parts))
        hit = self.joins.get(key)
        if hit is None:
            hit = self.joins[key] = (tuple(parts), StepArrays.join(parts))
        return hit[1]


def phase_step(
    phase: Phase,
    k: int,
    endpoints: Sequence[str],
    table: RouteTable,
    memo: StepMemo,
) -> StepArrays:
    """Step ``k`` of ``phase`` as arrays; a pipelined phase's base steps converted once
    and equal slots joined once (``memo``)."""
    if phase.parts is None:
        return step_arrays(phase.steps(k), endpoints, table)
    out = [memo.arrays(base, endpoints, table) for base in phase.parts(k)]
    if not out:
        return step_arrays((), endpoints, table)
    return memo.join(out)


def gather(table: RouteTable, step: StepArrays) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every transfer's links one after the other: (links, shares, owning transfer)."""
    flat, share, counts = _gather_counted(table, step)
    return flat, share, np.repeat(np.arange(len(step)), counts)


def _gather_counted(
    table: RouteTable, step: StepArrays
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """As :func:`gather`, with each transfer's link count instead of each link's owner
    (transfer ``i``'s links are the ``counts[i]`` after those of transfers ``< i``)."""
    table.freeze()
    counts = table.count[step.route]
    first = np.cumsum(counts) - counts  # where each transfer's links start in the output
    pos = np.arange(int(counts.sum())) - np.repeat(first - table.ptr[step.route], counts)
    return table.links[pos], table.shares[pos], counts


def sender_totals(step: StepArrays, chunk_bytes: float, n: int) -> np.ndarray:
    """Payload bytes each transfer's sender sends in the step (0 from reducers >= ``n``)."""
    size = step.chunks * chunk_bytes
    ranks = step.src < n
    if not ranks.any():
        return np.zeros(len(step))
    tot = np.bincount(step.src[ranks], weights=size[ranks])
    return np.where(ranks, tot[np.minimum(step.src, len(tot) - 1)], 0.0)


def step_loads(
    table: RouteTable, step: StepArrays, chunk_bytes: float
) -> tuple[np.ndarray, np.ndarray]:
    """Seconds each transfer needs at its most loaded link (wire factor 1), and the links'
    incast-reduced capacities: ``max over its links of step load / capacity``.

    Capacities are line rate less the incast loss of lossy links crossed by several of the
    step's transfers (the analytical network's :func:`sim.network.batch.batch_times_s`, on the touched links only).
    """
    topo = table.routes.topology
    flat, share, counts = _gather_counted(table, step)
    drain = np.zeros(len(step))
    if not len(flat):
        return drain, flat
    size = step.chunks * chunk_bytes
    weight = np.repeat(size, counts) * share
    links = topo.capacity_Bps.size
    if len(flat) * DENSE_RATIO >= links:  # loads over every link: no sort
        load = np.bincount(flat, weights=weight, minlength=links)
        cap = topo.capacity_Bps
        if table.lossy:
            flows = np.bincount(flat, minlength=links)
            cap = cap * (1.0 - topo.link_loss * (1.0 - 1.0 / np.maximum(flows.astype(float), 1.0)))
        idx = flat
    else:  # a few transfers on a large topology: the links touched only
        uniq, idx, flows = np.unique(flat, return_inverse=True, return_counts=True)
        load = np.bincount(idx, weights=weight, minlength=len(uniq))
        cap = topo.capacity_Bps[uniq]
        if table.lossy:
            loss = topo.link_loss[uniq]
            cap = cap * (1.0 - loss * (1.0 - 1.0 / np.maximum(flows.astype(float), 1.0)))
    some = np.flatnonzero(counts)  # each transfer's links are one run: its max by reduceat
    drain[some] = np.maximum.reduceat(load[idx] / cap[idx], (np.cumsum(counts) - counts)[some])
    return drain, flat


def cached_step(
    sched: Schedule,
    i: int,
    k: int,
    endpoints: Sequence[str],
    table: RouteTable,
    memo: StepMemo,
) -> StepArrays:
    """Step ``k`` of phase ``i`` of ``sched`` as arrays (:func:`phase_step`), converted
    once per schedule key (:attr:`Schedule.key`: the sizes of a sweep share their steps)
    while the table keeps fewer than :data:`MAX_KEPT_TRANSFERS` transfers."""
    key = None if sched.key is None else (sched.key, i, k)
    step = table.steps.get(key) if key is not None else None
    if step is None:
        step = phase_step(sched.phases[i], k, endpoints, table, memo)
        if key is not None and table.kept + len(step) <= MAX_KEPT_TRANSFERS:
            table.steps[key] = step
            table.kept += len(step)
    return step
