"""Fold a long pipeline step: run a few micro-batches, repeat their steady state.

A 1F1B step of ``m`` micro-batches on ``p`` stages (one stage: every micro-batch's forward
and backward in turn) has ``p - s - 1`` warm-up forwards on stage ``s``, then *pairs*
(pair ``i``: the forward of micro-batch ``p - s - 1 + i``, the backward of micro-batch
``i``), then the cool-down backwards and the step's tail (gradient reduction, optimizer).
One more micro-batch adds one pair on every stage and moves everything after it; around
it the graph is the same by pair number: pair ``i`` of stage ``s`` waits for pair ``i - 1``
of stage ``s - 1`` (its forward input), pair ``i`` of stage ``s + 1`` (its backward input)
and pair ``i - 1`` of its own stage (stream order), and its sends, gathers and gradient
buckets go with it. A *block* is pair ``b`` of every stage with the tasks it owns.

The interleaved schedule (Megatron's, ``v`` chunks per stage) is the same with ``p v``
pairs of chunk passes per block: ``p`` more micro-batches add one group of ``p v`` chunk
forwards and backwards to every stage. Its inputs cross stages in both directions (stage
0's forward of chunk ``c`` reads stage ``p - 1``'s of chunk ``c - 1``, ``p - 2`` pairs
later in pair number), so stage ``s``'s blocks start ``s`` pairs later, which makes every
input come from the same block or the one before.

On the closed-form executor the schedule is max-plus: a task starts at the latest end of
its inputs and lasts a fixed time, so moving every input by ``lam`` moves the task by
``lam``. If block ``j + 1`` is block ``j`` moved by ``lam`` (every task's start and end)
and each later block depends only on the one before and itself, then every later block is
the one before moved by ``lam``: the steady state is periodic. A step of ``m`` micro-batches
is then the short step's prefix, its last block repeated ``k`` more times ``lam`` apart
(``k`` blocks' worth of micro-batches more than the short step's ``m1``), and its
cool-down and tail moved by ``k lam``. :func:`fold_run` checks all of that on the short
step (the blocks' structure, their periodicity, how far back each block's inputs reach)
and declines (None: run the whole graph) where anything differs. What it returns is the
short graph with the last block at its last repetition and everything after it moved:
the stage timelines count the block's passes ``k + 1`` times (``repeats``) and the byte
counters its tasks (``weight``).

The short step (its graph, its run and its ideal pipeline's) is kept across steps that
differ only in their number of micro-batches (:func:`_short_step`): a search over the
global batch asks for the same short step with another repeat count. It is keyed by the
scenario and plan at the short step's batch, the topology, profile, compute parameters and
timer it ran with, and its pass costs (equal, by value: they change with the micro-batch
count where gradient accumulation is not fused).

Exact up to floating-point rounding: a repeated block's times are ``t + i lam`` rather
than sums accumulated pass by pass (relative differences ~1e-15). Only the closed-form
executor folds (the simulated network shares links between whatever runs at once; it runs
every task), and only 1F1B and interleaved schedules (GPipe's all-forwards-then-all-
backwards has no such block); not interleaved schedules whose micro-batch groups are not
``pp`` long (``parallel.microbatch_group_size``: the last group takes the remainder, so a
shorter step is not the same step with fewer blocks).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, replace

from sim.kept import Kept
from sim.network import backend
from sim.training.compute.passes import CollectiveTimer, PassCost
from sim.training.graph.build import build_step_graph
from sim.training.graph.execute import (
    Execution,
    PassSpan,
    StepRun,
    execute,
    ideal_skip,
    pass_spans,
    stage_timelines,
)
from sim.training.graph.task import StepGraph
from sim.training.graph.timelines import PassRecord
from sim.training.setup import StepSetup

__all__ = ["FOLD_BLOCKS", "SteadyLayout", "fold_microbatches", "fold_run"]

#: Steady blocks the short step runs (1F1B, interleaved): the periodicity check needs two
#: consecutive ones after the start-up transient (a 1F1B block is one pair per stage, so
#: up to two blocks of transient pass; an interleaved block is a whole group).
FOLD_BLOCKS = {"1f1b": 4, "interleaved": 3}
#: Relative tolerance of the periodicity check (rounding of sums of ~1e3 durations).
_TOL = 1e-12


@dataclass(frozen=True)
class SteadyLayout:
    """Where a schedule's steady blocks sit on each stage (in pairs of passes)."""

    warm: tuple[int, ...]  # each stage's warm-up forwards
    pairs: tuple[int, ...]  # each stage's steady pairs
    offset: tuple[int, ...]  # the pair each stage's first block starts at
    size: int  # pairs per block
    microbatches: int  # micro-batches per block

    @property
    def count(self) -> int:
        """Whole blocks on every stage, each stage's last pair left to the tail (it may
        release gradient buckets)."""
        return min((n - 1 - o) // self.size for n, o in zip(self.pairs, self.offset, strict=True))

    @classmethod
    def of(cls, schedule: str, p: int, m: int, v: int) -> SteadyLayout:
        """The layout of ``schedule`` (1F1B or interleaved) with ``m`` micro-batches.

        >>> SteadyLayout.of("1f1b", 4, 10, 1).count, SteadyLayout.of("interleaved", 4, 20, 2).count
        (6, 3)
        """
        if schedule == "1f1b":
            warm = tuple(min(p - s - 1, m) for s in range(p))
            return cls(warm, tuple(m - w for w in warm), (0,) * p, 1, 1)
        total = m * v
        warm = tuple(min(2 * (p - s - 1) + (v - 1) * p, total) for s in range(p))
        return cls(warm, tuple(total - w for w in warm), tuple(range(p)), p * v, p)


def fold_microbatches(setup: StepSetup) -> int | None:
    """Micro-batches of the short step that stands for ``setup``'s, or None where the step
    is not folded (another schedule, a simulated network, too few micro-batches to gain).

    >>> from types import SimpleNamespace as NS
    >>> plan = NS(schedule="1f1b", pp=8, num_microbatches=96, virtual_stages=1,
    ...           microbatch_group_size=None)
    >>> fold_microbatches(NS(plan=plan, network="analytical"))
    12
    """
    plan = setup.plan
    need = FOLD_BLOCKS.get(plan.schedule)
    if need is None or not backend(setup.network).closed_form:
        return None
    p, m, v = plan.pp, plan.num_microbatches, plan.virtual_stages
    if plan.microbatch_group_size not in (None, p):
        return None  # groups of n != p micro-batches: the step of m1 is not m's, shortened
    unit = SteadyLayout.of(plan.schedule, p, m, v).microbatches
    m1 = m % unit or unit
    while m1 < m and SteadyLayout.of(plan.schedule, p, m1, v).count < need:
        m1 += unit
    return m1 if m1 < m else None


@dataclass
class _Blocks:
    """Where each task of a short step sits: its block (-1 the warm-up, ``count`` the
    cool-down and tail), its place in the block's task list, and each block's tasks."""

    block: list[int]
    index: list[int]
    members: list[list[int]]
    count: int  # steady blocks
    pass_block: list[int]


def _blocks(graph: StepGraph, layout: SteadyLayout) -> _Blocks:
    """Each task's block: its pass's, or that of the pass it goes with (``owner``: a send
    its producer's, a gradient bucket the backward's that released it); the step's own
    tasks (tied embeddings, optimizer, parameter gathers after it) are the tail's."""
    count = layout.count
    seen = [0] * len(layout.warm)
    pass_block = []
    for info in graph.passes:
        q = seen[info.stage]
        seen[info.stage] += 1
        pair = (q - layout.warm[info.stage]) // 2 - layout.offset[info.stage]
        pass_block.append(-1 if q < layout.warm[info.stage] or pair < 0
                          else min(pair // layout.size, count))  # fmt: skip
    block = [pass_block[pid] if pid >= 0 else count for pid in graph.owner]
    members: list[list[int]] = [[] for _ in range(count)]
    index = [0] * len(block)
    for i, b in enumerate(block):
        if 0 <= b < count:
            index[i] = len(members[b])
            members[b].append(i)
    return _Blocks(block, index, members, count, pass_block)


def _regular(graph: StepGraph, preds: list[list[int]], blocks: _Blocks, first: int) -> bool:
    """Whether every steady block after ``first`` has the block before's tasks, in the same
    order, with the same durations and inputs (``preds``: each task's dependencies and
    stream predecessor) one block later; each reads only itself and the block before; and
    the cool-down and tail read nothing before the last block."""
    block, index, members, count = blocks.block, blocks.index, blocks.members, blocks.count
    g = graph
    for b in range(first + 1, count):
        if len(members[b]) != len(members[b - 1]):
            return False
        for a, t in zip(members[b], members[b - 1], strict=True):
            if (g.kind[a], g.stream_of[a], g.label[a], g.duration_s[a], g.nic[a]) != (
                g.kind[t], g.stream_of[t], g.label[t], g.duration_s[t], g.nic[t]
            ) or g.comm[a] is not g.comm[t]:  # fmt: skip
                return False
            if any(not b - 1 <= block[d] <= b for d in preds[a]):
                return False
            mine = sorted((b - block[d], index[d]) for d in preds[a])
            twin = sorted((b - 1 - block[d], index[d]) for d in preds[t])
            if mine != twin:
                return False
    return all(
        all(block[d] >= count - 1 for d in ds) for i, ds in enumerate(preds) if block[i] == count
    )


def _period(
    blocks: _Blocks, start: Sequence[float], end: Sequence[float], first: int
) -> float | None:
    """``lam`` where block ``first + 1`` is block ``first`` moved by ``lam``; else None."""
    later, earlier = blocks.members[first + 1], blocks.members[first]
    if not later:
        return None
    lam = end[later[0]] - end[earlier[0]]
    for a, t in zip(later, earlier, strict=True):
        tol = _TOL * max(1.0, abs(end[a]))
        if abs(start[a] - start[t] - lam) > tol or abs(end[a] - end[t] - lam) > tol:
            return None
    return lam


@dataclass(frozen=True)
class _Timed:
    """A short step's task times, its period ``lam`` (None: no two consecutive blocks from
    the first regular one on are periodic) and its passes' spans."""

    start: list[float]
    end: list[float]
    lam: float | None
    spans: list[PassSpan]


def _timed(blocks: _Blocks, first: int, graph: StepGraph, run: Execution) -> _Timed:
    """``run``'s times with their period and pass spans (see :class:`_Timed`)."""
    start, end = run.start, run.end
    lam = next((x for j in range(first, blocks.count - 1)
                if (x := _period(blocks, start, end, j)) is not None), None)  # fmt: skip
    return _Timed(start, end, lam, pass_spans(graph, start, end) if lam is not None else [])


def _expand(
    setup: StepSetup,
    graph: StepGraph,
    blocks: _Blocks,
    timed: _Timed,
    extra: int,
    costs: dict[tuple[int, str], PassCost],
    timer: CollectiveTimer,
) -> StepRun | None:
    """The whole step from the short one's times (see the module docstring), its last block
    repeated ``extra`` more times; None where the short step is not periodic."""
    lam = timed.lam
    if lam is None:
        return None
    last = blocks.count - 1
    shift = [extra * lam if b >= last else 0.0 for b in blocks.block]
    moved_start = [t + d for t, d in zip(timed.start, shift, strict=True)]
    moved_end = [t + d for t, d in zip(timed.end, shift, strict=True)]
    times = [extra + 1 if b == last else 1 for b in blocks.pass_block]
    spans = [
        (PassRecord(r.stage, r.kind, r.mb, r.chunk, r.start_s + d, r.end_s + d), vstage, ahead)
        for (r, vstage, ahead), b in zip(timed.spans, blocks.pass_block, strict=True)
        for d in (extra * lam if b >= last else 0.0,)
    ]  # fmt: skip
    lines = stage_timelines(graph, moved_start, moved_end, costs, setup.plan.pp, spans, times)
    weight = [extra + 1 if b == last else 1 for b in blocks.block]
    return StepRun(graph, moved_start, moved_end, None, lines, costs, timer, weight)


def fold_run(
    setup: StepSetup, timer: CollectiveTimer, costs: dict[tuple[int, str], PassCost]
) -> tuple[StepRun, StepRun] | None:
    """The step of ``setup`` and its ideal pipeline (every task outside the passes free),
    folded (see the module docstring); None where the step is not folded.

    Parameters
    ----------
    setup : StepSetup
        The resolved scenario (its plan's micro-batches are what the result stands for).
    timer : CollectiveTimer
        Times the collectives.
    costs : dict
        The plan's pass costs.

    Returns
    -------
    tuple of StepRun, or None
        The folded run and ideal run: the short graph and times (the last block at its
        last repetition), the whole step's stage timelines, and per task the times it
        occurs in the whole step (``weight``).
    """
    m1 = fold_microbatches(setup)
    if m1 is None:
        return None
    plan = setup.plan
    layout = SteadyLayout.of(plan.schedule, plan.pp, m1, plan.virtual_stages)
    extra = (plan.num_microbatches - m1) // layout.microbatches
    short = _short_step(setup, timer, costs, m1, layout)
    if short.blocks is None or short.done is None:
        return None
    run = _expand(setup, short.graph, short.blocks, short.done, extra, costs, timer)
    if run is None:
        return None
    if short.free is None:  # one stage: the run is its own ideal pipeline
        return run, run
    ideal = _expand(setup, short.graph, short.blocks, short.free, extra, costs, timer)
    return (run, ideal) if ideal is not None else None


@dataclass
class _Short:
    """A short step run (see :func:`_short_step`): its graph, blocks and times (None: not
    folded), and those of its ideal pipeline (None with one stage); ``costs`` are the pass
    costs it was built with."""

    costs: dict[tuple[int, str], PassCost]
    graph: StepGraph
    blocks: _Blocks | None = None
    done: _Timed | None = None
    free: _Timed | None = None


#: Short steps run, kept across steps that differ only in their number of micro-batches:
#: a search over the global batch asks for the same short step with another repeat count.
_SHORT: Kept[list[_Short]] = Kept(limit=64)


def _short_key(setup: StepSetup, m1: int) -> Hashable:
    """What the short step of ``m1`` micro-batches depends on besides the pass costs and
    the objects held by identity (topology, profile, compute parameters, timer): the
    scenario and plan with the global batch of ``m1`` micro-batches, so that steps of
    other lengths share it (nothing in the graph reads the global batch but through the
    micro-batch count, which the short step sets)."""
    plan = setup.plan
    batch = m1 * plan.micro_batch * plan.dp
    sc = setup.scenario
    short_sc = replace(sc, training=replace(sc.training, global_batch=batch))
    return (short_sc, replace(plan, global_batch=batch), setup.network, setup.stages,
            setup.stage_gpus, setup.stage_compute, m1)  # fmt: skip


def _short_step(
    setup: StepSetup,
    timer: CollectiveTimer,
    costs: dict[tuple[int, str], PassCost],
    m1: int,
    layout: SteadyLayout,
) -> _Short:
    """The short step of ``m1`` micro-batches run on ``timer``, and its ideal pipeline:
    kept (the last :data:`_SHORT` ``limit`` keys) and reused when asked again with equal
    pass costs (they depend on the micro-batch count where gradient accumulation is not
    fused, so those steps miss)."""
    held = (setup.topology, setup.profile, setup.compute, timer)
    kept = _SHORT.get(_short_key(setup, m1), held, list)  # unhashable: a list not kept
    for short in kept:
        if short.costs is costs or short.costs == costs:
            return short
    short = _run_short(setup, timer, costs, m1, layout)
    kept[:] = [short]
    return short


def _run_short(
    setup: StepSetup,
    timer: CollectiveTimer,
    costs: dict[tuple[int, str], PassCost],
    m1: int,
    layout: SteadyLayout,
) -> _Short:
    """The work of :func:`_short_step`."""
    graph = build_step_graph(setup, timer, costs, microbatches=m1)
    short = _Short(costs, graph)
    if any(graph.fill):
        return short
    blocks = _blocks(graph, layout)
    preds = graph.predecessors()
    first = next((j for j in range(blocks.count - 1) if _regular(graph, preds, blocks, j)), None)
    if first is None:
        return short
    short.blocks = blocks
    short.done = _timed(blocks, first, graph, execute(graph, timer, setup.network))
    if setup.plan.pp > 1:
        free = execute(graph, timer, setup.network, skip=ideal_skip(graph))
        short.free = _timed(blocks, first, graph, free)
    return short
