"""Simulate one collective, or an nccl-tests-style sweep of sizes, on a topology.

``auto`` picks the (algorithm, protocol) with the lowest time under the closed-form
model (:func:`~sim.collectives.engine.predict_step_sync`) among the algorithms NCCL has
for the operation (:data:`NCCL_ALGORITHMS`), as NCCL's tuner picks from its own cost
model; the chosen pair is then run on the requested network backend. Every rank's
transfers are capped by its NCCL channels (:mod:`sim.collectives.channels`).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Protocol

import numpy as np

from sim.collectives.algorithms import ALGORITHMS, NVLS_NVLINK, Layout, applicable
from sim.collectives.channels import channel_count, channel_rate_Bps
from sim.collectives.engine import (
    RouteCache,
    predict_step_sync,
    schedule_link_bytes,
    scope_bytes,
    wire_scale,
)
from sim.collectives.gloo import algorithms_for, local_time_s
from sim.collectives.links import scaled_for
from sim.collectives.params import PROTOCOLS, CollectiveParams, default_params
from sim.collectives.rails import rail_map, ring_channels
from sim.collectives.record import CollectiveResult
from sim.collectives.schedule import OPS, Schedule
from sim.collectives.selection import allowed_algorithms, allowed_protocols
from sim.collectives.sharp import aggregation_switches
from sim.collectives.sizes import MAX_SWEEP_POINTS, sweep_sizes
from sim.errors import ConfigError
from sim.network import backend
from sim.network.solvecache import SolveCache
from sim.topology.model import Topology

__all__ = [
    "MAX_SWEEP_POINTS",
    "NCCL_ALGORITHMS",
    "NVLS_NVLINK",
    "PIPELINED",
    "CollectiveResult",
    "CollectiveSetup",
    "TwinAnswer",
    "replay_on_network",
    "run_on_network",
    "simulate_collective",
    "sweep_sizes",
]


# In-switch reduction (NVLink SHARP, NCCL's NVLS algorithms) needs third-generation
# NVSwitch with NVLink 4 (Hopper) or later; A100's NVSwitch has none (NVIDIA NVLink and
# NVSwitch technical overview; NCCL 2.17 release notes: NVLS on H100 NVSwitch systems).

# What ``auto`` chooses among, per operation: the algorithms NCCL itself has for it
# (NVIDIA/nccl tuning.cc / enqueue.cc, 2.18-2.22): all_reduce ring, tree, NVLS (one
# NVSwitch domain) and NVLS-tree (servers with an NVSwitch each); all_gather and
# reduce_scatter ring and NVLS; broadcast and reduce ring only; all_to_all and send/recv
# point-to-point ("direct"). Recursive halving-doubling and the plain hierarchical
# composition are not NCCL algorithms: they run only when asked for by name.
NCCL_ALGORITHMS: dict[str, tuple[str, ...]] = {
    "all_reduce": ("ring", "tree", "nvls", "nvls_tree", "collnet"),
    "all_gather": ("ring", "nvls"),
    "reduce_scatter": ("ring", "nvls"),
    "broadcast": ("ring",),
    "reduce": ("ring",),
    "all_to_all": ("direct",),
    "send_recv": ("direct",),
}

# Algorithms whose pipeline depth the tuner chooses. NCCL runs NVLS over many channels
# at once, so its four in-switch steps overlap even for mid-size messages; a depth fixed
# by size made the calibrated DGX H100 hold-out miss by 17% at 4 MiB. Tree, NVLS-tree and
# ring chains keep the size-derived depth (tuning theirs too worsened the 2-node IB
# hold-out, max 22%).
PIPELINED = ("nvls", "nvls_tree", "collnet")

# Cap on pipeline depth x base steps of one schedule (see CollectiveSetup.schedule).
PIPELINE_WORK = 512

#: Operations whose ring schedule is a pipelined chain from or to the root. NCCL cuts
#: each channel's share of a ring broadcast or reduce into chunks of a fixed size
#: (src/enqueue.cc: chunkSize = stepSize * chunkSteps, BROADCAST_CHUNKSTEPS =
#: REDUCE_CHUNKSTEPS = 1; src/device/broadcast.h forwards each chunk as it lands), so the
#: depth follows the message size alone, however long the chain. Capping it (as
#: PIPELINE_WORK and pipeline.max_chunks do for trees and NVLS) made each piece grow with
#: the chain: 2 pieces over 255 hops, 1.5 GB/s at 32 servers.
CHAINS = ("broadcast", "reduce")

#: Base steps a chain's pipelined slots may hold in all, summed over the slots costed one
#: by one (ramp and drain; the steady slots are one uniform phase): ``T * (T - 1)`` for a
#: chain of ``T`` hops at any depth >= ``T``, so chains up to 256 hops (32 servers of 8
#: GPUs) are never capped; a longer one's depth is held to ``CHAIN_WORK // T``.
CHAIN_WORK = 1 << 16

#: Tuner answers one :class:`CollectiveSetup` keeps (beyond it, the memo starts afresh).
KEPT_TUNINGS = 4096

#: Per-link byte counters one setup keeps (the links a schedule touches and their bytes:
#: its twins ask for the same schedule's one after the other).
KEPT_LINK_BYTES = 8

#: Algorithms whose steps depend on the message size itself (gloo cuts the buffer into
#: size-dependent segments); every other one's depend on it only through chunk_bytes.
SIZE_SHAPED = frozenset({"gloo"})


class TwinAnswer(Protocol):
    """What a group proved to cost what another group does offers its twin
    (:class:`sim.collectives.twins.Twin`): the group tuned first, whether the routes are
    still proved equal, and its link counters renamed to the twin's links."""

    rep: CollectiveSetup

    def matches(self) -> bool:
        """Whether the routes are proved equal so far (checking more where needed)."""
        ...

    def moved(self, rep_bytes: np.ndarray) -> np.ndarray:
        """``rep``'s per-link bytes on the twin's links."""
        ...


