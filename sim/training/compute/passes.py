"""Durations the training engine schedules: compute passes and collectives, cached.

A *pass* is the forward (``F``) or backward (``B``, recompute included) of one model chunk
for one micro-batch on one rank. Its compute time is the sum of its kernels' times
(:func:`sim.training.compute.kernels.op_time_s`); its TP and EP collectives are timed by
the collective simulator on the real group of GPUs (each alone on the network: they stay
inside an NVLink domain for TP, and are short). A pass is made of *units* (the
embedding, each layer, the head: FSDP's wrapping units), so that the engine can gather
each unit's parameters just before it runs (ZeRO-3) and release gradient buckets as the
backward produces them. Identical layers are costed once.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from sim.catalog import GpuSpec
from sim.collectives.engine import wire_scale
from sim.collectives.links import scaled_for
from sim.collectives.params import CollectiveParams
from sim.collectives.schedule import Schedule
from sim.collectives.simulate import CollectiveSetup, simulate_collective
from sim.collectives.twins import Twin, twin_key
from sim.kept import Kept
from sim.network.batch import batch_times_s
from sim.topology.model import Topology
from sim.training.compute.kernels import op_time_s
from sim.training.compute.params import ComputeParams
from sim.workload.ops import LayerOps, Op

__all__ = [
    "ASYNC_COMM_SLOWDOWN",
    "CollectiveTimer",
    "OpsCost",
    "PassCost",
    "TPOverlap",
    "Unit",
    "async_exposed_s",
    "pass_cost",
    "ring_exposed_s",
    "timer_for",
    "unit_cost",
]


class CollectiveTimer:
    """Time collectives on GPU groups, cached by (group, op, bytes)."""

    def __init__(self, topology: Topology, params: CollectiveParams, network: str,
                 algorithm: str = "auto", protocol: str = "auto") -> None:  # fmt: skip
        self.topology = scaled_for(topology, params)
        self.params = params
        self.network = network
        self.algorithm, self.protocol = algorithm, protocol  # NCCL_ALGO / NCCL_PROTO style
        self._setups: dict[tuple[str, ...], CollectiveSetup] = {}
        self._reps: dict[Hashable, CollectiveSetup] = {}  # first setup of each twin_key
        self._times: dict[tuple[tuple[str, ...], str, float], float] = {}
        self.wire_bytes: dict[tuple[tuple[str, ...], str, float], dict[str, float]] = {}
        self._concurrent: dict[tuple[tuple[tuple[str, ...], ...], str, float], float] = {}
        self._planned: dict[tuple[tuple[str, ...], str, float], tuple[Schedule, str]] = {}
        self._batches: dict[tuple[tuple[tuple[str, ...], ...], float, float], float] = {}
        #: wire bytes per link scope of a step's communication tasks, kept by their content
        #: (:func:`sim.training.step` byte counters: a sweep's steps repeat them)
        self.scope_bytes: dict[Hashable, tuple[float, float, float]] = {}

    def setup(self, group: Sequence[str]) -> CollectiveSetup:
        """The prepared :class:`CollectiveSetup` of ``group`` (GPU node names)."""
        key = tuple(group)
        s = self._setups.get(key)
        if s is None:
            s = CollectiveSetup(self.topology, list(key), self.params, link_scaled=True)
            self._setups[key] = s
            rep = self._reps.setdefault(twin_key(s), s)
            if rep is not s:  # the tuner's answers shared where the routes prove equal
                s.twin = Twin(rep, s)
        return s

    def time_s(self, group: Sequence[str], op: str, nbytes: float) -> float:
        """Seconds for ``op`` of ``nbytes`` on ``group`` alone on the network (0 if trivial)."""
        key = (tuple(group), op, float(nbytes))
        t = self._times.get(key)
        if t is None:
            if len(group) < 2 or nbytes <= 0:
                t = 0.0
                self.wire_bytes[key] = {}
            else:
                r = simulate_collective(self.setup(group), op, nbytes, network=self.network,
                                        algorithm=self.algorithm, protocol=self.protocol)  # fmt: skip
                t = r.time_s
                self.wire_bytes[key] = r.wire_bytes_by_scope
            self._times[key] = t
        return t

    def link_bytes(self, group: Sequence[str], op: str, nbytes: float) -> dict[str, float]:
        """Wire bytes per link scope of ``op`` of ``nbytes`` on ``group`` as the tuner routes
        them (the group timed first where it was not: :meth:`time_s` records them)."""
        self.time_s(group, op, nbytes)
        return self.wire_bytes[(tuple(group), op, float(nbytes))]

    def transfers_time_s(
        self, pairs: Sequence[tuple[str, ...]], nbytes: float, rate_cap_Bps: float
    ) -> float:
        """Seconds until transfers of ``nbytes`` between every ``(src, dst)`` of ``pairs``,
        started together, have all landed on the analytical network (each capped at
        ``rate_cap_Bps``; :func:`sim.network.batch.batch_times_s`); 0 without bytes or
        pairs that cross a link. Cached: a step's pipeline sends repeat a few shapes."""
        key = (tuple(tuple(p) for p in pairs), float(nbytes), float(rate_cap_Bps))
        t = self._batches.get(key)
        if t is None:
            paths = [self.topology.path(x, y) for x, y in pairs if x != y]
            t = 0.0
            if nbytes > 0 and paths:
                n = len(paths)
                times, _ = batch_times_s(
                    self.topology, paths, np.full(n, nbytes), np.full(n, rate_cap_Bps)
                )
                t = float(max(times))
            self._batches[key] = t
        return t

    def concurrent_time_s(self, groups: Sequence[Sequence[str]], op: str, nbytes: float) -> float:
        """Seconds until ``op`` of ``nbytes`` has finished on every group of ``groups``, all
        started together (the TP ranks' DP/ZeRO groups sharing NICs and links).

        Closed form (the analytical backend's contention model): the slowest group alone,
        plus the extra time the most loaded link needs for the other groups' bytes,
        ``max_l sum_g B_gl / c_l - max_g max_l B_gl / c_l`` (wire bytes ``B`` as the tuner
        routes them, capacities ``c`` at link efficiency). Groups on disjoint links (one
        rail each) cost what one costs alone; groups that share a NIC serialise on it. A
        group held below line rate by NCCL's channel cap would absorb part of the extra
        load; this model charges it all (errs slow there).
        """
        if not groups:
            return 0.0
        key = (tuple(tuple(g) for g in groups), op, float(nbytes))
        t = self._concurrent.get(key)
        if t is not None:
            return t
        t = max(self.time_s(g, op, nbytes) for g in groups)
        if len(groups) > 1 and t > 0.0:
            caps = self.topology.capacity_Bps
            load = np.zeros(len(caps))
            single = 0.0
            for g in groups:
                sched, proto = self.plan(g, op, nbytes)
                cs = self.setup(g)
                scale = wire_scale(cs.params, sched.algorithm, proto)
                b = cs.link_bytes(sched, scale)
                load += b
                single = max(single, float(np.max(b / caps)))
            t += max(0.0, float(np.max(load / caps)) - single)
        self._concurrent[key] = t
        return t

    def plan(self, group: Sequence[str], op: str, nbytes: float) -> tuple[Schedule, str]:
        """The tuner's (schedule, protocol) for ``op`` on ``group``: to run on a shared network."""
        key = (tuple(group), op, float(nbytes))
        planned = self._planned.get(key)
        if planned is None:  # a ZeRO-3 step asks again for every unit and micro-batch
            # the tuner built this schedule (root 0, its depth) and keeps it
            _, _, proto, sched, _ = self.setup(group).tune(op, nbytes, self.algorithm,
                                                           self.protocol)  # fmt: skip
            planned = (sched, proto)
            self._planned[key] = planned
        return planned


