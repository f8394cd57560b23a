"""The training-step engine: one pipeline replica on SimPy, DP traffic of every TP rank.

Per pipeline stage a compute stream runs its schedule (:mod:`sim.training.schedule.pipeline`); a
pass starts when its input (activation or gradient) has arrived and the stream is free,
and lasts its compute plus exposed TP/EP communication (:mod:`sim.training.compute.passes`).
Pipeline sends are transfers on the shared network (one per TP rank). Data-parallel work
is explicit collective tasks (:mod:`sim.training.engine.stage`): gradient buckets on a
per-stage DP stream, released as backward passes produce them (every micro-batch under
ZeRO-2/3, the last one otherwise; after the stage's last pass without ``overlap_dp``),
and, under ZeRO-3/FSDP, each unit's parameter all-gather on a per-stage gather stream,
prefetched one unit ahead of the compute that needs it. On the flow network every such
collective runs the tuner's schedule on the groups of *all* TP ranks of the stage at
once, so gathers, gradient reductions and pipeline sends contend for the links; each
uniform phase (a ring's steps) runs as one step of all its bytes (:data:`COALESCE`). With the
analytical network (no contention) the same model is evaluated by list scheduling
(:mod:`sim.training.engine.timeline`), and there the groups of TP rank 0 stand for the stage.

Identical replicas are not simulated one by one: DP replica 0's pipeline stands for all.
Other replicas' pipeline sends use other GPUs' links; only where the fabric is shared
(e.g. an oversubscribed spine) would they add contention, which is not modelled.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import cast

import simpy

from sim.collectives.process import run_schedule
from sim.network import make_network
from sim.network.base import Network
from sim.network.flow import FlowNetwork
from sim.network.solvecache import SolveCache
from sim.topology.model import Topology
from sim.training.compute.passes import CollectiveTimer, PassCost, Unit
from sim.training.engine.setup import StepSetup
from sim.training.engine.stage import (
    Bucket,
    PassRecord,
    StageTimeline,
    bucket_release_units,
    buckets_of,
    chunk_costs,
    optimizer_s,
    reduces_after,
    stage_comm,
    tail_gathers_s,
)
from sim.training.engine.timeline import list_schedule
from sim.training.schedule.pipeline import Step, make_schedule

__all__ = ["COALESCE", "PipelineRun", "run_pipeline"]

#: Run each uniform phase of a collective (a ring's steps) as one step of all its bytes on
#: the flow network (``run_schedule``'s ``coalesce``): within 0.3% of lockstep steps and
#: 7-22x faster on ``benchmarks/coalesce.py``'s cases. False: strict lockstep (slow).
COALESCE = True


@dataclass
class PipelineRun:
    """Outcome of :func:`run_pipeline`."""

    lines: list[StageTimeline]
    costs: dict[tuple[int, str], PassCost]
    network: Network | None
    pp_wire_bytes: dict[str, float]  # replica 0's pipeline sends, per link scope
    timer: CollectiveTimer | None = None  # times the analytical run's gathers (for traces)


class _Run:
    """State of one SimPy-simulated step (private; :func:`run_pipeline` is the interface)."""

    def __init__(
        self,
        setup: StepSetup,
        timer: CollectiveTimer,
        costs: dict[tuple[int, str], PassCost],
        free_p2p: bool,
        with_dp: bool,
        record: bool = False,
    ) -> None:
        self.setup, self.timer, self.costs = setup, timer, costs
        self.plan = plan = setup.plan
        self.free_p2p, self.with_dp = free_p2p, with_dp
        self.env = simpy.Environment()
        # micro-batches repeat the same sets of flows: their solves are looked up
        flow = record or setup.network == "flow"
        self.net: Network = (
            FlowNetwork(self.env, timer.topology, record=record, solve_cache=SolveCache())
            if flow
            else make_network(setup.network, self.env, timer.topology)
        )
        self.p, self.v, self.m = plan.pp, plan.virtual_stages, plan.num_microbatches
        self.nvs = self.p * self.v
        self.pp_bytes = [stage_comm(setup, s).pp_send_bytes for s in range(self.p)]
        self.act = {(vs, mb): self.env.event() for vs in range(self.nvs) for mb in range(self.m)}
        self.grad = {(vs, mb): self.env.event() for vs in range(self.nvs) for mb in range(self.m)}
        for mb in range(self.m):
            self.act[(0, mb)].succeed()
        self.lines = [StageTimeline() for _ in range(self.p)]
        self.queues = [simpy.Store(self.env) for _ in range(self.p)]
        self.p2p_latency_s = p2p_latency_s(setup)
        self.pp_wire: dict[str, float] = {}

    def stage_process(self, s: int) -> Generator[simpy.Event, object, None]:
        plan, line = self.plan, self.lines[s]
        order = make_schedule(plan.schedule, self.p, self.m, self.v)[s]
        last_b = {
            c: max(st.mb for st in order if st.kind == "B" and st.chunk == c) for c in range(self.v)
        }
        held: list[Bucket] = []
        for st in order:
            vs = st.chunk * self.p + s
            yield (self.act if st.kind == "F" else self.grad)[(vs, st.mb)]
            cost = self.costs[(vs, st.kind)]
            start = self.env.now
            release = self.with_dp and reduces_after(self.setup, st.kind, st.mb, last_b[st.chunk])
            buckets = buckets_of(self.setup, s) if release else []
            if plan.overlap_dp:
                yield from self._run_pass(s, cost, buckets)
            else:
                held += buckets
                yield from self._run_pass(s, cost, [])
            line.add_pass(cost, PassRecord(s, st.kind, st.mb, st.chunk, start, self.env.now))
            self._after_pass(s, st, vs)
        line.compute_end_s = self.env.now
        for b in held:
            self.queues[s].put(b)
        self.queues[s].put(None)

    def _run_pass(
        self, s: int, cost: PassCost, buckets: Sequence[Bucket]
    ) -> Generator[simpy.Event, object, None]:
        """Run a pass unit by unit: wait for each unit's gather, release buckets on time."""
        units = cost.units
        if not units or (not cost.gathers and not buckets):
            yield self.env.timeout(cost.busy_s)
            for b in buckets:
                self.queues[s].put(b)
            return
        after: dict[int, list[Bucket]] = {}
        for b, u in zip(buckets, bucket_release_units(len(units), len(buckets)), strict=True):
            after.setdefault(u, []).append(b)
        if cost.gathers:
            gathered = [self.env.event() for _ in units]
            ran = [self.env.event() for _ in units]
            self.env.process(self._gathers(s, units, gathered, ran))
        pending = 0.0  # busy time not yet waited for (units with nothing to release)
        for j, unit in enumerate(units):
            if cost.gathers:
                yield gathered[j]
                yield self.env.timeout(unit.busy_s)
                ran[j].succeed()
            else:
                pending += unit.busy_s
                if j not in after:
                    continue
                yield self.env.timeout(pending)
                pending = 0.0
            for b in after.get(j, []):
                self.queues[s].put(b)
        if pending:
            yield self.env.timeout(pending)

    def _gathers(
        self, s: int, units: Sequence[Unit], gathered: list[simpy.Event], ran: list[simpy.Event]
    ) -> Generator[simpy.Event, object, None]:
        """The stage's gather stream: one all-gather per unit, at most two units ahead."""
        stage = self.setup.stages[s]
        for j, unit in enumerate(units):
            if j >= 2:
                yield ran[j - 2]
            procs = []
            for kind, nbytes in (("shard", unit.gather_bytes), ("edp", unit.expert_gather_bytes)):
                if nbytes > 0:
                    procs += [
                        self._collective(g, "all_gather", nbytes, f"zero3 {kind} all_gather")
                        for g in stage.group(kind)
                    ]
            if procs:
                start = self.env.now
                yield self.env.all_of(procs)
                self.lines[s].comm.append(("zero_all_gather", start, self.env.now))
            gathered[j].succeed()

    def _collective(self, group: Sequence[str], op: str, nbytes: float,
                    tag: str = "") -> simpy.Process:  # fmt: skip
        """A collective's schedule as transfers on the shared network (a SimPy process);
        ``tag`` names its bytes in the network's per-link counters."""
        sched, proto = self.timer.plan(group, op, nbytes)
        cs = self.timer.setup(group)
        body = run_schedule(
            self.env, self.net, sched, cs.endpoints(sched), cs.routes, cs.params, proto,
            nccl_channels=cs.nccl_channels(sched.algorithm, proto, nbytes), tag=tag or op,
            coalesce=COALESCE,
        )  # fmt: skip
        return self.env.process(body)

    def _after_pass(self, s: int, st: Step, vs: int) -> None:
        if st.kind == "F":
            if vs < self.nvs - 1:
                self.env.process(self._send(s, (vs + 1) % self.p, self.act[(vs + 1, st.mb)]))
            else:
                self.grad[(vs, st.mb)].succeed()
        elif vs > 0:
            self.env.process(self._send(s, (vs - 1) % self.p, self.grad[(vs - 1, st.mb)]))

    def _send(self, src: int, dst: int, done: simpy.Event) -> Generator[simpy.Event, object, None]:
        nbytes = self.pp_bytes[src]
        start = self.env.now
        if not self.free_p2p and src != dst and nbytes > 0:
            a, b = self.setup.stages[src].gpus, self.setup.stages[dst].gpus
            _add_route_bytes(self.pp_wire, self.timer.topology, zip(a, b, strict=True), nbytes)
            yield self.env.all_of(
                [self.net.transfer(x, y, nbytes, tag="pp send") for x, y in zip(a, b, strict=True)]
            )
            yield self.env.timeout(self.p2p_latency_s)
            self.lines[src].comm.append(("pp_send", start, self.env.now))
        done.succeed()

    def dp_process(self, s: int) -> Generator[simpy.Event, object, None]:
        line, stage = self.lines[s], self.setup.stages[s]
        while True:
            item = yield self.queues[s].get()
            if item is None:
                break
            bucket = cast(Bucket, item)
            start = self.env.now
            if bucket.local_s > 0:  # compression kernels, parameter-server push and pull
                yield self.env.timeout(bucket.local_s)
            for kind, op, nbytes in bucket.steps:
                yield self.env.all_of(
                    [self._collective(g, op, nbytes, f"{kind} {op}") for g in stage.group(kind)]
                )
            line.comm.append((bucket.label, start, self.env.now))
        line.dp_end_s = max(self.env.now, line.compute_end_s)
        line.optimizer_s = optimizer_s(self.setup, s, line.compute_end_s) if self.with_dp else 0.0
        line.param_gather_s = tail_gathers_s(self.setup, self.timer, s) if self.with_dp else 0.0
        yield self.env.timeout(line.optimizer_s + line.param_gather_s)
        line.end_s = self.env.now