class CollectiveSetup:
    """A topology, a group of GPUs and parameters, prepared once for many sizes.

    Parameters
    ----------
    topology : Topology
        The cluster (line-rate capacities; link efficiencies are applied here).
    ranks : int or sequence of str, optional
        The first ``ranks`` GPUs, or explicit GPU node names; default all GPUs.
    params : CollectiveParams, optional
        Timing parameters; default the shipped defaults.
    link_scaled : bool
        True when ``topology`` already carries the parameters' link factors (from
        :func:`sim.collectives.links.scaled_for`): many setups then share one copy.
    """

    def __init__(
        self,
        topology: Topology,
        ranks: int | Sequence[str] | None = None,
        params: CollectiveParams | None = None,
        link_scaled: bool = False,
    ) -> None:
        self.params = params or default_params()
        self.topology = topology if link_scaled else scaled_for(topology, self.params)
        self.group = _group(topology, ranks)
        nodes = [topology.node_of(g) for g in self.group]
        first = {n: i for i, n in reversed(list(enumerate(dict.fromkeys(nodes))))}
        # NVLS needs every member's NVLink generation (a mixed cluster's A100s have none)
        sharp = all(topology.gpu_of(g).nvlink in NVLS_NVLINK for g in self.group)
        switch_of = [topology.nvswitch_of(g) if sharp else None for g in self.group]
        nvswitch = len(set(switch_of)) == 1 and None not in switch_of and len(self.group) > 1
        per_node: dict[int, set[str | None]] = {}
        for node, sw in zip(nodes, switch_of, strict=True):
            per_node.setdefault(first[node], set()).add(sw)
        node_nvswitch = all(len(s) == 1 and None not in s for s in per_node.values())
        self.layout = Layout(
            node_of=tuple(first[n] for n in nodes),
            nvswitch=nvswitch,
            node_nvswitch=node_nvswitch,
            sharp=topology.sharp and len(first) > 1,
        )
        self._sharp_switches: list[str] | None = None
        self.reducer = switch_of[0] if nvswitch else None
        self.node_switches = (
            [next(iter(per_node[k])) for k in sorted(per_node)] if node_nvswitch else []
        )
        self.channels = ring_channels(topology, self.group, len(first))
        self.max_nccl_channels = _max_nccl_channels(self.params, topology, self.group, len(first))
        self.routes = RouteCache(self.topology, rail_map(topology, self.group, len(first)))
        # max-min solves repeat across the sizes of a sweep (sim.network.solvecache)
        self.solve_cache = SolveCache()
        # the tuner's answers: a training step times a collective, then plans it to
        # share the network (sim.training.compute.passes.CollectiveTimer), same question
        self._tuned: dict[tuple[object, ...], tuple[float, str, str, Schedule, int]] = {}
        # a group proved to cost what another does (sim.collectives.twins), or None
        self.twin: TwinAnswer | None = None
        self._link_bytes: dict[tuple[int, float], tuple[Schedule, np.ndarray, np.ndarray]] = {}

    @property
    def n(self) -> int:
        """Ranks in the group."""
        return len(self.group)

    def rate_cap_Bps(self, algorithm: str, protocol: str, size_bytes: float) -> float:
        """A rank's NCCL channel rate for ``algorithm``/``protocol`` at ``size_bytes``
        (payload bytes/s; ``inf`` where not capped): see :mod:`sim.collectives.channels`."""
        return channel_rate_Bps(
            self.params.channels, algorithm, protocol, size_bytes, self.n, self.max_nccl_channels
        )

    def nccl_channels(self, algorithm: str, protocol: str, size_bytes: float) -> int:
        """Channels NCCL runs ``algorithm``/``protocol`` on at ``size_bytes``."""
        return channel_count(
            self.params.channels, algorithm, protocol, size_bytes, self.n, self.max_nccl_channels
        )

    def sharp_switches(self) -> list[str]:
        """The SHARP aggregation switch of each local rank (:mod:`sim.collectives.sharp`)."""
        if self._sharp_switches is None:
            per = len(self.layout.nodes[0])
            self._sharp_switches = aggregation_switches(self.topology, self.group, per)
        return self._sharp_switches

    def pipeline_chunks(self, size_bytes: float) -> int:
        """Pipelined pieces for ``size_bytes``: size / chunk_bytes, clamped to [1, max_chunks]."""
        return max(1, min(self.params.pipeline_max_chunks, self.chain_chunks(size_bytes)))

    def chain_chunks(self, size_bytes: float) -> int:
        """Pipelined pieces of a ring broadcast or reduce chain (:data:`CHAINS`) of
        ``size_bytes`` bytes: size / chunk_bytes, at least min_chunks, not capped (NCCL's
        chunk has a fixed size, so a larger message streams in more of them)."""
        p = self.params
        return max(1, p.pipeline_min_chunks, math.ceil(size_bytes / p.pipeline_chunk_bytes))

    def chunk_options(self, op: str, algorithm: str, size_bytes: float) -> list[int]:
        """Pipeline depths the tuner may pick for ``algorithm``: for :data:`PIPELINED` ones
        the size-derived depth and 2, 4 and 8 times it (capped), as NCCL adapts channels
        and chunking per size; for a ring broadcast or reduce chain, its uncapped
        :meth:`chain_chunks`; otherwise just the size-derived depth."""
        if _chained(op, algorithm):
            return [self.chain_chunks(size_bytes)]
        base = self.pipeline_chunks(size_bytes)
        if algorithm in PIPELINED:
            top = self.params.pipeline_max_chunks
            return sorted({min(top, base * f) for f in (1, 2, 4, 8)})
        return [base]

    def schedule(
        self, op: str, algorithm: str, size_bytes: float, root: int = 0, chunks: int | None = None
    ) -> Schedule:
        """Build ``algorithm``'s schedule for ``op`` of ``size_bytes`` on this group.

        The pipeline depth is capped so that depth x base steps <= PIPELINE_WORK: a
        schedule with many base steps (a tree over 1024 ranks, NVLS-tree's rings over 128
        servers) gains little from deeper pipelining, whose slots share the same links,
        and costing hundreds of pipelined slots would dominate the run time. A ring
        chain (:data:`CHAINS`) is capped only past :data:`CHAIN_WORK` (its pieces keep
        NCCL's size: a capped depth made a long chain's pieces large and its time grow
        with the chain's length times the message's).
        """
        depth = self.depth(op, algorithm, size_bytes, root, chunks)
        return self._at_depth(op, algorithm, size_bytes, root, depth)

    def _at_depth(
        self, op: str, algorithm: str, size_bytes: float, root: int, depth: int
    ) -> Schedule:
        """:meth:`schedule` at a depth :meth:`depth` has resolved, with its cache key."""
        sched = self._build(op, algorithm, size_bytes, root, depth)
        if algorithm in SIZE_SHAPED:
            return sched
        # every other algorithm's steps depend on the size only through chunk_bytes
        return replace(sched, key=(op, algorithm, root, depth))

    def depth(
        self, op: str, algorithm: str, size_bytes: float, root: int = 0, chunks: int | None = None
    ) -> int:
        """The pipeline depth :meth:`schedule` builds ``algorithm`` with: ``chunks`` (default:
        the size's, :meth:`chain_chunks` for a ring chain) within the caps of
        :meth:`schedule`'s docstring (1 where the schedule has too many base steps to
        pipeline, e.g. a ring all_reduce, which is not pipelined)."""
        return self._depths(op, algorithm, size_bytes, root, [chunks])[0]

    def _depths(
        self, op: str, algorithm: str, size_bytes: float, root: int, options: Sequence[int | None]
    ) -> list[int]:
        """:meth:`depth` of each of ``options`` (the unpipelined schedule, whose step count
        sets the cap, is built once for them all)."""
        chained = _chained(op, algorithm)
        size_depth = (self.chain_chunks if chained else self.pipeline_chunks)(size_bytes)
        wants = [c or size_depth for c in options]
        if max(wants) <= 1:
            return wants
        base = self._build(op, algorithm, size_bytes, root, 1).num_steps
        cap = chain_depth_cap(base) if chained else PIPELINE_WORK // max(1, base)
        return [max(1, min(w, cap)) if w > 1 else w for w in wants]

    def _build(self, op: str, algorithm: str, size_bytes: float, root: int, depth: int) -> Schedule:
        """``algorithm``'s schedule function on this group at pipeline depth ``depth``."""
        return ALGORITHMS[algorithm](
            op, self.n, size_bytes, layout=self.layout, channels=self.channels, root=root,
            pipeline_chunks=depth,
        )  # fmt: skip

    def tune(
        self,
        op: str,
        size_bytes: float,
        algorithm: str = "auto",
        protocol: str = "auto",
        root: int = 0,
    ) -> tuple[float, str, str, Schedule, int]:
        """The tuner: lowest closed-form time over (algorithm, protocol, pipeline depth).

        Returns (predicted time s, algorithm, protocol, schedule, the pipeline depth it runs:
        1 for an unpipelined schedule); kept per question (the last :data:`KEPT_TUNINGS`),
        so asking again returns the same objects.
        """
        key = (op, float(size_bytes), algorithm, protocol, root)
        hit = self._tuned.get(key)
        if hit is None:
            if len(self._tuned) >= KEPT_TUNINGS:
                self._tuned.clear()
            hit = self._shared(op, size_bytes, algorithm, protocol, root)
            if hit is None:
                hit = self._tune(op, size_bytes, algorithm, protocol, root)
            self._tuned[key] = hit
        return hit

    def _shared(
        self, op: str, size_bytes: float, algorithm: str, protocol: str, root: int
    ) -> tuple[float, str, str, Schedule, int] | None:
        """The twin's answer to :meth:`tune`'s question, once its routes are proved to be
        this group's (:mod:`sim.collectives.twins`); None without a twin."""
        twin = self.twin
        if twin is None:
            return None
        try:
            got = twin.rep.tune(op, size_bytes, algorithm, protocol, root)
        except ConfigError:
            got = None  # this group's own tuning says why
        if got is not None and twin.matches():
            return got
        self.twin = None
        return None

    def link_bytes(self, sched: Schedule, scale: float) -> np.ndarray:
        """Wire bytes ``sched`` puts on every link at ``scale`` wire bytes per payload byte
        (:func:`~sim.collectives.engine.schedule_link_bytes`; a twin's renamed; the
        last :data:`KEPT_LINK_BYTES` kept, as the links touched and their bytes)."""
        twin = self.twin
        if twin is not None:
            got = twin.rep.link_bytes(sched, scale)
            if twin.matches():
                return twin.moved(got)
            self.twin = None
        key = (id(sched), scale)
        hit = self._link_bytes.get(key)
        if hit is None or hit[0] is not sched:
            if len(self._link_bytes) >= KEPT_LINK_BYTES:
                self._link_bytes.clear()
            b = schedule_link_bytes(sched, self.endpoints(sched), self.routes, scale)
            touched = np.flatnonzero(b)
            self._link_bytes[key] = (sched, touched, b[touched])
            return b
        out = np.zeros(len(self.topology.capacity_Bps))
        out[hit[1]] = hit[2]
        return out

    def _tune(
        self, op: str, size_bytes: float, algorithm: str, protocol: str, root: int
    ) -> tuple[float, str, str, Schedule, int]:
        """The work of :meth:`tune`."""
        best: tuple[float, str, str, Schedule, int] | None = None
        protos: dict[str, list[str]] = {}
        for algo, proto in self.candidates(op, algorithm, protocol):
            protos.setdefault(algo, []).append(proto)
        for algo, plist in protos.items():
            caps = {p: self.nccl_channels(algo, p, size_bytes) for p in plist}
            # the depths the options build (capped options repeat one: costed once)
            options = self.chunk_options(op, algo, size_bytes)
            depths = dict.fromkeys(self._depths(op, algo, size_bytes, root, options))
            for chunks in depths:
                sched = self._at_depth(op, algo, size_bytes, root, chunks)
                times = predict_step_sync(
                    sched, self.endpoints(sched), self.routes, self.params, plist, caps
                )
                runs = chunks if any(p.parts is not None for p in sched.phases) else 1
                for proto in plist:  # candidates' order breaks ties, as before
                    if best is None or times[proto] < best[0]:
                        best = (times[proto], algo, proto, sched, runs)
        assert best is not None
        return best

    def endpoints(self, sched: Schedule) -> list[str]:
        """Graph node per participant: the group's GPUs, then in-network reducers."""
        if not sched.reducers:
            return list(self.group)
        if sched.algorithm == "collnet":
            servers = [str(s) for s in self.node_switches] if self.layout.node_nvswitch else []
            return [*self.group, *servers, *self.sharp_switches()]
        if sched.reducers == 1 and self.reducer is not None:
            return [*self.group, self.reducer]
        if sched.reducers == len(self.node_switches):
            return [*self.group, *(str(s) for s in self.node_switches)]
        raise ConfigError(f"algorithm {sched.algorithm!r} needs an NVSwitch in every server")

    def candidates(self, op: str, algorithm: str, protocol: str) -> list[tuple[str, str]]:
        """(algorithm, protocol) pairs to consider; ConfigError when none applies.

        ``algorithm`` and ``protocol`` are ``auto``, one name, or NCCL_ALGO/NCCL_PROTO-style
        lists (``ring,tree``; ``^nvls``): see :mod:`sim.collectives.selection`.
        """
        algos = allowed_algorithms(
            algorithm, algorithms_for(self.params, NCCL_ALGORITHMS).get(op, ()), list(ALGORITHMS),
            lambda a: applicable(a, op, self.layout),
        )  # fmt: skip
        protos = allowed_protocols(protocol, PROTOCOLS)
        pairs = [(a, p) for a in algos for p in self.params.algorithm(a).protocols if p in protos]
        if not pairs:
            raise ConfigError(
                f"no algorithm/protocol implements {op} here (algo={algorithm}, protocol={protocol})"
            )
        return pairs