_TIMERS: Kept[CollectiveTimer] = Kept(limit=32)


def timer_for(topology: Topology, params: CollectiveParams, network: str,
              algorithm: str = "auto", protocol: str = "auto") -> CollectiveTimer:  # fmt: skip
    """One :class:`CollectiveTimer` per (topology, collective parameters, network, tuner
    restrictions), reused across steps: collective times depend on nothing else (the
    objects are held, so their ids stay theirs)."""
    return _TIMERS.get(
        (network, algorithm, protocol),
        (topology, params),
        lambda: CollectiveTimer(topology, params, network, algorithm, protocol),
    )


@dataclass(frozen=True)
class TPOverlap:
    """What overlapping tensor-parallel collectives with their GEMMs costs (measured, not
    free): ``hidden`` is the fraction of the communication that disappears behind the
    GEMMs beside it, ``slowdown`` the fraction by which those GEMMs slow down while they
    share the SMs and memory with the communication kernels.

    Defaults: Transformer Engine's userbuffers overlap as NeMo/Megatron-Core configure it
    (:mod:`sim.workload.frameworks`, ``tp_overlap_hidden`` and ``tp_overlap_slowdown`` of
    ``megatron-core``, with their sources).
    """

    hidden: float = 0.875
    slowdown: float = 0.059


