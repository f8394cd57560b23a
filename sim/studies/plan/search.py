"""Search the parallel layouts of a job: which fit, which is fastest, why others fail.

The search (:func:`plan`) runs the simulator as a user would, a scenario per layout on
the analytical network, and prunes three ways before simulating:

1. layouts that do not divide evenly are never built (:mod:`.space`, counted by reason);
2. layouts are taken in order of a lower bound on their step time (:mod:`.bounds`), and
   the search stops when the next bound exceeds the K-th best time found;
3. memory is checked before simulating (:mod:`.memory`): each layout gets the least
   recompute that fits, and layouts that fit with none are rejected with their overflow
   (so the rejected layouts listed are the most promising ones: those reached before the cut);
4. a layout that fits waits in a queue, by bound: the search takes the layout of least
   bound once no unchecked layout can have a lower one, and tightens its bound from its
   own pass costs (:func:`.bounds.step_bounds`, cheapest first) until none is left to
   try; only then is it simulated. Where the least bound exceeds the K-th best time,
   the rest is cut.

Every cut is by a lower bound, so the ranking is the one simulating every layout gives.

The finalists are then run with each overlap switch off too (the search assumes overlap
never slows a step; the finalists check it). Ties break on cost per step, then on the
layout's fields, so the ranking is deterministic.

Every layout is searched under each training *recipe* asked for (fine-tuning, optimizer,
offload: :mod:`.recipes`; default the scenario's own), and :attr:`PlanResult.recipes`
says, per recipe, its best fitting configuration or why none fits.
"""

from __future__ import annotations

import dataclasses
import gc
import heapq
import math
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sim.errors import ClusterSimError, ConfigError
from sim.result import StepResult
from sim.scenario.load import ClusterSection, Scenario
from sim.studies.plan.bounds import ShapeTimes, lower_bound_s, shape_of, step_bounds
from sim.studies.plan.memory import MemoryEstimate, estimate_memory, least_memory
from sim.studies.plan.recipes import FULL, Recipe, own_recipe
from sim.studies.plan.space import RECOMPUTE_ORDER, Layout, Skipped, layouts
from sim.training.memory.report import capacity_bytes
from sim.workload.models import ModelSpec

__all__ = ["Candidate", "PlanResult", "RecipeOutcome", "Rejected", "merge", "plan"]

FINALISTS = 3


