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
the real :func:`~sim.collectives.simulate.simulate_collective`. Points and their GPU
groups: :mod:`calibrate.points`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from calibrate.points import (
    MAX_CLASSES,
    Point,
    crossed_keys,
    group_for,
    points_from,
    step_scopes,
)
from sim.collectives.channels import CAPPED
from sim.collectives.engine import SCOPE_NAME, RouteCache, step_cost
from sim.collectives.gloo import local_bytes, local_rate_Bps
from sim.collectives.links import LinkKey, link_keys
from sim.collectives.params import (
    PROTOCOLS,
    AlgorithmParams,
    ChannelParams,
    CollectiveParams,
)
from sim.collectives.schedule import Schedule
from sim.collectives.simulate import CollectiveSetup, simulate_collective
from sim.errors import CalibrationError
from sim.topology.model import Topology

__all__ = ["MAX_CLASSES", "FastModel", "Point", "crossed_keys", "group_for", "points_from",
           "step_scopes"]  # fmt: skip


@dataclass(frozen=True)
class _Compiled:
    """One algorithm's schedule for one point, reduced to arrays (see module docstring)."""

    algorithm: str
    latency_s: np.ndarray  # per transfer
    load_per_line: np.ndarray  # (transfers, classes): s per payload byte-load at line rate
    src_payload: np.ndarray  # per transfer: payload its sender sends in the step (bytes)
    starts: np.ndarray  # first transfer of each step
    mult: np.ndarray  # repetitions of each step
    scope: np.ndarray  # scope index of each step
    synced: np.ndarray  # 1.0 where the step pays its step latency, 0.0 in streamed phases
    overlap: np.ndarray  # True where the step latency may overlap the data (ring steps)
    step_payload: np.ndarray  # per step: most payload bytes one rank sends
    size_bytes: float
    n_ranks: int
    max_channels: int
    local_bytes: float  # gloo: torch's local copies per rank (sim.collectives.gloo)


