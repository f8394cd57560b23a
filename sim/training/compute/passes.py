"""Durations the training engine schedules: compute passes and collectives, cached.

A *pass* is the forward (``F``) or backward (``B``, recompute included) of one model chunk
for one micro-batch on one rank. Its compute time is the sum of its kernels' roofline
times (:func:`sim.training.compute.roofline.op_time_s`); its TP and EP collectives are timed by the
collective simulator on the real group of GPUs (each alone on the network: they stay
inside an NVLink domain for TP, and are short). Identical layers are costed once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sim.collectives.links import scaled_for
from sim.collectives.params import CollectiveParams
from sim.collectives.schedule import Schedule
from sim.collectives.simulate import CollectiveSetup, simulate_collective
from sim.topology.model import Topology
from sim.training.compute.roofline import ComputeParams, op_time_s
from sim.training.workload.ops import LayerOps, Op

__all__ = ["CollectiveTimer", "PassCost", "pass_cost"]


class CollectiveTimer:
    """Time collectives on GPU groups, cached by (group, op, bytes)."""

    def __init__(self, topology: Topology, params: CollectiveParams, network: str) -> None:
        self.topology = scaled_for(topology, params)
        self.params = params
        self.network = network
        self._setups: dict[tuple[str, ...], CollectiveSetup] = {}
        self._times: dict[tuple[tuple[str, ...], str, float], float] = {}
        self.wire_bytes: dict[tuple[tuple[str, ...], str, float], dict[str, float]] = {}
        self._choice: dict[tuple[tuple[str, ...], str, float], tuple[str, str, int]] = {}

    def setup(self, group: Sequence[str]) -> CollectiveSetup:
        """The prepared :class:`CollectiveSetup` of ``group`` (GPU node names)."""
        key = tuple(group)
        s = self._setups.get(key)
        if s is None:
            s = CollectiveSetup(self.topology, list(key), self.params, link_scaled=True)
            self._setups[key] = s
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
                r = simulate_collective(self.setup(group), op, nbytes, network=self.network)
                t = r.time_s
                self.wire_bytes[key] = r.wire_bytes_by_scope
            self._times[key] = t
        return t

    def plan(self, group: Sequence[str], op: str, nbytes: float) -> tuple[Schedule, str]:
        """The tuner's (schedule, protocol) for ``op`` on ``group``: to run on a shared network."""
        setup = self.setup(group)
        key = (tuple(group), op, float(nbytes))
        choice = self._choice.get(key)
        if choice is None:
            _, algo, proto, _, chunks = setup.tune(op, nbytes)
            choice = (algo, proto, chunks)
            self._choice[key] = choice
        return setup.schedule(op, choice[0], nbytes, chunks=choice[2]), choice[1]


@dataclass(frozen=True)
class PassCost:
    """Cost of one pass (seconds; FLOPs per rank per micro-batch)."""

    compute_s: float
    tp_s: float
    ep_s: float
    model_flops: float
    hardware_flops: float
    wire_bytes: dict[str, dict[str, float]] = field(
        default_factory=dict
    )  # group kind -> scope -> bytes
    prefetch_s: float = 0.0  # ZeRO-3 parameter all-gathers, prefetched on their own stream

    def _busy_s(self, overlap_tp: bool) -> float:
        tp = max(self.compute_s, self.tp_s) - self.compute_s if overlap_tp else self.tp_s
        return self.compute_s + tp

    def duration_s(self, overlap_tp: bool) -> float:
        """Time on the critical path: TP hidden behind compute when ``overlap_tp``;
        ZeRO-3 gathers hidden behind compute except where they take longer."""
        return max(self._busy_s(overlap_tp), self.prefetch_s) + self.ep_s

    def exposed_tp_s(self, overlap_tp: bool) -> float:
        """TP communication left on the critical path."""
        return self._busy_s(overlap_tp) - self.compute_s

    def exposed_prefetch_s(self, overlap_tp: bool) -> float:
        """ZeRO-3 gather time not hidden behind the pass's compute."""
        return max(0.0, self.prefetch_s - self._busy_s(overlap_tp))


def pass_cost(
    ops: Sequence[Op],
    gpu_time: ComputeParams,
    topology: Topology,
    timer: CollectiveTimer,
    groups: Mapping[str, Sequence[str]],
    cache: dict[Op, float],
) -> PassCost:
    """Sum the kernels and collectives of one pass.

    ``groups`` maps ``"tp"``/``"ep"`` to the GPU names of this rank's group; ``cache``
    memoises per-op times across passes (ops are frozen and hashable).
    """
    compute = tp = ep = 0.0
    wire: dict[str, dict[str, float]] = {}
    for op in ops:
        t = cache.get(op)
        if t is None:
            if op.kind == "compute":
                t = op_time_s(op, topology.gpu, gpu_time)
            else:
                assert op.comm_op is not None and op.group is not None
                t = timer.time_s(groups[op.group], op.comm_op, op.comm_bytes)
            cache[op] = t
        if op.kind != "compute":
            assert op.comm_op is not None and op.group is not None
            per = wire.setdefault(op.group, {})
            key = (tuple(groups[op.group]), op.comm_op, float(op.comm_bytes))
            for scope, b in timer.wire_bytes.get(key, {}).items():
                per[scope] = per.get(scope, 0.0) + b
        if op.kind == "compute":
            compute += t
        elif op.kind == "tp_comm":
            tp += t
        else:
            ep += t
    flops = LayerOps(tuple(ops), ())
    return PassCost(compute, tp, ep, flops.model_flops, flops.hardware_flops, wire)
