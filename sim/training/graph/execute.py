"""Run a step's task graph on a network backend and read the stages' timelines from it.

:func:`run_graph` builds the graph of a resolved step (:mod:`sim.training.graph.build`),
then runs it with the executor its backend calls for: list scheduling where every
duration is known when a task starts (a ``closed_form`` backend, the analytical network:
:mod:`sim.training.graph.listsched`), SimPy on the simulated network otherwise
(:mod:`sim.training.graph.simulate`). Both executors take the same graph and return the
same thing: when every task started and ended. :func:`stage_timelines` turns that into
what the result reports per pipeline stage (passes, exposed communication, when compute,
the gradient reduction and the step end).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sim.network import backend
from sim.training.compute.passes import CollectiveTimer, PassCost
from sim.training.graph.build import AHEAD_LABEL, build_step_graph
from sim.training.graph.costs import chunk_costs
from sim.training.graph.listsched import list_schedule
from sim.training.graph.task import COMPUTE, StepGraph
from sim.training.graph.timelines import PassRecord, StageTimeline
from sim.training.setup import StepSetup

if TYPE_CHECKING:  # SimPy's executor and backends are imported when a network is simulated
    from sim.network.base import Network
    from sim.training.graph.simulate import Progress

__all__ = [
    "OPTIMIZER_LABELS",
    "TAIL_LABELS",
    "Execution",
    "PassSpan",
    "StepRun",
    "execute",
    "ideal_run",
    "ideal_skip",
    "pass_spans",
    "run_graph",
    "stage_timelines",
]

#: Tasks of the optimizer step (on the GPU, or offloaded: copies, CPU step, NVMe).
OPTIMIZER_LABELS = frozenset({"optimizer", "offload_down", "cpu_optimizer", "offload_up", "nvme"})
#: Tasks on a stage's data-parallel stream after its gradient reduction.
TAIL_LABELS = frozenset({"tied_all_reduce", "param_all_gather"})


@dataclass
class Execution:
    """When every task of a graph started and ended (seconds), and the network it ran on
    (None for the closed-form executor, which needs none)."""

    start: list[float]
    end: list[float]
    network: Network | None

    @property
    def time_s(self) -> float:
        """When the last task ended: the simulated time of the whole graph."""
        return max(self.end, default=0.0)


def execute(
    graph: StepGraph,
    timer: CollectiveTimer,
    network: str,
    *,
    record: bool = False,
    progress: Progress | None = None,
    skip: Sequence[bool] | None = None,
) -> Execution:
    """Run ``graph`` with the executor the ``network`` backend calls for (see the module
    docstring); ``record`` and ``progress`` concern a simulated network only; tasks marked
    in ``skip`` take no time.

    Parameters
    ----------
    graph : StepGraph
        The tasks (a training step's, or an imported trace's).
    timer : CollectiveTimer
        Plans and times the collectives on the topology they run on.
    network : str
        A backend of :data:`sim.network.BACKENDS`.
    record : bool
        Keep the simulated network's per-link records.
    progress : callable, optional
        Called now and then during a simulated run.
    skip : sequence of bool, optional
        Tasks that take no time (:func:`ideal_skip`: the ideal pipeline).
    """
    if backend(network).closed_form:
        start, end = list_schedule(graph, timer, skip)
        return Execution(start, end, None)
    from sim.training.graph.simulate import simulate_graph

    start, end, net = simulate_graph(graph, timer, network, record=record, progress=progress,
                                     skip=skip)  # fmt: skip
    return Execution(start, end, net)


def ideal_skip(graph: StepGraph) -> list[bool]:
    """The tasks that are not part of a pass (pipeline sends, gradient reduction, optimizer,
    the tail): with them free, the graph runs the ideal pipeline, whose idle time is the
    schedule's bubble."""
    return [p < 0 for p in graph.pass_of]


@dataclass
class StepRun:
    """One executed step graph: the graph, every task's (start, end) in seconds, the
    network it ran on (None for the closed-form executor), the stages' timelines and the
    pass costs.

    ``weight``: how many times each task of ``graph`` runs in the step (None: once). A
    folded step (:mod:`sim.training.graph.fold`) runs a short graph whose last steady
    block stands for many: its tasks, pass records and communication spans are the short
    graph's (the repeated block at its last repetition, counted ``weight`` times; the
    lines' ``repeats``), so traces and exports take the whole graph instead."""

    graph: StepGraph
    start: list[float]
    end: list[float]
    network: Network | None
    lines: list[StageTimeline]
    costs: dict[tuple[int, str], PassCost]
    timer: CollectiveTimer
    weight: list[int] | None = None


def run_graph(
    setup: StepSetup,
    timer: CollectiveTimer,
    *,
    record: bool = False,
    progress: Progress | None = None,
    costs: dict[tuple[int, str], PassCost] | None = None,
) -> StepRun:
    """Build and run the step graph of ``setup`` on its network backend.

    Parameters
    ----------
    setup : StepSetup
        The resolved scenario (its ``network`` names the backend).
    timer : CollectiveTimer
        Times and plans the collectives.
    record : bool
        Keep the simulated network's per-link records (trace counters, peak utilisation).
    progress : callable, optional
        Called now and then during a simulated run (see :mod:`.simulate`).
    costs : dict, optional
        The pass costs, when the caller has them already.
    """
    costs = costs if costs is not None else chunk_costs(setup, timer)
    graph = build_step_graph(setup, timer, costs)
    done = execute(graph, timer, setup.network, record=record, progress=progress)
    lines = stage_timelines(graph, done.start, done.end, costs, setup.plan.pp)
    return StepRun(graph, done.start, done.end, done.network, lines, costs, timer)


