"""Search the parallel layouts of a job: which fit, which is fastest, why others fail.

The search (:func:`plan`) runs the simulator as a user would, a scenario per layout on
the analytical network, and prunes three ways before simulating:

1. layouts that do not divide evenly are never built (:mod:`.space`, counted by reason);
2. layouts are taken in order of a lower bound on their step time (:mod:`.bounds`), and
   the search stops when the next bound exceeds the K-th best time found;
3. memory is checked before simulating (:mod:`.memory`): each layout gets the least
   recompute that fits, and layouts that fit with none are rejected with their overflow
   (so the rejected layouts listed are the most promising ones: those reached before the cut).

The finalists are then run with each overlap switch off too (the search assumes overlap
never slows a step; the finalists check it). Ties break on cost per step, then on the
layout's fields, so the ranking is deterministic.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sim.errors import ClusterSimError, ConfigError
from sim.studies.plan.bounds import ShapeTimes, lower_bound_s, shape_of
from sim.studies.plan.memory import estimate_memory, least_memory
from sim.studies.plan.space import RECOMPUTE_ORDER, Layout, Skipped, layouts
from sim.training.result import StepResult
from sim.training.scenario import ClusterSection, Scenario
from sim.training.workload.models import ModelSpec

__all__ = ["Candidate", "PlanResult", "Rejected", "merge", "plan"]

FINALISTS = 3


@dataclass(frozen=True)
class Candidate:
    """A simulated layout and its step."""

    layout: Layout
    result: StepResult

    def record(self) -> dict[str, Any]:
        """``run --json``'s fields plus ``parallel`` (the settings) and ``layout`` (a label)."""
        return {
            "parallel": self.layout.settings(),
            "layout": self.layout.label(),
            **self.result.to_dict(),
        }


@dataclass(frozen=True)
class Rejected:
    """A layout that cannot run: why, and by how much memory where that is the reason."""

    layout: Layout
    reason: str
    memory_bytes: float | None = None
    hbm_bytes: float | None = None
    bound_s: float = math.inf


@dataclass
class PlanResult:
    """What a search found.

    Attributes
    ----------
    ranked : list of Candidate
        Fitting layouts, fastest first (at most ``top``).
    rejected : list of Rejected
        Layouts that do not fit or do not run, most promising first (lowest bound).
    skipped : Skipped
        Layouts never built for not dividing, counted by reason.
    gpus : int
        GPUs planned for.
    layouts, simulated, pruned : int
        Layouts considered, steps simulated (probes included), layouts cut by the bound.
    seconds : float
        Wall time of the search.
    notes : list of str
        What the search assumed or could not express.
    """

    ranked: list[Candidate]
    rejected: list[Rejected]
    skipped: Skipped
    gpus: int
    layouts: int = 0
    simulated: int = 0
    pruned: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def _with(scenario: Scenario, layout: Layout, cluster: ClusterSection) -> Scenario:
    par = dataclasses.replace(scenario.parallel, **layout.settings())
    return dataclasses.replace(scenario, parallel=par, cluster=cluster)


def _rank_key(c: Candidate) -> tuple[float, float, Layout]:
    return (c.result.step_time_s, c.result.cost_per_step_usd or 0.0, c.layout)


