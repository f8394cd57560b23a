"""Measured collectives as simulator cases: GPU groups, points, and a fast closed form.

A measurement file becomes :class:`Point` objects: one per record, each tied to a
:class:`~sim.collectives.simulate.CollectiveSetup` on the group of GPUs that ran it
(:func:`group_for`: ``gpus_per_node`` GPUs on each of the first ``nodes`` servers).

:class:`FastModel` is the simulator's own closed form (``predict_step_sync``, the cost
model ``auto`` picks with) compiled once per point for any parameter values (streamed pipeline phases pay no
per-step latency, as there): schedules
and per-step link loads do not depend on the parameters, only the link efficiencies,
protocol/algorithm efficiencies and latencies do. Per transfer it keeps the latency and,
per scope, the most loaded link's ``load / line rate``; a parameter vector then costs a
few numpy operations instead of rebuilding schedules. Fitting uses it; validation runs
the real :func:`~sim.collectives.simulate.simulate_collective`.

>>> from sim.topology.presets import load_topology
>>> group_for(load_topology("h100-ib-ndr", nodes=2), nodes=2, gpus_per_node=1)
('n0.gpu0', 'n1.gpu0')
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from calibrate.measurements import CollectiveRecord, Measurements
from sim.collectives.algorithms import ALGORITHMS, applicable
from sim.collectives.engine import SCOPE_NAME, RouteCache, step_cost
from sim.collectives.params import CollectiveParams, default_params
from sim.collectives.schedule import Schedule
from sim.collectives.simulate import CollectiveSetup, simulate_collective
from sim.errors import CalibrationError
from sim.topology.model import Topology

__all__ = ["FastModel", "Point", "group_for", "points_from", "step_scopes"]


def group_for(topology: Topology, nodes: int, gpus_per_node: int) -> tuple[str, ...]:
    """GPU names: ``gpus_per_node`` GPUs on each of the first ``nodes`` servers.

    Raises
    ------
    CalibrationError
        When the topology has fewer servers, or servers with fewer GPUs.
    """
    if nodes < 1 or gpus_per_node < 1:
        raise CalibrationError(
            f"group: need nodes >= 1 and gpus per node >= 1, got {nodes}, {gpus_per_node}"
        )
    if nodes > topology.nodes or gpus_per_node > topology.gpus_per_node:
        raise CalibrationError(
            f"group of {nodes} node(s) x {gpus_per_node} GPU(s) does not fit topology "
            f"{topology.name!r} ({topology.nodes} node(s) x {topology.gpus_per_node} GPUs); "
            "pass --nodes/--gpus or a larger topology"
        )
    per_node: dict[int, list[str]] = {}
    for g in topology.gpus:
        per_node.setdefault(topology.node_of(g), []).append(g)
    servers = sorted(per_node)[:nodes]
    return tuple(g for s in servers for g in per_node[s][:gpus_per_node])


def placement(m: Measurements, n_ranks: int, topology: Topology, nodes: int | None,
              gpus: int | None) -> tuple[int, int]:  # fmt: skip
    """(nodes, GPUs per node) of a file: its meta, else ``nodes``/``gpus``, else packed.

    Raises
    ------
    CalibrationError
        When nodes × GPUs per node is not the file's rank count.
    """
    n_nodes = m.meta.nodes or nodes
    gpn = m.meta.gpus_per_node or gpus
    if n_nodes is None and gpn is None:
        gpn = min(n_ranks, topology.gpus_per_node)
    if n_nodes is None:
        n_nodes = max(1, math.ceil(n_ranks / gpn)) if gpn else 1
    if gpn is None:
        gpn = max(1, n_ranks // n_nodes)
    if n_nodes * gpn != n_ranks:
        raise CalibrationError(
            f"{m.meta.source}: {n_ranks} ranks do not match {n_nodes} node(s) x {gpn} GPU(s); "
            "pass --nodes N --gpus G with N*G = ranks"
        )
    return n_nodes, gpn


@dataclass(frozen=True)
class Point:
    """One measured collective: the case, the measured time (s) and where it came from."""

    topology: Topology
    setup: CollectiveSetup
    op: str
    size_bytes: int
    time_s: float
    in_place: bool
    source: str


def check_record(r: CollectiveRecord, source: str) -> None:
    """Reject records that cannot be fitted: NaN or non-positive times, sizes < 1 byte."""
    if not math.isfinite(r.time_s) or r.time_s <= 0:
        raise CalibrationError(
            f"{source}: {r.op} of {r.size_bytes} B has time {r.time_s!r} s; times must be finite and > 0"
        )
    if r.size_bytes < 1:
        raise CalibrationError(
            f"{source}: {r.op} has size {r.size_bytes!r} B; sizes must be >= 1 byte"
        )


def points_from(measurements: Sequence[Measurements], topology: Topology, nodes: int | None = None,
                gpus: int | None = None, params: CollectiveParams | None = None) -> list[Point]:  # fmt: skip
    """Every collective record of ``measurements`` as a :class:`Point` on ``topology``.

    ``nodes``/``gpus`` (GPUs per node) apply where a file's meta does not say.
    """
    params = params or default_params()
    points: list[Point] = []
    for m in measurements:
        if m.kind != "collectives":
            continue
        by_n: dict[int, list[CollectiveRecord]] = {}
        for r in m.collectives:
            check_record(r, m.meta.source)
            by_n.setdefault(r.n_ranks, []).append(r)
        for n, recs in sorted(by_n.items()):
            n_nodes, gpn = placement(m, n, topology, nodes, gpus)
            setup = CollectiveSetup(topology, group_for(topology, n_nodes, gpn), params)
            points += [
                Point(topology, setup, r.op, r.size_bytes, r.time_s, r.in_place, m.meta.source)
                for r in recs
            ]
    return points


def step_scopes(setup: CollectiveSetup) -> set[str]:
    """Scopes (nvlink/pcie/net) that steps between the group's GPUs can have."""
    routes = setup.routes
    g = setup.group
    return {SCOPE_NAME[routes.facts(a, b)[2]] for a in g for b in g if a != b}