@dataclass(frozen=True)
class Candidate:
    """A simulated layout, the training recipe it ran with, and its step."""

    layout: Layout
    result: StepResult
    recipe: Recipe = FULL

    def label(self, with_recipe: bool = False) -> str:
        """The layout's label, with the recipe's first when several were searched."""
        return (
            f"{self.recipe.label()}: {self.layout.label()}" if with_recipe else self.layout.label()
        )

    def record(self) -> dict[str, Any]:
        """``run --json``'s fields plus ``parallel`` and ``training`` (the settings) and
        ``layout`` (a label)."""
        return {
            "parallel": self.layout.settings(),
            "training": self.recipe.settings(),
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
    recipe: Recipe = FULL


@dataclass(frozen=True)
class RecipeOutcome:
    """What one training recipe gave: its best fitting candidate, or why none fits.

    Attributes
    ----------
    recipe : Recipe
        Fine-tuning, optimizer and offload.
    best : Candidate or None
        Its fastest fitting configuration (cheapest on ties).
    reason : str or None
        Why no layout fits under it (the rejected layout that came closest in memory).
    """

    recipe: Recipe
    best: Candidate | None
    reason: str | None = None


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
    capacity_bytes : float
        Memory a GPU offers the step, as the fits were judged (bytes; 0.0 when unknown).
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
    recipes: list[RecipeOutcome] = field(default_factory=list)
    capacity_bytes: float = 0.0

    @property
    def cheapest(self) -> Candidate | None:
        """The fitting candidate with the lowest cost per step (GPU-seconds without a price)."""
        return min(self.ranked, key=_cost_key, default=None)


def _cost_key(c: Candidate) -> tuple[float, float, Layout, Recipe]:
    r = c.result
    cost = r.cost_per_step_usd if r.cost_per_step_usd is not None else r.gpus * r.step_time_s
    return (cost, r.step_time_s, c.layout, c.recipe)


def _with(scenario: Scenario, layout: Layout, cluster: ClusterSection) -> Scenario:
    par = dataclasses.replace(scenario.parallel, **layout.settings())
    return dataclasses.replace(scenario, parallel=par, cluster=cluster)


def _rank_key(c: Candidate) -> tuple[float, float, Layout, Recipe]:
    return (c.result.step_time_s, c.result.cost_per_step_usd or 0.0, c.layout, c.recipe)


class _Search:
    def __init__(self, scenario: Scenario, cluster: ClusterSection, topo: Any, top: int) -> None:
        if not isinstance(scenario.model, ModelSpec):
            raise ConfigError("plan: layouts are searched for transformer models only")
        self.scenario, self.cluster, self.top = scenario, cluster, top
        self.gpus, self.per_node = int(topo.num_gpus), int(topo.gpus_per_node)
        self.models = tuple(topo.gpu_models or (topo.gpu,))
        self.hbm = capacity_bytes(scenario, self.models)
        self.shapes = ShapeTimes(scenario, cluster, self.gpus)
        self.rejected: list[Rejected] = []
        self.simulated = 0
        # least_memory reads no schedule and no interleaving: layouts differing only
        # there (1F1B and its interleaved versions) share one answer (or error)
        self._least: dict[Layout, MemoryEstimate | ClusterSimError] = {}

    def least(self, layout: Layout) -> MemoryEstimate:
        """:func:`least_memory` of ``layout``, once per layout less its schedule."""
        key = dataclasses.replace(layout, schedule="1f1b", virtual_stages=1)
        got = self._least.get(key)
        if got is None:
            try:
                got = least_memory(
                    _with(self.scenario, key, self.cluster), self.gpus, self.per_node, self.models
                )
            except ClusterSimError as e:
                got = e
            self._least[key] = got
        if isinstance(got, ClusterSimError):
            raise got
        return got

    def fit(self, layout: Layout) -> tuple[Layout, float] | None:
        """The layout with the least recompute that fits, and its bound; None if none fits."""
        small = dataclasses.replace(layout, recompute=RECOMPUTE_ORDER[-1])
        try:
            least: MemoryEstimate | None = self.least(small)
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
                    _with(self.scenario, lay, self.cluster), self.gpus, self.per_node, self.models
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

    def tighter(self, layout: Layout) -> Iterator[float]:
        """The layout's :func:`step_bounds`, tightest last."""
        return step_bounds(_with(self.scenario, layout, self.cluster))

    def run(self, candidates: Sequence[Layout]) -> tuple[list[Candidate], int]:
        """Go through the layouts in bound order: check memory, queue, tighten, simulate,
        stop at the cut.

        The probe bound of a layout without recompute is below that of any recompute, and
        a tightened bound is at least the probe bound, so once the least bound waiting
        (checked, or not yet) exceeds the K-th best time, every layout left does.
        """
        found: list[Candidate] = []
        order = sorted(((self.bound(lay), lay) for lay in candidates), key=lambda x: (x[0], x[1]))
        waiting: list[tuple[float, Layout, Iterator[float]]] = []  # fitted, by bound so far
        pruned = 0

        def cut(bound: float) -> bool:
            return len(found) >= self.top and bound > found[self.top - 1].result.step_time_s

        i = 0
        while i < len(order) or waiting:
            if waiting and (i == len(order) or waiting[0][:2] <= order[i]):
                bound, lay, tighter = heapq.heappop(waiting)
                if cut(bound):
                    pruned += 1 + len(waiting) + len(order) - i
                    break
                nxt = next(tighter, None)
                if nxt is not None:
                    heapq.heappush(waiting, (max(bound, nxt), lay, tighter))
                    continue
                c = self.simulate(lay)
                if c is not None:
                    found.append(c)
                    found.sort(key=_rank_key)
                continue
            lb, lay = order[i]
            if cut(lb):
                pruned += len(order) - i + len(waiting)
                break
            i += 1
            fitted = self.fit(lay)
            if fitted is None:
                continue
            if cut(fitted[1]):
                pruned += 1
                continue
            try:  # a layout that does not resolve is rejected now, as its simulation would be
                tighter = self.tighter(fitted[0])
            except ClusterSimError as e:
                self.rejected.append(Rejected(fitted[0], str(e), bound_s=fitted[1]))
                continue
            heapq.heappush(waiting, (fitted[1], fitted[0], tighter))
        return found, pruned

    def refine(self, found: list[Candidate]) -> list[Candidate]:
        """Try each overlap switch off on the finalists; keep whichever is faster."""
        out = list(found)
        for c in found[:FINALISTS]:
            lay = c.layout
            alts = [dataclasses.replace(lay, overlap_tp=False)] if lay.tp > 1 else []
            alts += [dataclasses.replace(lay, overlap_dp=False)] if lay.dp * lay.cp > 1 else []
            for alt in alts:
                if len(out) >= self.top:  # an alternative bound above the K-th cannot rank
                    kth = sorted(out, key=_rank_key)[self.top - 1].result.step_time_s
                    try:
                        if max([self.bound(alt), *self.tighter(alt)]) > kth:
                            continue
                    except ClusterSimError:
                        pass  # simulated: it says why
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
    scenario: Scenario,
    gpus: int | None = None,
    top: int = 10,
    cps: Sequence[int] = (1,),
    recipes: Sequence[Recipe] | None = None,
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
    recipes : sequence of Recipe, optional
        Training recipes (fine-tuning, optimizer, offload) to search every layout under
        (:mod:`sim.studies.plan.recipes`); default the scenario's own.

    Returns
    -------
    PlanResult
        The ranking, the rejected layouts, the search's counts, and per recipe its best
        configuration or why none fits.

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
    if not isinstance(scenario.model, ModelSpec):
        raise ConfigError("plan: layouts are searched for transformer models only")
    _guard(scenario, gpus, top, cps)
    start = time.perf_counter()
    with _older_objects_frozen(), cluster_for(scenario, gpus) as (cluster, topo, notes):
        parts = [_plan_recipe(scenario, r, cluster, topo, top, cps)
                 for r in (recipes or [own_recipe(scenario)])]  # fmt: skip
    notes.append(
        "GPipe is not searched (1F1B has its bubble and holds fewer activations); TP stays "
        "inside a server; steps are simulated on the analytical network."
    )
    if any(r.finetune != "full" for r in (recipes or ())):
        notes.append("LoRA and QLoRA train adapters on a frozen base model, not every weight.")
    result = merge([dataclasses.replace(p, notes=notes) for p in parts], top)
    result.seconds = time.perf_counter() - start
    return result


@contextmanager
def _older_objects_frozen() -> Iterator[None]:
    """Keep the objects that exist before the search (modules, scenario, catalogs) out of
    the garbage collector's full passes while it runs (``gc.freeze``), and hand them back
    after. A search allocates steadily (graphs, memos), so Python runs full collections
    that rescan every live object: 10-17% of a search's time before. Nothing is kept
    longer: frozen objects are still freed when unreferenced. Where the caller froze
    objects itself, the collector is left as it is."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _plan_recipe(
    scenario: Scenario, recipe: Recipe, cluster: ClusterSection, topo: Any, top: int,
    cps: Sequence[int],
) -> PlanResult:  # fmt: skip
    """The search of one training recipe (layouts, memory, bound, simulation)."""
    sc = recipe.applied(scenario)
    search = _Search(sc, cluster, topo, top)
    model = sc.model
    assert isinstance(model, ModelSpec)
    found_layouts, skipped = layouts(
        model, search.gpus, search.per_node, sc.training.global_batch,
        sorted(set(cps)), sc.training.seq_len,
    )  # fmt: skip
    found, pruned = search.run(found_layouts)
    ranked = [dataclasses.replace(c, recipe=recipe) for c in search.refine(found)[:top]]
    rejected = sorted((dataclasses.replace(r, recipe=recipe) for r in search.rejected),
                      key=lambda r: (r.bound_s, r.layout))  # fmt: skip
    return PlanResult(
        ranked=ranked,
        rejected=rejected,
        skipped=skipped,
        gpus=search.gpus,
        capacity_bytes=search.hbm,
        layouts=len(found_layouts),
        simulated=search.simulated + search.shapes.simulated,
        pruned=pruned,
        recipes=[_outcome(recipe, ranked, rejected)],
    )


def _outcome(recipe: Recipe, ranked: list[Candidate], rejected: list[Rejected]) -> RecipeOutcome:
    """The recipe's best candidate, or the reason of the rejected layout closest to fitting."""
    if ranked:
        return RecipeOutcome(recipe, ranked[0])
    closest = min(rejected, key=lambda r: (r.memory_bytes is None, r.memory_bytes or 0.0),
                  default=None)  # fmt: skip
    reason = f"{closest.layout.label()}: {closest.reason}" if closest else "no layout divides"
    return RecipeOutcome(recipe, None, reason)


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
        recipes=_merged_outcomes(results),
        capacity_bytes=min(r.capacity_bytes for r in results),
    )


def _merged_outcomes(results: Sequence[PlanResult]) -> list[RecipeOutcome]:
    """Per recipe (first-seen order), the cheapest best over the GPU counts searched."""
    by: dict[Recipe, list[RecipeOutcome]] = {}
    for r in results:
        for o in r.recipes:
            by.setdefault(o.recipe, []).append(o)
    out = []
    for recipe, outs in by.items():
        fitting = [o.best for o in outs if o.best is not None]
        if fitting:
            out.append(RecipeOutcome(recipe, min(fitting, key=_cost_key)))
        else:
            out.append(RecipeOutcome(recipe, None, "; ".join(o.reason or "" for o in outs)))
    return out