#: How much longer compute kernels take while an asynchronous NCCL collective shares the
#: GPU with them: "overlapped compute runs 18.9% slower on average (max 40.0%) than alone"
#: over A100, H100, MI250 and MI210 (Lee et al., arXiv:2507.03114; see
#: :data:`sim.workload.frameworks.TP_OVERLAP_MEASUREMENTS`).
ASYNC_COMM_SLOWDOWN = 0.189


@dataclass(frozen=True)
class OpsCost:
    """Kernels and collectives of a sequence of ops (one unit): seconds and FLOPs.

    ``gemm_s`` is the part of ``compute_s`` spent in GEMMs (the kernels TP communication
    overlaps with), ``attn_s`` the part in attention kernels."""

    compute_s: float
    tp_s: float
    ep_s: float
    model_flops: float
    hardware_flops: float
    wire_bytes: dict[str, dict[str, float]]  # group kind -> scope -> bytes
    cp_s: float = 0.0  # ring attention's K/V transfers left exposed (seconds)
    cp_bytes: float = 0.0  # ring attention bytes this rank sends
    gemm_s: float = 0.0
    attn_s: float = 0.0

    def busy_s(self, overlap: TPOverlap | None) -> float:
        """Compute (slowed where TP overlaps it) plus exposed TP plus EP plus the exposed
        part of the context-parallel ring."""
        return (
            self.overlapped_compute_s(overlap) + self.exposed_tp_s(overlap) + self.ep_s + self.cp_s
        )

    def overlapped_compute_s(self, overlap: TPOverlap | None) -> float:
        """Compute seconds, the GEMMs slowed by ``overlap.slowdown`` when TP overlaps them."""
        if overlap is None or self.tp_s <= 0:
            return self.compute_s
        return self.compute_s + overlap.slowdown * self.gemm_s

    def exposed_tp_s(self, overlap: TPOverlap | None) -> float:
        """TP communication left on the critical path: all of it without overlap; with it,
        ``1 - hidden`` of it, and never less than what exceeds the (slowed) compute.

        >>> c = OpsCost(1.0, 0.4, 0.0, 0.0, 0.0, {}, gemm_s=0.8)
        >>> round(c.exposed_tp_s(None), 3), round(c.exposed_tp_s(TPOverlap(0.875, 0.0)), 3)
        (0.4, 0.05)
        """
        if overlap is None:
            return self.tp_s
        compute = self.overlapped_compute_s(overlap)
        return max(self.tp_s - compute, (1.0 - overlap.hidden) * self.tp_s)


@dataclass(frozen=True)
class Unit:
    """One wrapping unit of a pass (embedding, a layer, the head).

    Attributes
    ----------
    busy_s : float
        Compute plus exposed TP and EP communication, seconds.
    gather_bytes, expert_gather_bytes : float
        Parameters all-gathered before it runs (ZeRO-3/FSDP), bytes (nccl-tests size).
    """

    busy_s: float
    gather_bytes: float = 0.0
    expert_gather_bytes: float = 0.0