class FastModel:
    """The closed form ``auto`` uses, compiled for many parameter values (times in s).

    Every (point, algorithm, chunking) candidate that ``auto`` considers is flattened into
    one set of arrays (transfers, steps, candidates), so one prediction is a few numpy
    operations per protocol whatever the number of points; identical cases (the same
    setup, op and size, such as nccl-tests' in-place and out-of-place columns) are
    compiled once, and transfers of a step with equal costs are kept once (a step costs
    its slowest transfer).
    """

    def __init__(self, points: Sequence[Point]) -> None:
        self.points = list(points)
        self._unit: dict[int, tuple[list[RouteCache], list[int]]] = {}
        self.keys: list[LinkKey] = []  # link classes over every point's topology
        keys: dict[tuple[int, str, int], int] = {}
        self.case_of_point = np.array(
            [keys.setdefault((id(p.setup), p.op, p.size_bytes), len(keys)) for p in self.points],
            dtype=np.intp,
        )
        first = {k: p for p in reversed(self.points) for k in [(id(p.setup), p.op, p.size_bytes)]}
        self.compiled = [self._compile(first[k]) for k in keys]
        self._flatten()

    def _unit_routes(self, topo: Topology) -> tuple[list[RouteCache], list[int]]:
        """One RouteCache per link class on a copy where only that class has finite
        (line-rate) capacity, and the class's index in :attr:`keys`."""
        key = id(topo)
        if key not in self._unit:
            keys, index = link_keys(topo)
            caches = []
            for k in range(len(keys)):
                finite = np.where(index == k, 1.0, math.inf)
                caches.append(RouteCache(topo.scaled(finite)))
            self._unit[key] = (caches, [self._key_index(kk) for kk in keys])
        return self._unit[key]

    def _key_index(self, key: LinkKey) -> int:
        if key not in self.keys:
            self.keys.append(key)
        return self.keys.index(key)

    def _compile(self, p: Point) -> list[_Compiled]:
        out = []
        algos = dict.fromkeys(a for a, _ in p.setup.candidates(p.op, "auto", "auto"))
        for algo in algos:
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
        units, cols = self._unit_routes(p.topology)
        if len(self.keys) > MAX_CLASSES:
            raise CalibrationError(f"more than {MAX_CLASSES} link classes in the measured groups")
        rows_, starts, mult, scope, synced, overlap, payload = [], [], [], [], [], [], []
        count = 0
        for phase in sched.phases:
            reps = range(1) if phase.uniform else range(phase.repeat)
            for k in reps:
                trs = phase.steps(k)
                if not trs:
                    continue
                costs = [step_cost(sched, trs, endpoints, u) for u in units]
                drains = np.zeros((len(trs), MAX_CLASSES))
                for c, col in zip(costs, cols, strict=True):
                    drains[:, col] = c.drain_s
                # A step costs its slowest transfer: transfers with equal costs are one.
                rows = np.unique(
                    np.column_stack([costs[0].latency_s, drains, costs[0].src_payload_bytes]),
                    axis=0,
                )
                rows_.append(rows)
                starts.append(count)
                mult.append(phase.repeat if phase.uniform else 1)
                scope.append(SCOPE_NAME.index(costs[0].scope))
                synced.append(0.0 if phase.streamed else 1.0)
                overlap.append(phase.overlap)
                payload.append(float(costs[0].src_payload_bytes.max()))
                count += len(rows)
        r = np.concatenate(rows_)
        return _Compiled(sched.algorithm, r[:, 0], r[:, 1:-1], r[:, -1],
                         np.array(starts, dtype=np.intp), np.array(mult, dtype=float),
                         np.array(scope, dtype=np.intp), np.array(synced), np.array(overlap),
                         np.array(payload), float(p.size_bytes), sched.n,
                         p.setup.max_nccl_channels,
                         local_bytes(p.op, sched.n, p.size_bytes) if sched.algorithm == "gloo" else 0.0)  # fmt: skip

    def _flatten(self) -> None:
        """Concatenate every candidate's arrays (global transfer/step/candidate indices)."""
        cands = [c for cs in self.compiled for c in cs]
        self.algos = sorted({c.algorithm for c in cands})
        n_tr = np.array([len(c.latency_s) for c in cands], dtype=np.intp)
        n_st = np.array([len(c.starts) for c in cands], dtype=np.intp)
        tr_off = np.concatenate([[0], np.cumsum(n_tr)[:-1]]).astype(np.intp)
        self.latency_s = np.concatenate([c.latency_s for c in cands])
        self.load_per_line = np.asfortranarray(np.concatenate([c.load_per_line for c in cands]))
        self.src_payload = np.concatenate([c.src_payload for c in cands])
        self.starts = np.concatenate([c.starts + off for c, off in zip(cands, tr_off, strict=True)])
        self.mult = np.concatenate([c.mult for c in cands])
        self.step_scope = np.concatenate([c.scope for c in cands])
        self.synced = np.concatenate([c.synced for c in cands])
        self.overlap = np.concatenate([c.overlap for c in cands])
        self.step_payload = np.concatenate([c.step_payload for c in cands])
        self.cand_algo = np.array([self.algos.index(c.algorithm) for c in cands], dtype=np.intp)
        self.cand_size = np.array([c.size_bytes for c in cands])
        self.cand_ranks = np.array([c.n_ranks for c in cands], dtype=float)
        self.cand_max_ch = np.array([c.max_channels for c in cands], dtype=float)
        self.cand_local = np.array([c.local_bytes for c in cands])
        self.cand_capped = np.array([c.algorithm in CAPPED for c in cands])
        self.cand_ring = np.array([c.algorithm == "ring" for c in cands])
        self.cand_of_transfer = np.repeat(np.arange(len(cands)), n_tr)
        self.cand_of_step = np.repeat(np.arange(len(cands)), n_st)
        self.step_of_transfer = np.repeat(
            np.arange(len(self.starts)), np.diff(np.append(self.starts, len(self.latency_s)))
        )
        self.step_algo = self.cand_algo[self.cand_of_step]
        per_case = np.array([len(cs) for cs in self.compiled], dtype=np.intp)
        self.case_starts = np.concatenate([[0], np.cumsum(per_case)[:-1]]).astype(np.intp)
        self.case_of_cand = np.repeat(np.arange(len(per_case)), per_case)

    def _channel_count(self, channels: ChannelParams, proto: str) -> np.ndarray:
        """Per-candidate NCCL channel count (as :func:`sim.collectives.channels.channel_count`)."""
        per = np.full(
            len(self.cand_size), channels.threads[proto] * channels.thread_threshold_bytes[proto]
        )
        if proto == "ll":  # NCCL multiplies the ring LL threshold by the rank count
            per = np.where(self.cand_ring, per * self.cand_ranks, per)
        return np.maximum(1.0, np.minimum(self.cand_max_ch, np.floor(self.cand_size / per)))

    def predict(self, params: CollectiveParams, softness: float = 0.0) -> np.ndarray:
        """Predicted time (s) of every point under ``params`` (best algorithm/protocol).

        ``softness`` 0 is the tuner's hard minimum over (algorithm, protocol, chunking)
        candidates, exactly as the simulator picks. ``softness`` tau > 0 replaces it by a
        Boltzmann-weighted mean of the candidates' log times (weights
        ``exp(-(log t_i - log t_min) / tau)``), and the maxima over link classes, over the
        link and channel limits, and over a step's transfers by the same kind of soft
        maximum (relative gaps over ``tau``). Each is smooth, equals the hard choice where
        candidates tie or are far apart, and has no bias from the number of candidates;
        fits use it so the objective has no kinks where a choice or a bottleneck switches.
        """
        inv = np.zeros(MAX_CLASSES)
        inv[: len(self.keys)] = [1.0 / params.link_factor(*k) for k in self.keys]
        cols = self.load_per_line[:, : len(self.keys)] * inv[: len(self.keys)]
        drain = cols.max(axis=1)
        if softness > 0:
            drain = _soft_max(cols, drain, softness)
        algos = [params.algorithm(a) for a in self.algos]
        times = [self._protocol_times(params, algos, p, drain, softness) for p in PROTOCOLS]
        t_all = np.stack([t for t in times if t is not None], axis=1)  # (candidates, protos)
        if self.cand_local.any():  # gloo's local copies (simulate_collective adds the same)
            t_all = t_all + (self.cand_local / local_rate_Bps(params))[:, None]
        best = np.minimum.reduceat(t_all.min(axis=1), self.case_starts)
        if softness > 0:  # Boltzmann-weighted mean of log times: the choice, smoothed
            log_t = np.log(t_all)
            gap = log_t - np.log(best)[self.case_of_cand][:, None]
            w = np.exp(-np.where(np.isfinite(gap), gap, np.inf) / softness)
            wl = np.where(w > 0, w * np.where(np.isfinite(log_t), log_t, 0.0), 0.0)
            mean = np.add.reduceat(wl.sum(axis=1), self.case_starts) / np.add.reduceat(
                w.sum(axis=1), self.case_starts
            )
            best = np.exp(mean)
        return best[self.case_of_point]

    def _protocol_times(self, params: CollectiveParams, algos: list[AlgorithmParams], proto: str,
                        drain: np.ndarray, softness: float) -> np.ndarray | None:  # fmt: skip
        """Every candidate's time under ``proto`` (inf where the algorithm lacks it)."""
        has = np.array([proto in a.protocols for a in algos])
        if not has.any():
            return None
        eff = np.array([a.efficiency for a in algos])
        base = np.array([a.base_latency_s.get(proto, math.inf) for a in algos])
        step_lat = np.array(
            [[a.step_latency_s[s].get(proto, 0.0) for s in SCOPE_NAME] for a in algos]
        )
        scale = 1.0 / (params.protocol_efficiency[proto] * eff)
        link = drain * scale[self.cand_algo][self.cand_of_transfer]
        nc = self._channel_count(params.channels, proto)
        rate = np.where(self.cand_capped, nc * params.channels.bandwidth_Bps[proto], np.inf)
        chan = self.src_payload / rate[self.cand_of_transfer]
        busy = np.maximum(link, chan)
        if softness > 0:
            busy = _soft_max2(link, chan, busy, softness)
        val = self.latency_s + busy
        steps = np.maximum.reduceat(val, self.starts)
        if softness > 0:  # a step's slowest transfer, smoothed the same way
            steps = _soft_segment_max(val, steps, self.step_of_transfer, self.starts, softness)
        lat = self.synced * step_lat[self.step_algo, self.step_scope]
        fills = self.step_payload / nc[self.cand_of_step] >= params.channels.slice_bytes
        both = self.overlap & fills & self.cand_capped[self.cand_of_step]
        contrib = self.mult * np.where(both, np.maximum(steps, lat), steps + lat)
        n_c = len(self.cand_algo)
        t = base[self.cand_algo] + np.bincount(self.cand_of_step, contrib, minlength=n_c)
        return np.where(has[self.cand_algo], t, math.inf)