def p2p_latency_s(setup: StepSetup) -> float:
    """Software latency of one pipeline send (NCCL send/recv, Simple protocol), seconds."""
    return setup.profile.collectives.algorithm("direct").base_latency_s["simple"]


def run_pipeline(
    setup: StepSetup,
    timer: CollectiveTimer,
    *,
    free_p2p: bool = False,
    with_dp: bool = True,
    record: bool = False,
) -> PipelineRun:
    """Simulate one step: SimPy on the flow network, list scheduling on the analytical one.

    ``free_p2p`` makes pipeline sends instantaneous and ``with_dp=False`` drops gradient
    reduction and the optimizer: together they give the pipeline's ideal bubble.
    ``record`` keeps the flow network's per-link rate samples (for trace counters).
    """
    costs = chunk_costs(setup, timer)
    if setup.network == "analytical":
        pp_bytes = [stage_comm(setup, s).pp_send_bytes for s in range(setup.plan.pp)]
        lines = list_schedule(
            setup, timer, costs, pp_bytes, p2p_latency_s(setup), free_p2p=free_p2p, with_dp=with_dp
        )
        wire = {} if free_p2p else _analytical_pp_wire(setup, timer, lines, pp_bytes)
        return PipelineRun(lines, costs, None, wire, timer)
    run = _Run(setup, timer, costs, free_p2p, with_dp, record)
    for s in range(run.p):
        run.env.process(run.stage_process(s))
        run.env.process(run.dp_process(s))
    run.env.run()
    return PipelineRun(run.lines, costs, run.net, run.pp_wire, timer)