@dataclass(frozen=True)
class PassCost:
    """Cost of one pass: seconds, FLOPs per rank per micro-batch, and its units in order.

    ``cp_exposed_s`` is what the ring attention's transfers leave exposed and
    ``cp_bytes`` what this rank sends around the ring. ``busy_s`` (compute + exposed
    TP + EP + CP) is the pass's duration when no unit waits for
    a parameter gather; the engine adds what gathers leave exposed.
    """

    compute_s: float
    tp_exposed_s: float
    ep_s: float
    model_flops: float
    hardware_flops: float
    wire_bytes: dict[str, dict[str, float]] = field(default_factory=dict)
    units: tuple[Unit, ...] = ()
    cp_exposed_s: float = 0.0
    cp_bytes: float = 0.0
    busy_s: float = field(init=False)
    gathers: bool = field(init=False)

    def __post_init__(self) -> None:
        # busy_s: compute plus exposed TP, EP and CP communication, seconds; gathers: whether
        # some unit gathers parameters before it runs (read in the engines' inner loops).
        busy = self.compute_s + self.tp_exposed_s + self.ep_s + self.cp_exposed_s
        object.__setattr__(self, "busy_s", busy)
        gathers = any(u.gather_bytes > 0 or u.expert_gather_bytes > 0 for u in self.units)
        object.__setattr__(self, "gathers", gathers)


def unit_cost(
    ops: Sequence[Op],
    gpu_time: ComputeParams,
    topology: Topology,
    timer: CollectiveTimer,
    groups: Mapping[str, Sequence[str]],
    cache: dict[Op, float],
    cp_ring: Sequence[Sequence[str]] = (),
    gpu: GpuSpec | None = None,
) -> OpsCost:
    """Sum the kernels and collectives of a sequence of ops (one unit).

    ``groups`` maps ``"tp"``/``"ep"`` to the GPU names of this rank's group; ``cache``
    memoises per-op times across passes (ops are frozen and hashable; one cache per GPU
    model); ``gpu`` is the model the kernels run on (default ``topology.gpu``).
    ``cp_ring``: the (sender, receiver) pairs of every context-parallel ring of the
    stage, which send at the same time (a ring step is timed as their concurrent ``send_recv``).

    A ``cp_comm`` op (``shape[0]`` ring steps) overlaps the attention kernels before it
    in the list: each step's transfer hides behind one step of attention compute (the
    kernels' time over ``steps + 1``), and the rest is exposed (:func:`ring_exposed_s`).
    """
    compute = tp = ep = cp = cp_bytes = attn = gemm = attn_total = 0.0
    wire: dict[str, dict[str, float]] = {}
    times = [_op_time_s(op, gpu or topology.gpu, gpu_time, timer, groups, cache, cp_ring)
             for op in ops]  # fmt: skip
    for i, (op, t) in enumerate(zip(ops, times, strict=True)):
        if op.kind == "compute":
            compute += t
            a = t if op.cls in ("attn_fwd", "attn_bwd") else 0.0
            attn, attn_total = attn + a, attn_total + a
            gemm += t if op.cls == "gemm" else 0.0
            continue
        assert op.comm_op is not None and op.group is not None
        steps = op.shape[0] if op.kind == "cp_comm" else 1.0
        group = cp_ring[0] if op.kind == "cp_comm" else groups[op.group]
        per = wire.setdefault(op.group, {})
        # this group's bytes, also where the time came from the memo (another group's)
        for scope, b in timer.link_bytes(group, op.comm_op, op.comm_bytes).items():
            per[scope] = per.get(scope, 0.0) + steps * b
        if op.kind == "tp_comm":
            tp += async_exposed_s(t, _beside_gemm_s(ops, times, i)) if op.beside else t
        elif op.kind == "cp_comm":
            cp += ring_exposed_s(t, attn, int(steps))
            cp_bytes += steps * op.comm_bytes
            attn = 0.0
        else:
            ep += t
    flops = LayerOps(tuple(ops), ())
    return OpsCost(compute, tp, ep, flops.model_flops, flops.hardware_flops, wire, cp, cp_bytes,
                   gemm, attn_total)  # fmt: skip