def _soft_max(x: np.ndarray, m: np.ndarray, tau: float) -> np.ndarray:
    """Row-wise Boltzmann soft maximum of non-negative ``x`` (``m`` its row maxima).

    ``sum(w * x) / sum(w)`` with ``w = exp((x / m - 1) / tau)``: smooth, never above the
    maximum, and equal to it where the top entries tie (no bias from the count of terms).
    """
    safe = np.where(m > 0, m, 1.0)
    w = np.exp((x / safe[:, None] - 1.0) / tau)
    return np.sum(w * x, axis=1) / np.sum(w, axis=1)


def _soft_max2(a: np.ndarray, b: np.ndarray, m: np.ndarray, tau: float) -> np.ndarray:
    """:func:`_soft_max` of two columns without stacking them (``m`` their maxima)."""
    safe = np.where(m > 0, m, 1.0)
    wa = np.exp((a / safe - 1.0) / tau)
    wb = np.exp(np.where(np.isfinite(b), b / safe - 1.0, -np.inf) / tau)
    return (wa * a + np.where(wb > 0, wb * b, 0.0)) / (wa + wb)


def _soft_segment_max(
    x: np.ndarray, m: np.ndarray, seg: np.ndarray, starts: np.ndarray, tau: float
) -> np.ndarray:
    """:func:`_soft_max` over segments (``seg`` per entry, ``m`` the segment maxima)."""
    safe = np.where(m > 0, m, 1.0)
    w = np.exp((x / safe[seg] - 1.0) / tau)
    return np.add.reduceat(w * x, starts) / np.add.reduceat(w, starts)


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