class _Search:
    def __init__(self, scenario: Scenario, cluster: ClusterSection, topo: Any, top: int) -> None:
        if not isinstance(scenario.model, ModelSpec):
            raise ConfigError("plan: layouts are searched for transformer models only")
        self.scenario, self.cluster, self.top = scenario, cluster, top
        self.gpus, self.per_node = int(topo.num_gpus), int(topo.gpus_per_node)
        self.hbm = float(topo.gpu.hbm_bytes)
        multi = topo.nodes > 1 or cluster.nodes is not None
        self.shapes = ShapeTimes(scenario, cluster.topology, self.per_node, multi)
        self.rejected: list[Rejected] = []
        self.simulated = 0

    def fit(self, layout: Layout) -> tuple[Layout, float] | None:
        """The layout with the least recompute that fits, and its bound; None if none fits."""
        small = dataclasses.replace(layout, recompute=RECOMPUTE_ORDER[-1])
        try:
            least = least_memory(
                _with(self.scenario, small, self.cluster), self.gpus, self.per_node, self.hbm
            )
        except ClusterSimError:
            least = None  # the full estimate below reports the reason
        if least is not None and not least.fits:
            gib = 2**30
            reason = (
                f"out of memory by at least {least.over_bytes / gib:.1f} GiB even with full "
                f"recompute and one micro-batch in flight ({least.total_bytes / gib:.1f} of "
                f"{least.hbm_bytes / gib:.1f} GiB)"
            )
            free = dataclasses.replace(layout, recompute="none")
            self.rejected.append(
                Rejected(small, reason, least.total_bytes, least.hbm_bytes, self.bound(free))
            )
            return None
        last = None
        for rc in RECOMPUTE_ORDER:
            lay = dataclasses.replace(layout, recompute=rc)
            try:
                mem = estimate_memory(
                    _with(self.scenario, lay, self.cluster), self.gpus, self.per_node, self.hbm
                )
            except ClusterSimError as e:
                self.rejected.append(Rejected(lay, str(e), bound_s=self.bound(lay)))
                return None
            if mem.fits:
                return lay, self.bound(lay)
            last = (lay, mem)
        assert last is not None
        lay, mem = last
        free = dataclasses.replace(layout, recompute="none")
        gib = 2**30
        reason = (
            f"out of memory by {mem.over_bytes / gib:.1f} GiB even with full recompute "
            f"({mem.total_bytes / gib:.1f} of {mem.hbm_bytes / gib:.1f} GiB)"
        )
        self.rejected.append(
            Rejected(lay, reason, mem.total_bytes, mem.hbm_bytes, self.bound(free))
        )
        return None

    def bound(self, layout: Layout) -> float:
        t = self.shapes.seconds(shape_of(layout))
        return lower_bound_s(layout, self.scenario.training.global_batch, t)

    def simulate(self, layout: Layout) -> Candidate | None:
        from sim.training.step import simulate_step

        self.simulated += 1
        try:
            r = simulate_step(_with(self.scenario, layout, self.cluster), "analytical")
        except ClusterSimError as e:
            self.rejected.append(Rejected(layout, str(e), bound_s=self.bound(layout)))
            return None
        if not r.fits:
            gib = 2**30
            self.rejected.append(
                Rejected(
                    layout,
                    f"out of memory: the simulated step needs {r.memory_per_gpu_bytes / gib:.1f} GiB",
                    r.memory_per_gpu_bytes,
                    self.hbm,
                    r.step_time_s,
                )
            )
            return None
        return Candidate(layout, r)

    def run(self, candidates: Sequence[Layout]) -> tuple[list[Candidate], int]:
        """Go through the layouts in bound order: check memory, simulate, stop at the cut.

        The bound of a layout without recompute is below that of any recompute, so the
        order is sound; memory is checked only for layouts reached before the cut.
        """
        found: list[Candidate] = []
        pruned = 0
        order = sorted(((self.bound(lay), lay) for lay in candidates), key=lambda x: (x[0], x[1]))

        def cut(bound: float) -> bool:
            return len(found) >= self.top and bound > found[self.top - 1].result.step_time_s

        for i, (lb, lay) in enumerate(order):
            if cut(lb):
                pruned += len(order) - i
                break
            fitted = self.fit(lay)
            if fitted is None:
                continue
            if cut(fitted[1]):
                pruned += 1
                continue
            c = self.simulate(fitted[0])
            if c is not None:
                found.append(c)
                found.sort(key=_rank_key)
        return found, pruned

    def refine(self, found: list[Candidate]) -> list[Candidate]:
        """Try each overlap switch off on the finalists; keep whichever is faster."""
        out = list(found)
        for c in found[:FINALISTS]:
            lay = c.layout
            alts = [dataclasses.replace(lay, overlap_tp=False)] if lay.tp > 1 else []
            alts += [dataclasses.replace(lay, overlap_dp=False)] if lay.dp * lay.cp > 1 else []
            for alt in alts:
                cand = self.simulate(alt)
                if cand is not None:
                    out.append(cand)
        return sorted(out, key=_rank_key)


#: Share of the layouts a search simulates (measured: GPT-3 175B on 8,192 GPUs, 260
#: layouts, 63 steps simulated with the probes; the bound cuts the rest).
SIMULATED_SHARE = 0.3


