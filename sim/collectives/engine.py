"""Time collective schedules on a network backend.

A schedule's steps are synchronous (see :mod:`sim.collectives.schedule`). Timing model:

``time = base_latency + sum over steps (network time of the step + step_latency[scope])``
(streamed steps, the steady state of a pipelined schedule, pay no step latency: see
:class:`~sim.collectives.schedule.Phase`).

where a transfer of ``b`` payload bytes puts ``b / (protocol efficiency * algorithm
efficiency)`` bytes on the wire and link capacities are line rate times the scope's
link efficiency (``Topology.scaled``). The step's scope is the widest link class any of
its transfers crosses (``net`` > ``pcie`` > ``nvlink``).

Two evaluators, which agree exactly where nothing contends:

- :func:`run_schedule`: a SimPy process on any :class:`~sim.network.base.Network`
  backend. A phase marked ``uniform`` is timed from its first step and the rest skipped
  ahead when ``exclusive`` (no other traffic on the network): identical steps on an idle
  network take identical time, so this is exact, and it is what makes a 1024-GPU ring fast.
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
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import simpy

from sim.collectives.params import AlgorithmParams, CollectiveParams
from sim.collectives.schedule import Schedule, Transfer
from sim.network.base import Network
from sim.topology.model import Topology

__all__ = [
    "RouteCache",
    "StepCost",
    "predict_step_sync",
    "run_schedule",
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
    """Per-(src, dst) route facts: links, total latency (s), scope rank."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self._facts: dict[tuple[str, str], tuple[float, float, int]] = {}
        self._links: dict[tuple[str, str], np.ndarray] = {}

    def facts(self, src: str, dst: str) -> tuple[float, float, int]:
        """``(latency_s, capacity_Bps, scope_rank)`` of the route; capacity inf for src == dst."""
        key = (src, dst)
        f = self._facts.get(key)
        if f is None:
            topo = self.topology
            idx = self.links(src, dst)
            if len(idx):
                scope = max(SCOPE_RANK[topo.link_scope[i]] for i in idx)
                f = (float(topo.latency_s[idx].sum()), float(topo.capacity_Bps[idx].min()), scope)
            else:
                f = (0.0, float("inf"), 0)
            self._facts[key] = f
        return f

    def links(self, src: str, dst: str) -> np.ndarray:
        """Link indices of the route (int array)."""
        key = (src, dst)
        a = self._links.get(key)
        if a is None:
            a = np.asarray(self.topology.route(src, dst), dtype=np.intp)
            self._links[key] = a
        return a

    def step_scope(self, transfers: Sequence[Transfer], endpoints: Sequence[str]) -> str:
        """Widest scope crossed by any transfer of a step."""
        rank = 0
        for t in transfers:
            rank = max(rank, self.facts(endpoints[t.src], endpoints[t.dst])[2])
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
    topo = routes.topology
    pairs = [(endpoints[t.src], endpoints[t.dst]) for t in trs]
    facts = [routes.facts(a, b) for a, b in pairs]
    lat = np.array([f[0] for f in facts], dtype=float)
    size = np.array([len(t.chunks) for t in trs], dtype=float) * sched.chunk_bytes
    paths = [routes.links(a, b) for a, b in pairs]
    counts = np.array([len(p) for p in paths], dtype=np.intp)
    scope = SCOPE_NAME[max((f[2] for f in facts), default=0)]
    sent = sender_payload(sched, trs)
    if not counts.sum():
        return StepCost(lat, np.zeros(len(trs)), scope, sent)
    flat = np.concatenate(paths)
    owner = np.repeat(np.arange(len(trs)), counts)
    load = np.zeros(len(topo.capacity_Bps))
    np.add.at(load, flat, size[owner])
    per_link = load[flat] / topo.capacity_Bps[flat]
    drain = np.zeros(len(trs))
    np.maximum.at(drain, owner, per_link)
    return StepCost(lat, drain, scope, sent)