def _analytical_pp_wire(
    setup: StepSetup, timer: CollectiveTimer, lines: list[StageTimeline], pp_bytes: list[float]
) -> dict[str, float]:
    """Pipeline-send bytes per link scope of replica 0 (what the flow network would count)."""
    p, nvs = setup.plan.pp, setup.plan.pp * setup.plan.virtual_stages
    sends: dict[tuple[int, int], int] = {}
    for s, line in enumerate(lines):
        for rec in line.passes:
            vs = rec.chunk * p + s
            if (rec.kind == "F" and vs == nvs - 1) or (rec.kind == "B" and vs == 0):
                continue
            dst = (s + 1) % p if rec.kind == "F" else (s - 1) % p
            if dst != s:
                sends[(s, dst)] = sends.get((s, dst), 0) + 1
    out: dict[str, float] = {}
    for (s, dst), count in sends.items():
        pairs = zip(setup.stages[s].gpus, setup.stages[dst].gpus, strict=True)
        _add_route_bytes(out, timer.topology, pairs, pp_bytes[s] * count)
    return out


def _add_route_bytes(
    out: dict[str, float], topo: Topology, pairs: Iterable[tuple[str, str]], nbytes: float
) -> None:
    """Add ``nbytes`` per link crossed by each (src, dst) route to ``out`` by link scope."""
    for x, y in pairs:
        for li in topo.route(x, y):
            out[topo.link_scope[li]] = out.get(topo.link_scope[li], 0.0) + nbytes
