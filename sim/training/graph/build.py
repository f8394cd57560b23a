"""Build the step's task graph: every framework semantic of the step lives here.

One data-parallel replica stands for its identical peers (DP replica 0; its TP ranks run
the same kernels, so a stage's compute is one stream), and every TP rank's data-parallel
collectives are issued together (one task whose groups are the TP ranks' groups). Per
pipeline stage ``s`` the streams are:

- ``s{s}.compute``: the stage's passes in the pipeline schedule's order
  (:mod:`sim.training.schedule.pipeline`). A pass is one task, or one task per unit when
  its units wait for parameter gathers, or one per segment between gradient-bucket
  releases;
- ``s{s}.gather``: ZeRO-3/FSDP parameter all-gathers, one per unit, prefetched: unit
  ``j``'s gather starts when gather ``j - 1`` has ended and unit ``j - 2`` has run (at
  most two gathered units: FSDP's ``limit_all_gathers``); a pass's first gather starts
  with the pass;
- ``s{s}.dp``: gradient buckets (optional local kernels, then their collectives),
  released as the backward produces them: in every micro-batch's backward (ZeRO-2/3) or
  in the chunk's last one (ZeRO-0/1), after the stage's last pass without ``overlap_dp``;
  then the tied-embedding all-reduce (first and last stage), the optimizer (or the
  offloaded optimizer's copies and CPU step) and the parameter all-gathers after it
  (ZeRO-1/2).

Pipeline sends are transfer tasks without a stream (one transfer per TP rank), from the
producing pass to the consuming one. With every task outside the passes free
(:func:`sim.training.graph.execute.ideal_skip`) the same graph runs the ideal pipeline,
whose idle time is the schedule's bubble.

Analytical contention (ZeRO-3/FSDP with reductions every micro-batch and ``overlap_dp``):
a stage's gathers and gradient reductions cross the same NICs, so they share one NIC
resource (``nic``), the reductions filling the gaps the gathers leave (``fill``), and every
pipeline stage's groups are taken to run at once (``peers``). Executors that simulate the
network ignore both and let the transfers share the links.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from sim.training.compute.passes import CollectiveTimer, PassCost, Unit
from sim.training.graph.buckets import (
    Bucket,
    bucket_release_units,
    buckets_of,
    reduces_after,
    stage_comm,
)
from sim.training.graph.costs import param_units
from sim.training.graph.offload import optimizer_tasks
from sim.training.graph.task import COLLECTIVE, COMPUTE, TRANSFER, Comm, PassInfo, StepGraph
from sim.training.schedule.pipeline import Step, make_schedule
from sim.training.setup import StepSetup
from sim.workload.techniques import techniques_of
from sim.workload.zero import gathers_once, zero_semantics

__all__ = ["AHEAD_LABEL", "build_step_graph", "p2p_latency_s"]

#: Label of the parameter all-gathers a distributed optimizer runs ahead of the next
#: step's forward (``overlap_param_gather``): what they leave exposed is ``param_gather``
AHEAD_LABEL = "param_gather_ahead"


def p2p_latency_s(setup: StepSetup) -> float:
    """Software latency of one pipeline send (NCCL send/recv, Simple protocol), seconds."""
    return setup.profile.collectives.algorithm("direct").base_latency_s["simple"]


class _Builder:
    """State while building (private: :func:`build_step_graph` is the interface)."""

    def __init__(
        self, setup: StepSetup, costs: dict[tuple[int, str], PassCost], microbatches: int | None
    ) -> None:
        self.setup, self.costs = setup, costs
        plan = setup.plan
        self.p, self.v = plan.pp, plan.virtual_stages
        self.m = plan.num_microbatches if microbatches is None else microbatches
        self.nvs = self.p * self.v
        self.g = StepGraph()
        sem = zero_semantics(plan)
        self.buckets = [buckets_of(setup, s) for s in range(self.p)]
        every_mb = sem.reduce_every_microbatch and plan.dp_cp > 1
        self.shared = every_mb and plan.zero >= 3 and plan.overlap_dp and any(self.buckets)
        self.schedule = make_schedule(plan.schedule, self.p, self.m, self.v,
                                      plan.microbatch_group_size)  # fmt: skip
        self.comm = [stage_comm(setup, s) for s in range(self.p)]  # each stage's volumes
        self.pp_bytes = [c.pp_send_bytes for c in self.comm]
        self.pass_end: dict[tuple[str, int, int], int] = {}  # (kind, vstage, mb) -> last task
        self.pass_first: dict[tuple[str, int, int], list[int]] = {}  # tasks waiting for input
        self.last_compute = [-1] * self.p
        self.released: list[list[tuple[int, Bucket]]] = [[] for _ in range(self.p)]
        self._comms: dict[tuple[object, ...], tuple[Comm, ...]] = {}  # equal parts: one tuple
        # local SGD synchronises every H steps: a step's byte counters carry 1 / H of it
        self.sync_copies = 1.0 / techniques_of(setup.scenario.parallel).sync_every
        self.all_groups = {
            kind: tuple(g for st in setup.stages for g in st.group(kind))
            for kind in ("dp", "edp", "shard", "replica")
        }
        fw = setup.scenario.framework
        #: units whose gathers may run ahead (FSDP's limit_all_gathers: two gathered units)
        self.depth = fw.gathered_units if fw is not None else 2
        #: FSDP2 with pipeline parallelism (torchtitan): each chunk's parameters are gathered
        #: before its first forward and stay gathered; its gradients reduce-scatter once,
        #: after its last backward
        self.gather_once = gathers_once(plan, fw)
        #: Megatron-Core's distributed optimizer with --overlap-param-gather: the updated
        #: parameters are all-gathered bucket by bucket ahead of the next step's first
        #: forward of each chunk, not after the optimizer: the first bucket's from the
        #: step's start (``zero_grad()``), the next ones as the forward reaches the bucket
        #: before (:meth:`_waits_for_input`)
        self.param_overlap = (
            fw is not None
            and fw.overlap_param_gather
            and any(c.dp_param_gather_bytes > 0 for c in self.comm)
        )
        #: under the interleaved schedule Megatron aligns the dispatch across pipeline
        #: ranks (``align_param_gather``, on by default, forced off without interleaving:
        #: megatron/training/arguments.py): every bucket of chunks 0 and 1 is all-gathered
        #: at the step's start, chunk c's when chunk c-1's first forward begins
        #: (``param_sync_func`` in schedules.py); otherwise each bucket's all-gather is
        #: dispatched by the forward pre-hook of the bucket before it (one ahead)
        self.align = self.param_overlap and self.v > 1
        #: the all-gather uses the gradient buckets (``allgather_bucket_elements`` None):
        #: where only chunk 0 of pipeline rank 0 is cut into buckets, every other chunk's
        #: parameters are gathered by one all-gather before its first unit
        self.one_bucket = fw is not None and fw.grad_bucket_first_chunk_only
        self.chunk_start: dict[tuple[int, int], int] = {}

    # -- passes ---------------------------------------------------------------------------
    def stage_passes(self, s: int) -> None:
        """Every pass of stage ``s`` in schedule order, with its gathers and releases."""
        order = self.schedule[s]
        last_b = {c: max(st.mb for st in order if st.kind == "B" and st.chunk == c)
                  for c in range(self.v)}  # fmt: skip
        first_f = {c: min(st.mb for st in order if st.kind == "F" and st.chunk == c)
                   for c in range(self.v)}  # fmt: skip
        g = self.g
        compute = g.stream(f"s{s}.compute")
        cost_of: dict[tuple[int, str, bool], PassCost] = {}  # a pass's cost, per kind of pass
        pass_first, pass_end = self.pass_first, self.pass_end
        for st in order:
            kind, mb, chunk = st
            vs = chunk * self.p + s
            opener = kind == "F" and mb == first_f[chunk]
            cost = cost_of.get((vs, kind, opener))
            if cost is None:
                cost = cost_of[(vs, kind, opener)] = self._cost(vs, kind, opener)
            pid = g.add_pass(PassInfo(s, kind, mb, chunk, vs))
            if self.gather_once:  # reduce-scatter once per chunk, after its last backward
                release = kind == "B" and mb == last_b[chunk] and self.setup.plan.dp_cp > 1
            else:
                release = reduces_after(self.setup, kind, mb, last_b[chunk])
            buckets = self.buckets[s] if release else []
            prev = self.last_compute[s]
            if cost.gathers:
                first, ends = self._gathered(s, cost, pid, compute, prev, self._align(s, st))
            else:
                first, ends = self._segments(s, cost, pid, compute, len(buckets))
            pass_first[(kind, vs, mb)] = first
            if opener:
                self.chunk_start[(s, chunk)] = first[-1]
            pass_end[(kind, vs, mb)] = ends[-1]
            self.last_compute[s] = ends[-1]
            if buckets:
                at = bucket_release_units(len(ends), len(buckets))
                self.released[s] += [(ends[u], b) for b, u in zip(buckets, at, strict=True)]

    def _cost(self, vs: int, kind: str, first_forward: bool) -> PassCost:
        """The pass's cost, its units' gathers as the framework runs them: only the first
        forward of each chunk gathers under FSDP2 with pipeline parallelism or when the
        optimizer's parameter all-gather overlaps the next step's forward."""
        cost = self.costs[(vs, kind)]
        if self.gather_once and cost.gathers and not (kind == "F" and first_forward):
            return replace(cost, units=tuple(Unit(u.busy_s) for u in cost.units))
        if self.param_overlap and kind == "F" and first_forward:
            sizes = param_units(self.setup, vs)
            if self.one_bucket and vs > 0:  # the chunk's one bucket, gathered before unit 0
                whole = (sum(d for d, _ in sizes), sum(e for _, e in sizes))
                sizes = [whole] + [(0.0, 0.0)] * (len(sizes) - 1)
            units = tuple(Unit(u.busy_s, d, e) for u, (d, e) in zip(cost.units, sizes, strict=True))
            return replace(cost, units=units)
        return cost

    def _segments(
        self, s: int, cost: PassCost, pid: int, compute: int, releases: int
    ) -> tuple[list[int], list[int]]:
        """A pass without gathers: one task, or one per segment between the units after
        which gradient buckets are released. Returns (first task, the task each unit ends
        in: release points end a segment)."""
        g = self.g
        if not releases or len(cost.units) <= 1:
            t = g.add(COMPUTE, compute, (), duration_s=cost.busy_s, label="pass", stage=s,
                      pass_of=pid)  # fmt: skip
            return [t], [t] * max(1, len(cost.units))
        cuts = set(bucket_release_units(len(cost.units), releases))
        cuts.add(len(cost.units) - 1)
        tasks: list[int] = []
        seg_of: list[int] = []  # segment number of each unit
        pending = 0.0
        for j, unit in enumerate(cost.units):
            pending += unit.busy_s
            seg_of.append(len(tasks))
            if j in cuts:
                tasks.append(g.add(COMPUTE, compute, (), duration_s=pending, label="pass",
                                   stage=s, pass_of=pid))  # fmt: skip
                pending = 0.0
        return [tasks[0]], [tasks[k] for k in seg_of]

    def _align(self, s: int, st: Step) -> list[int] | None:
        """Dependencies of an aligned parameter all-gather (:attr:`align`): none for chunks
        0 and 1, the first forward of the chunk before for the others; None: not aligned."""
        if not (self.align and st.kind == "F"):
            return None
        before = self.chunk_start.get((s, st.chunk - 1)) if st.chunk >= 2 else None
        return [before] if before is not None else []

    def _gathered(
        self,
        s: int,
        cost: PassCost,
        pid: int,
        compute: int,
        prev: int,
        aligned: list[int] | None = None,
    ) -> tuple[list[int], list[int]]:
        """A pass whose units wait for their parameter gathers (ZeRO-3/FSDP, or a
        distributed optimizer's run ahead of the forward); ``aligned``: the gathers' only
        dependencies (dispatched together, see :attr:`align`). Run ahead, a unit without
        bytes to gather (gathered in an earlier unit's bucket) waits for none. Returns (the tasks
        that wait for the pass's input, the first unit's compute last; each unit's task)."""
        g = self.g
        gather = g.stream(f"s{s}.gather")
        units: list[int] = []
        waiting: list[int] = []
        for j, unit in enumerate(cost.units):
            after: tuple[int, ...] = ()
            if not self.param_overlap or unit.gather_bytes > 0 or unit.expert_gather_bytes > 0:
                gt = self._gather_task(s, gather, pid, unit, j, units, prev, aligned)
                after = (gt,)
                if self._waits_for_input(j, aligned):
                    waiting.append(gt)
            units.append(g.add(COMPUTE, compute, after, duration_s=unit.busy_s, label="pass",
                               stage=s, pass_of=pid))  # fmt: skip
        return [*waiting, units[0]], units

    def _waits_for_input(self, j: int, aligned: list[int] | None) -> bool:
        """Whether unit ``j``'s gather waits for the pass's input. ZeRO-3/FSDP: the first
        (the rest follow it on the gather stream). A distributed optimizer's run ahead
        (Megatron-Core at the benchmark's commit f2e5db40, distrib_optimizer.py): the
        first bucket's all-gather is dispatched by ``zero_grad()`` at the step's start, the
        next by the forward pre-hook of the bucket before, which runs once the pass has
        its input; aligned gathers wait for none."""
        if aligned is not None:
            return False
        if self.param_overlap:
            return 0 < j < self.depth
        return j == 0

    def _gather_task(
        self,
        s: int,
        gather: int,
        pid: int,
        unit: Unit,
        j: int,
        units: list[int],
        prev: int,
        aligned: list[int] | None,
    ) -> int:
        """Unit ``j``'s gather on stream ``gather``: after unit ``j - depth`` has run (at
        most ``depth`` units gathered at once), the pass's first after the stage's last
        compute ``prev``; ``aligned``: its only dependencies."""
        if aligned is not None:
            deps = aligned
        else:
            d = self.depth
            deps = [units[j - d]] if j >= d else ([prev] if prev >= 0 and j == 0 else [])
        key = ("gather", s, unit.gather_bytes, unit.expert_gather_bytes)
        parts = self._comms.get(key)
        if parts is None:
            stage = self.setup.stages[s]
            parts = self._comms[key] = self._gather_parts(
                s, stage.group("shard"), stage.group("edp"), unit
            )
        label = AHEAD_LABEL if self.param_overlap else "zero_all_gather"
        return self.g.add(COLLECTIVE, gather, deps, comm=parts, label=label, stage=s,
                          pass_of=pid, nic=s if self.shared else -1)  # fmt: skip

    def _peers(self, kind: str, s: int) -> tuple[tuple[str, ...], ...]:
        """Groups running the same data-parallel collective as stage ``s``'s at once, whose
        traffic shares the fabric with it: none unless :attr:`shared`; every stage's where
        ZeRO-3 gathers and reduces throughout the step; the stage's own where each chunk
        gathers once and reduces once (:attr:`gather_once`: the stages do so one after
        another, as the pipeline fills and drains)."""
        if not self.shared:
            return ()
        if self.gather_once:
            return tuple(self.setup.stages[s].group(kind))
        return self.all_groups[kind]

    def _gather_parts(
        self, s: int, shard: Sequence[tuple[str, ...]], edp: Sequence[tuple[str, ...]],
        unit: Unit,
    ) -> tuple[Comm, ...]:  # fmt: skip
        out = []
        for kind, groups, nbytes in (("shard", shard, unit.gather_bytes),
                                     ("edp", edp, unit.expert_gather_bytes)):  # fmt: skip
            if nbytes > 0:
                peers = self._peers(kind, s)
                what = "param" if self.param_overlap else "zero3"
                out.append(Comm("all_gather", nbytes, tuple(groups), peers,
                                tag=f"{what} {kind} all_gather"))  # fmt: skip
        return tuple(out)

    # -- pipeline sends -------------------------------------------------------------------
    def sends(self) -> None:
        """Each pass's input: a pipeline send from the pass that produced it (or the
        producing pass itself where nothing moves between stages)."""
        for (kind, vs, mb), first in self.pass_first.items():
            if kind == "F" and vs == 0:
                continue
            if kind == "F":
                src_key = ("F", vs - 1, mb)
            elif vs == self.nvs - 1:
                src_key = ("F", vs, mb)  # the loss: backward follows the last forward
            else:
                src_key = ("B", vs + 1, mb)
            dep = self._send(src_key, vs % self.p)
            for t in first:
                self.g.deps[t].append(dep if dep >= 0 else self.pass_end[src_key])

    def _send(self, src_key: tuple[str, int, int], dst: int) -> int:
        """A transfer task from the producing pass to stage ``dst``; -1 when no bytes move
        (same stage, nothing to send, or the loss: B after the last F)."""
        kind, vs, _ = src_key
        src = vs % self.p
        if kind == "F" and vs == self.nvs - 1:
            return -1
        nbytes = self.pp_bytes[src]
        if src == dst or nbytes <= 0:
            return -1
        parts = self._comms.get(("send", src, dst))
        if parts is None:
            pairs = tuple(
                zip(self.setup.stages[src].gpus, self.setup.stages[dst].gpus, strict=True)
            )
            comm = Comm("send", nbytes, pairs, latency_s=p2p_latency_s(self.setup), tag="pp send",
                        copies=self.setup.plan.dp_cp)  # fmt: skip
            parts = self._comms[("send", src, dst)] = (comm,)
        end = self.pass_end[src_key]  # its producer's last task: the send goes with that pass
        return self.g.add(TRANSFER, -1, (end,), comm=parts, label="pp_send", stage=src,
                          owner=self.g.pass_of[end])  # fmt: skip

    # -- data-parallel work ---------------------------------------------------------------
    def stage_dp(self, s: int) -> int:
        """Stage ``s``'s gradient buckets on its DP stream; the last task (or -1)."""
        g, plan, stage = self.g, self.setup.plan, self.setup.stages[s]
        dp = g.stream(f"s{s}.dp")
        last = -1
        for at, bucket in self.released[s]:
            dep = at if plan.overlap_dp else self.last_compute[s]
            pid = g.pass_of[at]  # the backward that released the bucket
            nic = s if self.shared else -1
            if bucket.local_s > 0:
                last = g.add(COMPUTE, dp, (dep,), duration_s=bucket.local_s, label=bucket.label,
                             stage=s, nic=nic, fill=self.shared, owner=pid)  # fmt: skip
                dep = last
            for kind, op, nbytes in bucket.steps:
                parts = self._comms.get(("dp", s, kind, op, nbytes))
                if parts is None:
                    peers = self._peers(kind, s)
                    comm = Comm(op, nbytes, stage.group(kind), peers, tag=f"{kind} {op}",
                                copies=self.sync_copies)  # fmt: skip
                    parts = self._comms[("dp", s, kind, op, nbytes)] = (comm,)
                last = g.add(COLLECTIVE, dp, (dep,), comm=parts, label=bucket.label, stage=s,
                             nic=nic, fill=self.shared, owner=pid)  # fmt: skip
                dep = last
        return last

    def finish(self) -> None:
        """The data-parallel streams, the tied-embedding sync, the optimizer and the
        parameter all-gathers after it."""
        dp_done = [self.stage_dp(s) for s in range(self.p)]
        g, setup = self.g, self.setup
        ready = [[t for t in (self.last_compute[s], dp_done[s]) if t >= 0] for s in range(self.p)]
        tied = self.comm[0].tied_embedding_bytes
        if tied > 0 and self.p > 1:
            pair = (setup.stages[0].gpus[0], setup.stages[-1].gpus[0])
            comm = Comm("all_reduce", tied, (pair,), tag="tied embedding all_reduce",
                        copies=setup.plan.tp * setup.plan.dp_cp)  # fmt: skip
            t = g.add(COLLECTIVE, g.stream("s0.dp"), ready[0] + ready[-1], comm=(comm,),
                      label="tied_all_reduce", stage=0)  # fmt: skip
            ready[0], ready[-1] = [t], [t]
        for s in range(self.p):
            self.stage_tail(s, ready[s])

    def stage_tail(self, s: int, ready: list[int]) -> None:
        """Optimizer (or offloaded optimizer) and parameter all-gathers of stage ``s``."""
        g, setup = self.g, self.setup
        dp = g.stream(f"s{s}.dp")
        last = optimizer_tasks(g, setup, s, ready)
        c, stage = self.comm[s], setup.stages[s]
        parts = tuple(
            Comm("all_gather", nbytes, groups, tag=f"{kind} param all_gather")
            for kind, groups, nbytes in (("shard", stage.shard, c.dp_param_gather_bytes),
                                         ("edp", stage.edp, c.edp_param_gather_bytes))
            if nbytes > 0
        )  # fmt: skip
        if parts and not self.param_overlap:
            g.add(COLLECTIVE, dp, (last,), comm=parts, label="param_all_gather", stage=s)


def build_step_graph(
    setup: StepSetup,
    timer: CollectiveTimer,
    costs: dict[tuple[int, str], PassCost],
    microbatches: int | None = None,
) -> StepGraph:
    """The task graph of one training step of ``setup`` (see the module docstring).

    Parameters
    ----------
    setup : StepSetup
        The resolved scenario.
    timer : CollectiveTimer
        Not used to time anything here (executors do); kept so that graph and executor
        see the same collective parameters.
    costs : dict
        :class:`PassCost` of every (virtual stage, ``"F"``/``"B"``).
    microbatches : int, optional
        Schedule this many micro-batches instead of the plan's (the costs stay the plan's:
        :mod:`sim.training.graph.fold` runs a short step and repeats its steady state).

    Returns
    -------
    StepGraph
        Tasks, streams and dependencies.
    """
    b = _Builder(setup, costs, microbatches)
    for s in range(b.p):
        b.stage_passes(s)
    b.sends()
    b.finish()
    return b.g