@dataclass(frozen=True)
class _Compiled:
    """One algorithm's schedule for one point, reduced to arrays (see module docstring)."""

    algorithm: str
    latency_s: np.ndarray  # per transfer
    load_per_line: np.ndarray  # (transfers, 3 scopes): s per payload byte-load at line rate
    starts: np.ndarray  # first transfer of each step
    mult: np.ndarray  # repetitions of each step
    scope: np.ndarray  # scope index of each step
    synced: np.ndarray  # 1.0 where the step pays its step latency, 0.0 in streamed phases


class FastModel:
    """The closed form ``auto`` uses, compiled for many parameter values (times in s)."""

    def __init__(self, points: Sequence[Point]) -> None:
        self.points = list(points)
        self._unit: dict[int, list[RouteCache]] = {}
        self.compiled = [self._compile(p) for p in self.points]

    def _unit_routes(self, topo: Topology) -> list[RouteCache]:
        """One RouteCache per scope on a copy where only that scope has finite capacity."""
        key = id(topo)
        if key not in self._unit:
            self._unit[key] = [
                RouteCache(topo.scaled({s: 1.0 if s == keep else math.inf for s in SCOPE_NAME}))
                for keep in SCOPE_NAME
            ]
        return self._unit[key]

    def _compile(self, p: Point) -> list[_Compiled]:
        out = []
        for algo in ALGORITHMS:
            if not applicable(algo, p.op, p.setup.layout):
                continue
            for chunks in p.setup.chunk_options(p.op, algo, p.size_bytes):
                sched = p.setup.schedule(p.op, algo, p.size_bytes, chunks=chunks)
                out.append(self._compile_schedule(p, sched))
        if not out:
            raise CalibrationError(
                f"{p.source}: no algorithm implements {p.op} on {p.setup.n} ranks"
            )
        return out

    def _compile_schedule(self, p: Point, sched: Schedule) -> _Compiled:
        endpoints = p.setup.endpoints(sched)
        units = self._unit_routes(p.topology)
        lat, load, starts, mult, scope, synced = [], [], [], [], [], []
        count = 0
        for phase in sched.phases:
            reps = range(1) if phase.uniform else range(phase.repeat)
            for k in reps:
                trs = phase.steps(k)
                if not trs:
                    continue
                costs = [step_cost(sched, trs, endpoints, u) for u in units]
                lat.append(costs[0].latency_s)
                load.append(np.stack([c.drain_s for c in costs], axis=1))
                starts.append(count)
                mult.append(phase.repeat if phase.uniform else 1)
                scope.append(SCOPE_NAME.index(costs[0].scope))
                synced.append(0.0 if getattr(phase, "streamed", False) else 1.0)
                count += len(trs)
        return _Compiled(sched.algorithm, np.concatenate(lat), np.concatenate(load),
                         np.array(starts, dtype=np.intp), np.array(mult, dtype=float),
                         np.array(scope, dtype=np.intp), np.array(synced))  # fmt: skip

    def predict(self, params: CollectiveParams) -> np.ndarray:
        """Predicted time (s) of every point under ``params`` (best algorithm/protocol)."""
        inv_eff = np.array([1.0 / params.link_efficiency[s] for s in SCOPE_NAME])
        return np.array([_best(cs, params, inv_eff) for cs in self.compiled])


def _best(cands: Sequence[_Compiled], params: CollectiveParams, inv_eff: np.ndarray) -> float:
    best = math.inf
    for c in cands:
        algo = params.algorithm(c.algorithm)
        drain = (c.load_per_line * inv_eff).max(axis=1)
        for proto in algo.protocols:
            scale = 1.0 / (params.protocol_efficiency[proto] * algo.efficiency)
            steps = np.maximum.reduceat(c.latency_s + drain * scale, c.starts)
            step_lat = np.array([algo.step_latency_s[SCOPE_NAME[s]][proto] for s in range(3)])
            t = algo.base_latency_s[proto] + float(
                np.dot(c.mult, steps + c.synced * step_lat[c.scope])
            )
            best = min(best, t)
    return best


def simulate_points(points: Sequence[Point], params: CollectiveParams) -> list[tuple[float, str]]:
    """(time s, "algorithm/protocol") of each point with the real simulator (analytical)."""
    setups: dict[int, CollectiveSetup] = {}
    out = []
    for p in points:
        key = id(p.setup)
        if key not in setups:
            setups[key] = CollectiveSetup(p.topology, p.setup.group, params)
        r = simulate_collective(setups[key], p.op, p.size_bytes, network="analytical")
        out.append((r.time_s, f"{r.algorithm}/{r.protocol}"))
    return out