def _chained(op: str, algorithm: str) -> bool:
    """Whether ``algorithm``'s schedule of ``op`` is a pipelined chain (:data:`CHAINS`)."""
    return algorithm == "ring" and op in CHAINS


def chain_depth_cap(steps: int) -> int:
    """Most pipelined pieces a chain of ``steps`` hops may have (:data:`CHAIN_WORK`).

    Its ramp and drain slots hold ``steps * (steps - 1)`` base steps at any depth >=
    ``steps``, and ``depth * steps`` below it: no cap while the first fits.

    >>> chain_depth_cap(255) > 10**9, chain_depth_cap(1023)
    (True, 64)
    """
    if steps * (steps - 1) <= CHAIN_WORK:
        return sys.maxsize
    return max(1, CHAIN_WORK // steps)


def _group(topology: Topology, ranks: int | Sequence[str] | None) -> tuple[str, ...]:
    if ranks is None:
        return topology.gpus
    if isinstance(ranks, int):
        if not 1 <= ranks <= topology.num_gpus:
            raise ConfigError(
                f"--gpus {ranks} is out of range; topology {topology.name!r} has {topology.num_gpus} GPUs"
            )
        return topology.gpus[:ranks]
    unknown = [
        g for g in ranks if g not in topology.graph or topology.graph.nodes[g]["kind"] != "gpu"
    ]
    if unknown:
        raise ConfigError(
            f"unknown GPU {unknown[0]!r} in group; GPUs look like {topology.gpus[0]!r}"
        )
    return tuple(ranks)


def _max_nccl_channels(
    params: CollectiveParams, topology: Topology, group: Sequence[str], nodes: int
) -> int:
    """NCCL's channel count for the group: ``per_server`` inside one server, else
    ``per_nic`` per NIC of the first server (NCCL pins two channels to each NIC)."""
    ch = params.channels
    if nodes <= 1:
        return ch.per_server
    nics = topology.nics_per_node().get(topology.node_of(group[0]), 0)
    return max(1, ch.per_nic * nics) if nics else ch.per_server


def simulate_collective(
    setup: CollectiveSetup,
    op: str,
    size_bytes: float,
    *,
    algorithm: str = "auto",
    protocol: str = "auto",
    network: str = "flow",
    root: int = 0,
) -> CollectiveResult:
    """Simulate one ``op`` of ``size_bytes`` (nccl-tests' size) on ``setup``'s group.

    Returns
    -------
    CollectiveResult
        Time in seconds, the algorithm and protocol used, wire bytes per link scope.

    Examples
    --------
    >>> from sim.topology.presets import load_topology
    >>> setup = CollectiveSetup(load_topology("dgx-h100"))
    >>> r = simulate_collective(setup, "all_reduce", 2**30, algorithm="ring", protocol="simple")
    >>> 300 < r.busbw_Bps / 1e9 < 400
    True
    """
    if op not in OPS:
        raise ConfigError(f"--op {op!r} is unknown; allowed: {', '.join(OPS)}")
    if setup.n < 2 and op != "send_recv":
        raise ConfigError(f"{op} needs at least 2 GPUs; the group has {setup.n}")
    predicted, algo, proto, sched, chunks = setup.tune(op, size_bytes, algorithm, protocol, root)
    if backend(network).closed_form:  # the tuner's closed form is this backend exactly
        time_s = predicted
        link_bytes = setup.link_bytes(sched, wire_scale(setup.params, algo, proto))
    else:
        time_s, link_bytes = run_on_network(setup, sched, proto, size_bytes, network)
    # gloo: torch's local copies around the wire traffic (sim.collectives.gloo)
    local = local_time_s(setup.params, op, setup.n, size_bytes) if algo == "gloo" else 0.0
    return CollectiveResult(
        op=op,
        size_bytes=float(size_bytes),
        n_ranks=setup.n,
        time_s=float(time_s) + local,
        algorithm=algo,
        protocol=proto,
        network=network,
        steps=sched.num_steps,
        channels=setup.channels,
        pipeline_chunks=chunks,
        wire_bytes_by_scope=dict(scope_bytes(setup.topology, link_bytes)),
    )


def run_on_network(
    setup: CollectiveSetup, sched: Schedule, protocol: str, size_bytes: float, network: str
) -> tuple[float, np.ndarray]:
    """Run ``sched`` alone on a fresh ``network`` backend: (time s, bytes per link).

    On ``analytical`` this equals the tuner's closed form (a test checks it; the
    simulation uses the closed form directly, which is much faster at scale).
    """
    time_s, net = replay_on_network(setup, sched, protocol, size_bytes, network)
    return time_s, net.link_bytes


def replay_on_network(
    setup: CollectiveSetup, sched: Schedule, protocol: str, size_bytes: float, network: str,
    record: bool = False,
) -> tuple[float, Any]:  # fmt: skip
    """As :func:`run_on_network`, returning the network itself (its counters; with
    ``record`` on the flow network, its per-link rate samples)."""
    import simpy  # with the backends, only when a network is run (see sim.network)

    from sim.collectives.process import run_schedule
    from sim.network import make_network

    env = simpy.Environment()
    net = make_network(network, env, setup.topology, record=record, solve_cache=setup.solve_cache)
    env.process(
        run_schedule(
            env, net, sched, setup.endpoints(sched), setup.routes, setup.params, protocol,
            exclusive=True,
            nccl_channels=setup.nccl_channels(sched.algorithm, protocol, size_bytes),
        )
    )  # fmt: skip
    env.run()
    return float(env.now), net