def ideal_run(setup: StepSetup, run: StepRun) -> StepRun:
    """``run``'s graph with every task outside the passes free (:func:`ideal_skip`): the
    ideal pipeline, on the same network backend."""
    done = execute(run.graph, run.timer, setup.network, skip=ideal_skip(run.graph))
    lines = stage_timelines(run.graph, done.start, done.end, run.costs, setup.plan.pp)
    return StepRun(run.graph, done.start, done.end, done.network, lines, run.costs, run.timer)


#: One pass as a stage's timeline counts it: its record, virtual stage (the key of its
#: cost with the record's kind) and whether its gathers ran ahead of it.
PassSpan = tuple[PassRecord, int, bool]


def pass_spans(graph: StepGraph, start: list[float], end: list[float]) -> list[PassSpan]:
    """Every pass of ``graph`` in pass order: from its first task's start to its last
    compute task's end (a pass whose gathers ran ahead counts from when its first compute
    could have started but for them)."""
    first = [float("inf")] * len(graph.passes)
    last = [0.0] * len(graph.passes)
    ahead: dict[int, int] = {}  # pass -> its first compute task, where gathers ran ahead
    label, kind = graph.label, graph.kind
    # (comparisons, not min/max calls: tens of thousands of tasks per step; same values)
    for i, pid in enumerate(graph.pass_of):
        if pid < 0:
            continue
        if label[i] == AHEAD_LABEL:
            ahead.setdefault(pid, -1)
            continue
        if start[i] < first[pid]:
            first[pid] = start[i]
        if kind[i] == COMPUTE:
            if end[i] > last[pid]:
                last[pid] = end[i]
            if ahead and ahead.get(pid, 0) == -1:
                ahead[pid] = i
    for pid, task in ahead.items():
        first[pid] = min(first[pid], _ready_without_gathers(graph, task, end))
    return [
        (PassRecord(info.stage, info.kind, info.mb, info.chunk, first[pid], last[pid]),
         info.vstage, pid in ahead)
        for pid, info in enumerate(graph.passes)
    ]  # fmt: skip


def stage_timelines(
    graph: StepGraph,
    start: list[float],
    end: list[float],
    costs: dict[tuple[int, str], PassCost],
    stages: int,
    spans: Sequence[PassSpan] | None = None,
    times: Sequence[int] | None = None,
) -> list[StageTimeline]:
    """Per pipeline stage: its passes (from the first to the last task of each), the
    compute of their costs, what parameter gathers left exposed, when compute ended, when
    the gradient reduction ended, the optimizer's exposed seconds and the rest of the tail
    (tied-embedding sync, parameter all-gathers), and the stage's end. ``spans``: the
    passes, when not ``graph``'s own (:func:`pass_spans`); ``times``: how many identical
    passes each stands for (a folded step's, see :mod:`sim.training.graph.fold`)."""
    lines = [StageTimeline() for _ in range(stages)]
    spans = spans if spans is not None else pass_spans(graph, start, end)
    times = times if times is not None else [1] * len(spans)
    for (rec, vstage, ahead), n in zip(spans, times, strict=True):
        lines[rec.stage].add_pass(costs[(vstage, rec.kind)], rec, ahead, n)
    for line in lines:
        line.compute_end_s = max((r.end_s for r in line.passes), default=0.0)
    ends = [line.compute_end_s for line in lines]
    dp_end = list(ends)
    opt_tasks = []
    label = graph.label
    for i, s in enumerate(graph.stage):
        if s < 0:
            continue
        name = label[i]
        if name == "pass":
            continue
        if name != "pp_send" and end[i] > ends[s]:  # a stage's outgoing sends end on
            ends[s] = end[i]  # the stage they feed
        if name in OPTIMIZER_LABELS:
            opt_tasks.append(i)
        else:
            lines[s].comm.append((name, start[i], end[i]))
        if name.startswith("dp_") and end[i] > dp_end[s]:
            dp_end[s] = end[i]
    optimizer = [0.0] * stages
    for i in opt_tasks:  # in task order, as every task was before
        s = graph.stage[i]
        optimizer[s] += max(0.0, end[i] - max(start[i], dp_end[s]))
    for s, line in enumerate(lines):
        line.dp_end_s = dp_end[s]
        line.end_s = ends[s]
        tail = line.end_s - line.dp_end_s
        line.optimizer_s = min(tail, optimizer[s])
        line.param_gather_s = tail - line.optimizer_s
    return lines


def _ready_without_gathers(graph: StepGraph, task: int, end: list[float]) -> float:
    """When ``task`` (a pass's first compute) could have started but for the parameter
    gathers run ahead of it: its other inputs and the compute before it on its stream.
    The pass counts from there, so a gather it waited for shows as exposed."""
    ready = max((end[d] for d in graph.deps[task] if graph.label[d] != AHEAD_LABEL), default=0.0)
    order = graph.stream_order[graph.stream_of[task]]
    k = order.index(task)
    return max(ready, end[order[k - 1]]) if k > 0 else ready