def predict_step_sync(
    sched: Schedule,
    endpoints: Sequence[str],
    routes: RouteCache,
    params: CollectiveParams,
    protocols: Sequence[str] | None = None,
    rate_cap_Bps: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Closed-form time (s) of ``sched`` per protocol (no fair-sharing dynamics).

    Each transfer costs ``latency + max(wire factor * max over its links (step load /
    capacity), sender's step payload / rate cap)``; a step costs its slowest transfer plus
    the step latency of its scope. ``rate_cap_Bps[protocol]`` is a rank's NCCL channel
    rate (:func:`sim.collectives.channels.channel_rate_Bps`; none: uncapped). Uniform
    phases are costed once and multiplied.

    >>> # see tests/test_collective_engine.py for closed-form checks
    """
    algo: AlgorithmParams = params.algorithm(sched.algorithm)
    protos = [p for p in (protocols or algo.protocols) if p in algo.protocols]
    total = {p: algo.base_latency_s[p] for p in protos}
    scale = {p: wire_scale(params, sched.algorithm, p) for p in protos}
    cap = {p: (rate_cap_Bps or {}).get(p, math.inf) for p in protos}
    for phase in sched.phases:
        reps = range(1) if phase.uniform else range(phase.repeat)
        mult = phase.repeat if phase.uniform else 1
        for k in reps:
            trs = phase.steps(k)
            if not trs:
                continue
            c = step_cost(sched, trs, endpoints, routes)
            for p in protos:
                busy = c.drain_s * scale[p]
                if math.isfinite(cap[p]):
                    busy = np.maximum(busy, c.src_payload_bytes / cap[p])
                t = float(np.max(c.latency_s + busy))
                lat = 0.0 if phase.streamed else algo.step_latency_s[c.scope][p]
                total[p] += mult * (t + lat)
    return {p: float(v) for p, v in total.items()}


def run_schedule(
    env: simpy.Environment,
    network: Network,
    sched: Schedule,
    endpoints: Sequence[str],
    routes: RouteCache,
    params: CollectiveParams,
    protocol: str,
    exclusive: bool = False,
    rate_cap_Bps: float = math.inf,
) -> Generator[simpy.Event, object, None]:
    """SimPy process body: run ``sched`` on ``network`` with ``protocol``.

    Parameters
    ----------
    endpoints : sequence of str
        Graph node of each participant (ranks, then in-network reducers).
    exclusive : bool
        True when nothing else uses the network meanwhile; lets uniform phases be timed
        from one step (exact). Leave False inside a training step with other traffic.
    rate_cap_Bps : float
        A rank's NCCL channel rate (payload bytes/s): each transfer is capped at its share
        of its sender's step payload (:func:`predict_step_sync` charges the same).
    """
    algo = params.algorithm(sched.algorithm)
    scale = wire_scale(params, sched.algorithm, protocol)
    capped = math.isfinite(rate_cap_Bps)
    yield env.timeout(algo.base_latency_s[protocol])
    for phase in sched.phases:
        k = 0
        while k < phase.repeat:
            t0 = env.now
            skip = exclusive and phase.uniform and phase.repeat > 1
            before = network.link_bytes.copy() if skip else None
            trs = phase.steps(k)
            sent = sender_payload(sched, trs) if capped else None
            events = []
            for i, t in enumerate(trs):
                payload = len(t.chunks) * sched.chunk_bytes
                limit = math.inf
                if sent is not None and sent[i] > 0:
                    limit = rate_cap_Bps * payload / float(sent[i]) * scale
                events.append(
                    network.transfer(endpoints[t.src], endpoints[t.dst], payload * scale, limit)
                )
            if events:
                yield env.all_of(events)
                if not phase.streamed:
                    yield env.timeout(
                        algo.step_latency_s[routes.step_scope(trs, endpoints)][protocol]
                    )
            k += 1
            if before is not None and k < phase.repeat:
                rest = phase.repeat - k
                network.link_bytes += (network.link_bytes - before) * rest
                yield env.timeout((env.now - t0) * rest)
                k = phase.repeat


def scope_bytes(topology: Topology, link_bytes: np.ndarray) -> Mapping[str, float]:
    """Sum wire bytes per scope (``nvlink``, ``pcie``, ``net``) from per-link counters."""
    out = dict.fromkeys(SCOPE_NAME, 0.0)
    scopes = np.asarray(topology.link_scope)
    for s in SCOPE_NAME:
        if len(scopes):
            out[s] = float(link_bytes[scopes == s].sum())
    return out
