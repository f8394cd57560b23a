"""Time collective schedules on a network backend.

A schedule's steps are synchronous (see :mod:`sim.collectives.schedule`). Timing model:

``time = base_latency + sum over steps (network time of the step + step_latency[scope])``
(streamed steps, the steady state of a pipelined schedule, pay no step latency; overlapped
steps, a ring's, take ``max(network time, step latency)``: see
:class:`~sim.collectives.schedule.Phase`).

where a transfer of ``b`` payload bytes puts ``b / (protocol efficiency * algorithm
efficiency)`` bytes on the wire and link capacities are line rate times the scope's
link efficiency (``Topology.scaled``). The step's scope is the widest link class any of
its transfers crosses (``net`` > ``pcie`` > ``nvlink``).

Two evaluators, which agree exactly where nothing contends:

- :func:`sim.collectives.process.run_schedule`: a SimPy process on any
  :class:`~sim.network.base.Network` backend. A phase marked ``uniform`` is timed from its
  first step and the rest skipped ahead when ``exclusive`` (no other traffic on the
  network): identical steps on an idle network take identical time, so this is exact, and
  it is what makes a 1024-GPU ring fast.
- :func:`predict_step_sync`: the closed form of the same model without fair sharing:
  a step's transfers load their links together and each transfer takes its latency plus
  the time its most loaded link needs to carry that load (``max_l load_l / capacity_l``).
  With one transfer per link this is alpha-beta on the route's bottleneck, exactly what
  the flow backend gives; where a step's transfers share a link (a tree's slot, several
  ring channels leaving one GPU) it charges the sharing instead of ignoring it.
  Vectorised over protocols; it is the tuner's cost model.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from sim.collectives.channels import CAPPED, overlapped
from sim.collectives.params import AlgorithmParams, CollectiveParams
from sim.collectives.schedule import Phase, Schedule, Transfer
from sim.collectives.steparrays import (
    RouteTable,
    StepArrays,
    StepMemo,
    cached_step,
    gather,
    sender_totals,
    step_arrays,
    step_loads,
)
from sim.topology.model import Topology
from sim.topology.paths import Path

_EMPTY = Path(np.zeros(0, dtype=np.intp))

__all__ = [
    "RouteCache",
    "StepCost",
    "predict_step_sync",
    "schedule_link_bytes",
    "sender_payload",
    "step_cost",
    "wire_scale",
]

SCOPE_RANK = {"nvlink": 0, "pcie": 1, "net": 2}
SCOPE_NAME = ("nvlink", "pcie", "net")


def wire_scale(params: CollectiveParams, algorithm: str, protocol: str) -> float:
    """Wire bytes per payload byte for ``algorithm`` under ``protocol`` (>= 1)."""
    eff = params.protocol_efficiency[protocol] * params.algorithm(algorithm).efficiency
    return 1.0 / eff


class RouteCache:
    """Per-(src, dst, rail) route facts: path (links and shares), latency (s), scope rank."""

    def __init__(self, topology: Topology, rail_map: Sequence[int] = ()) -> None:
        self.topology = topology
        self.rail_map = tuple(rail_map)
        self._facts: dict[tuple[str, str, int], tuple[float, float, int]] = {}
        self._paths: dict[tuple[str, str, int], Path] = {}
        self._scope_rank: np.ndarray | None = None
        self.table = RouteTable(self)  # the same routes, numbered, as arrays

    def nic(self, rail: int) -> int:
        """NIC number a transfer pinned to channel rail ``rail`` leaves through: ``rail``
        itself, or ``rail_map[rail]`` for a group with fewer GPUs per server than NICs
        (each channel on the NIC beside the GPU it enters the server at)."""
        if rail < 0 or not self.rail_map:
            return rail
        return self.rail_map[rail % len(self.rail_map)]

    def facts(self, src: str, dst: str, rail: int = -1) -> tuple[float, float, int]:
        """``(latency_s, capacity_Bps, scope_rank)`` of the route; capacity inf for src == dst."""
        key = (src, dst, rail)
        f = self._facts.get(key)
        if f is None:
            topo = self.topology
            path = self.path(src, dst, rail)
            idx = path.links
            if len(idx):
                scope = int(self.scope_ranks()[idx].max())
                f = (path.latency_s(topo.latency_s), float(topo.capacity_Bps[idx].min()), scope)
            else:
                f = (0.0, float("inf"), 0)
            self._facts[key] = f
        return f

    def scope_ranks(self) -> np.ndarray:
        """:data:`SCOPE_RANK` of every link of the topology (an adaptive route crosses
        hundreds of fabric links: one array lookup, not a loop over them)."""
        if self._scope_rank is None:
            topo = self.topology
            rank = np.zeros(len(topo.link_scope), dtype=np.int8)
            for scope, r in SCOPE_RANK.items():
                rank[topo.scope_mask(scope)] = r  # the masks are cached on the topology
            self._scope_rank = rank
        return self._scope_rank

    def path(self, src: str, dst: str, rail: int = -1) -> Path:
        """The route's links and the share of a transfer's bytes on each (cached)."""
        key = (src, dst, rail)
        p = self._paths.get(key)
        if p is None:
            p = self.topology.path(src, dst, self.nic(rail)) if src != dst else _EMPTY
            self._paths[key] = p
        return p

    def links(self, src: str, dst: str, rail: int = -1) -> np.ndarray:
        """Link indices of the route (int array)."""
        return self.path(src, dst, rail).links

    def step_scope(self, transfers: Sequence[Transfer], endpoints: Sequence[str]) -> str:
        """Widest scope crossed by any transfer of a step."""
        rank = 0
        for t in transfers:
            rank = max(rank, self.facts(endpoints[t.src], endpoints[t.dst], t.rail)[2])
            if rank == 2:
                break
        return SCOPE_NAME[rank]


@dataclass(frozen=True)
class StepCost:
    """Protocol-independent facts of one synchronous step (for the closed form).

    ``drain_s[i]``: seconds transfer ``i`` needs at its most loaded link, given everything
    the step puts on that link, at wire factor 1 (``load / capacity`` at that link).
    ``src_payload_bytes[i]``: payload bytes the sender of transfer ``i`` sends in the
    whole step (0 for in-network reducers), which its NCCL channels must carry.
    """

    latency_s: np.ndarray
    drain_s: np.ndarray  # seconds to drain at wire factor 1
    scope: str
    src_payload_bytes: np.ndarray


def sender_payload(sched: Schedule, trs: Sequence[Transfer]) -> np.ndarray:
    """Payload bytes each transfer's sender sends in the step (0 from reducers).

    >>> from sim.collectives.schedule import Schedule
    >>> s = Schedule("all_reduce", "x", 2, 4, 10.0, ())
    >>> sender_payload(s, [Transfer(0, 1, (0,)), Transfer(0, 1, (1, 2)), Transfer(2, 0, (3,))])
    array([30., 30.,  0.])
    """
    sent: dict[int, float] = {}
    for t in trs:
        if t.src < sched.n:
            sent[t.src] = sent.get(t.src, 0.0) + len(t.chunks) * sched.chunk_bytes
    return np.array([sent.get(t.src, 0.0) for t in trs], dtype=float)


def step_cost(
    sched: Schedule, trs: Sequence[Transfer], endpoints: Sequence[str], routes: RouteCache
) -> StepCost:
    """The :class:`StepCost` of the step made of transfers ``trs``."""
    return cost_of(sched, step_arrays(trs, endpoints, routes.table), routes.table)


#: Steps whose one-byte costing a route table keeps (beyond it, the memo starts afresh).
MAX_UNIT_COSTS = 50_000


def cost_of(sched: Schedule, step: StepArrays, table: RouteTable) -> StepCost:
    """The :class:`StepCost` of a step given as arrays (:mod:`sim.collectives.steparrays`).

    A step kept in ``table`` (its schedule's steps depend on the size only through the
    chunk bytes) is costed once at one byte per chunk: its drain times and payloads are
    linear in the chunk bytes (loads scale, capacities and incast loss do not), so the
    sizes a tuner or a training step asks for scale that one costing.
    """
    if sched.key is not None:
        hit = table.unit.get(id(step))
        if hit is None or hit[0] is not step:
            if len(table.unit) >= MAX_UNIT_COSTS:
                table.unit.clear()
            hit = table.unit[id(step)] = (step, _cost_at(sched, step, table, 1.0))
        unit = hit[1]
        cb = sched.chunk_bytes
        return StepCost(unit.latency_s, unit.drain_s * cb, unit.scope, unit.src_payload_bytes * cb)
    return _cost_at(sched, step, table, sched.chunk_bytes)


def _cost_at(sched: Schedule, step: StepArrays, table: RouteTable, chunk_bytes: float) -> StepCost:
    table.freeze()
    lat = table.latency_s[step.route] if len(step) else np.zeros(0)
    scope = SCOPE_NAME[int(table.scope[step.route].max()) if len(step) else 0]
    drain, _ = step_loads(table, step, chunk_bytes)
    return StepCost(lat, drain, scope, sender_totals(step, chunk_bytes, sched.n))


def predict_step_sync(
    sched: Schedule,
    endpoints: Sequence[str],
    routes: RouteCache,
    params: CollectiveParams,
    protocols: Sequence[str] | None = None,
    nccl_channels: Mapping[str, int] | None = None,
) -> dict[str, float]:
    """Closed-form time (s) of ``sched`` per protocol (no fair-sharing dynamics).

    Each transfer costs ``latency + max(wire factor * max over its links (step load /
    capacity), sender's step payload / channel rate)``; a step costs its slowest transfer
    plus the step latency of its scope (their maximum for an overlapped ring step that
    fills a slice per channel). ``nccl_channels[protocol]`` is the channel count NCCL
    runs the schedule's algorithm on (:mod:`sim.collectives.channels`; none: uncapped).
    Uniform phases are costed once and multiplied.

    >>> # see tests/test_collective_engine.py for closed-form checks
    """
    algo: AlgorithmParams = params.algorithm(sched.algorithm)
    protos = [p for p in (protocols or algo.protocols) if p in algo.protocols]
    total = {p: algo.base_latency_s[p] for p in protos}
    scale = {p: wire_scale(params, sched.algorithm, p) for p in protos}
    nc = {p: (nccl_channels or {}).get(p, 0) for p in protos}
    capped = sched.algorithm in CAPPED
    cap = {
        p: nc[p] * params.channels.bandwidth_Bps[p] if capped and nc[p] else math.inf
        for p in protos
    }
    for phase, step, mult in _costed_steps(sched, endpoints, routes):
        c = cost_of(sched, step, routes.table)
        sent = float(c.src_payload_bytes.max())
        for p in protos:
            busy = c.drain_s * scale[p]
            if math.isfinite(cap[p]):
                busy = np.maximum(busy, c.src_payload_bytes / cap[p])
            t = float(np.max(c.latency_s + busy))
            lat = 0.0 if phase.streamed else algo.step_latency_s[c.scope][p]
            both = phase.overlap and overlapped(params.channels, sent, nc[p])
            total[p] += mult * (max(t, lat) if both else t + lat)
    return {p: float(v) for p, v in total.items()}


def _costed_steps(
    sched: Schedule, endpoints: Sequence[str], routes: RouteCache
) -> Iterator[tuple[Phase, StepArrays, int]]:
    """The non-empty steps of ``sched`` as arrays, each with how many times it counts: a
    uniform phase's first step stands for all ``repeat`` of them."""
    memo = StepMemo()
    for i, phase in enumerate(sched.phases):
        reps = range(1) if phase.uniform else range(phase.repeat)
        mult = phase.repeat if phase.uniform else 1
        for k in reps:
            step = cached_step(sched, i, k, endpoints, routes.table, memo)
            if len(step):
                yield phase, step, mult


def schedule_link_bytes(
    sched: Schedule, endpoints: Sequence[str], routes: RouteCache, scale: float
) -> np.ndarray:
    """Wire bytes ``sched`` puts on every link (uniform phases counted once and
    multiplied): what a network backend's ``link_bytes`` holds after running it.

    >>> # equal to the analytical backend's counters: tests/test_collective_engine.py
    """
    topo = routes.topology
    out = np.zeros(len(topo.capacity_Bps))
    for _, step, mult in _costed_steps(sched, endpoints, routes):
        flat, share, owner = gather(routes.table, step)
        # per transfer (chunks * chunk_bytes * scale * mult), in the order of the
        # per-transfer sum it replaces, then spread over its links by share
        each = step.chunks * sched.chunk_bytes * scale * mult
        np.add.at(out, flat, share * each[owner])
    return out


def scope_bytes(topology: Topology, link_bytes: np.ndarray) -> Mapping[str, float]:
    """Sum wire bytes per scope (``nvlink``, ``pcie``, ``net``) from per-link counters."""
    out = dict.fromkeys(SCOPE_NAME, 0.0)
    if len(topology.link_scope):
        for s in SCOPE_NAME:
            out[s] = float(link_bytes[topology.scope_mask(s)].sum())
    return out