def _op_time_s(
    op: Op,
    gpu: GpuSpec,
    gpu_time: ComputeParams,
    timer: CollectiveTimer,
    groups: Mapping[str, Sequence[str]],
    cache: dict[Op, float],
    cp_ring: Sequence[Sequence[str]],
) -> float:
    """Seconds of one op alone (memoised in ``cache``): a kernel on ``gpu``, a collective
    in its group, or one step of the context-parallel ring."""
    t = cache.get(op)
    if t is None:
        if op.kind == "compute":
            t = op_time_s(op, gpu, gpu_time)
        elif op.kind == "cp_comm":
            assert op.comm_op is not None
            t = timer.concurrent_time_s(cp_ring, op.comm_op, op.comm_bytes)
        else:
            assert op.comm_op is not None and op.group is not None
            t = timer.time_s(groups[op.group], op.comm_op, op.comm_bytes)
        cache[op] = t
    return t


def _beside_gemm_s(ops: Sequence[Op], times: Sequence[float], i: int) -> float:
    """Seconds of the GEMM the asynchronous collective ``ops[i]`` runs beside: the nearest
    GEMM in the direction of its :attr:`~sim.workload.primitives.Op.beside` (0: none in
    the unit)."""
    step = ops[i].beside
    j = i + step
    while 0 <= j < len(ops):
        if ops[j].kind == "compute" and ops[j].cls == "gemm":
            return times[j]
        j += step
    return 0.0


def async_exposed_s(comm_s: float, gemm_s: float) -> float:
    """Critical-path seconds of a collective of ``comm_s`` launched asynchronously beside a
    GEMM of ``gemm_s`` seconds: what outlasts the GEMM, plus the GEMM's slowdown
    (:data:`ASYNC_COMM_SLOWDOWN`) while the two share the GPU. An approximation: the
    collective's own slowdown is not modelled.

    >>> round(async_exposed_s(1.0, 4.0), 3), round(async_exposed_s(3.0, 2.0), 3)
    (0.189, 1.378)
    """
    return max(0.0, comm_s - gemm_s) + ASYNC_COMM_SLOWDOWN * min(comm_s, gemm_s)


def ring_exposed_s(step_s: float, attention_s: float, steps: int) -> float:
    """Seconds a ring of ``steps`` transfers of ``step_s`` each leaves exposed beside
    ``attention_s`` of attention compute spread evenly over ``steps + 1`` steps.

    An approximation: real steps differ a little (the diagonal step is causal).

    >>> ring_exposed_s(2.0, 3.0, 2), ring_exposed_s(0.5, 3.0, 2)
    (2.0, 0.0)
    """
    if steps <= 0:
        return 0.0
    return steps * max(0.0, step_s - attention_s / (steps + 1))


def pass_cost(parts: Sequence[tuple[OpsCost, int, Unit]], overlap: TPOverlap | None) -> PassCost:
    """A pass from its parts in order: (cost of one unit, repetitions, the unit's gathers);
    ``overlap``: how TP communication overlaps the GEMMs (None: it does not).

    >>> one = OpsCost(1.0, 0.5, 0.0, 10.0, 10.0, {})
    >>> p = pass_cost([(one, 3, Unit(0.0))], overlap=None)
    >>> p.busy_s, len(p.units), p.model_flops
    (4.5, 3, 30.0)
    """
    compute = tp = ep = cp = cp_bytes = model = hw = 0.0
    wire: dict[str, dict[str, float]] = {}
    units: list[Unit] = []
    for cost, count, gather in parts:
        compute += count * cost.overlapped_compute_s(overlap)
        tp += count * cost.exposed_tp_s(overlap)
        ep += count * cost.ep_s
        cp += count * cost.cp_s
        cp_bytes += count * cost.cp_bytes
        model += count * cost.model_flops
        hw += count * cost.hardware_flops
        for kind, per in cost.wire_bytes.items():
            into = wire.setdefault(kind, {})
            for scope, b in per.items():
                into[scope] = into.get(scope, 0.0) + count * b
        unit = Unit(cost.busy_s(overlap), gather.gather_bytes, gather.expert_gather_bytes)
        units += [unit] * count
    return PassCost(compute, tp, ep, model, hw, wire, tuple(units), cp, cp_bytes)