def _guard(scenario: Scenario, gpus: int | None, top: int, cps: Sequence[int]) -> None:
    """Refuse a search whose steps would exceed the time or memory limits
    (:mod:`sim.budget`): the layouts are counted first (nothing built or simulated), and a
    share of them, plus the ranked ones and the finalists' checks, are costed."""
    from sim.budget import check_estimate, cluster_shape, estimate_plan
    from sim.topology.presets import load_spec

    topology, nodes = scenario.cluster.topology, scenario.cluster.nodes
    spec = load_spec(topology)
    per_node = spec.gpus_per_node
    if gpus is not None and gpus >= per_node and gpus % per_node == 0 and spec.multi_node:
        nodes = gpus // per_node
    total = gpus if gpus is not None and gpus < per_node else cluster_shape(topology, nodes)[0]
    model = scenario.model
    assert isinstance(model, ModelSpec)
    found, _ = layouts(model, total, min(per_node, total), scenario.training.global_batch,
                       sorted(set(cps)), scenario.training.seq_len)  # fmt: skip
    steps = min(len(found), top + FINALISTS + math.ceil(SIMULATED_SHARE * len(found)))
    check_estimate(estimate_plan(topology, nodes, max(1, steps)))


def plan(
    scenario: Scenario, gpus: int | None = None, top: int = 10, cps: Sequence[int] = (1,)
) -> PlanResult:
    """Search the layouts of ``scenario``'s job on its cluster (or on ``gpus`` GPUs).

    Parameters
    ----------
    scenario : Scenario
        The job: model, cluster, training settings; its ``parallel`` section is replaced.
    gpus : int, optional
        Plan for this many GPUs of the scenario's topology: a whole number of servers
        (``cluster.nodes`` is set) or, on one server, its first ``gpus`` GPUs.
    top : int
        How many fitting layouts to rank.
    cps : sequence of int
        Context-parallel sizes to search (default ``(1,)``: no context parallelism, and
        the search costs what it did before CP existed).

    Returns
    -------
    PlanResult
        The ranking, the rejected layouts and the search's counts.

    Examples
    --------
    >>> from sim import load_scenario
    >>> r = plan(load_scenario("gpt2-1gpu"), top=2)
    >>> r.ranked[0].layout.tp, r.ranked[0].result.fits
    (1, True)
    """
    from sim.studies.plan.cluster import cluster_for

    if top < 1:
        raise ConfigError(f"--top {top}: expected an integer >= 1")
    if not cps or any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in cps):
        raise ConfigError(f"--cp {','.join(map(str, cps))}: expected integers >= 1, e.g. 1,2,4")
    _guard(scenario, gpus, top, cps)
    start = time.perf_counter()
    with cluster_for(scenario, gpus) as (cluster, topo, notes):
        search = _Search(scenario, cluster, topo, top)
        model = scenario.model
        assert isinstance(model, ModelSpec)
        found_layouts, skipped = layouts(
            model, search.gpus, search.per_node, scenario.training.global_batch,
            sorted(set(cps)), scenario.training.seq_len,
        )  # fmt: skip
        found, pruned = search.run(found_layouts)
        ranked = search.refine(found)[:top]
    rejected = sorted(search.rejected, key=lambda r: (r.bound_s, r.layout))
    notes.append(
        "GPipe is not searched (1F1B has its bubble and holds fewer activations); TP stays "
        "inside a server; steps are simulated on the analytical network."
    )
    return PlanResult(
        ranked=ranked,
        rejected=rejected,
        skipped=skipped,
        gpus=search.gpus,
        layouts=len(found_layouts),
        simulated=search.simulated + search.shapes.simulated,
        pruned=pruned,
        seconds=time.perf_counter() - start,
        notes=notes,
    )


def merge(results: Sequence[PlanResult], top: int) -> PlanResult:
    """One result from searches of several GPU counts: the fastest ``top`` over all.

    >>> merge([PlanResult([], [], Skipped(Counter()), 8, layouts=3)], 5).layouts
    3
    """
    if len(results) == 1:
        return results[0]
    skipped = Skipped(Counter())
    for r in results:
        skipped.counts.update(r.skipped.counts)
    notes: list[str] = []
    for r in results:
        notes += [n for n in r.notes if n not in notes]
    return PlanResult(
        ranked=sorted((c for r in results for c in r.ranked), key=_rank_key)[:top],
        rejected=sorted(
            (x for r in results for x in r.rejected), key=lambda x: (x.bound_s, x.layout)
        ),
        skipped=skipped,
        gpus=max(r.gpus for r in results),
        layouts=sum(r.layouts for r in results),
        simulated=sum(r.simulated for r in results),
        pruned=sum(r.pruned for r in results),
        seconds=sum(r.seconds for r in results),
        notes=notes,
    )
