"""Lower bounds on a layout's step time: from one cheap probe per compute shape, then from
the layout's own pass costs.

The compute of one micro-batch through the whole model depends on TP, SP, EP, CP, the
micro-batch size and recompute only (the *shape*), not on PP, DP or ZeRO. So the planner
costs, once per shape, the passes of a one-micro-batch step of the same model with
PP = 1 and ZeRO 0 (:class:`ShapeTimes`), and reads its compute time ``t`` (what that
step's ``breakdown["compute"]`` reports, communication excluded). A pipeline of ``p`` stages with
``v`` chunks each and ``m`` micro-batches then needs at least
``(m + (p - 1) / v) * t / p``: every stage averages ``t / p`` per micro-batch, the
slowest at least as much, and the fill and drain add ``p - 1`` chunk times. A layout
whose bound exceeds the best step times found so far cannot enter the ranking and is
not simulated.

That bound knows nothing of the layout's ZeRO stage, its stages' imbalance (embedding and
head) or the data-parallel collectives beside the passes. :func:`step_bounds` are tighter
and still lower bounds: they cost the layout's own passes (the step's own
:func:`~sim.training.graph.costs.chunk_costs`, interference and FSDP casts included,
a few milliseconds, no graph) and take the longest chain every schedule has
(:func:`pipeline_bound_s`). The planner computes them for the layouts the probe bound
lets through, before simulating them: first without the slowdown the data-parallel
collectives cause beside the passes (no collective to time), then with it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence

from sim.errors import ClusterSimError
from sim.kept import Kept
from sim.scenario.load import ClusterSection, Scenario
from sim.studies.plan.space import Layout
from sim.training.compute.params import ComputeParams
from sim.training.compute.passes import CollectiveTimer, PassCost
from sim.training.setup import StepSetup

__all__ = [
    "ROUNDING",
    "Shape",
    "ShapeTimes",
    "lower_bound_s",
    "pipeline_bound_s",
    "shape_of",
    "step_bounds",
]

#: Relative margin taken off :func:`pipeline_bound_s`: the executor adds the same
#: seconds in another order (a pass's units one by one), so equal sums may differ in
#: their last bits.
ROUNDING = 1e-9

Shape = tuple[int, bool, int, int, str, int]  # tp, sp, ep, micro_batch, recompute, cp


def shape_of(layout: Layout) -> Shape:
    """The part of a layout that sets its compute per micro-batch."""
    return (layout.tp, layout.sp, layout.ep, layout.micro_batch, layout.recompute, layout.cp)


class ShapeTimes:
    """Compute seconds of one micro-batch through the whole model, per shape (memoised).

    The probe of a shape is a one-micro-batch step of that shape on the planning cluster
    (PP 1, ZeRO 0, DP filling the cluster): its passes are costed (no step is simulated,
    no data-parallel collective timed), on the topology, profile and collective timer
    the layouts' own steps use. ``simulated`` counts the probes that had to be simulated
    instead (replicas of several speeds: mixed GPUs or a speed-based split).

    Parameters
    ----------
    scenario : Scenario
        The job (model, training settings, profile).
    cluster : ClusterSection
        The cluster planned for.
    gpus : int
        Its GPUs.
    """

    def __init__(self, scenario: Scenario, cluster: ClusterSection, gpus: int) -> None:
        self.scenario, self.cluster, self.gpus = scenario, cluster, gpus
        self._t: dict[Shape, float] = {}
        self.simulated = 0

    def seconds(self, shape: Shape) -> float:
        """Compute time of one micro-batch of ``shape`` (0.0 when the probe cannot run)."""
        if shape not in self._t:
            self._t[shape] = self._probe(shape)
        return self._t[shape]

    def _probe(self, shape: Shape) -> float:
        from sim.training.graph.costs import chunk_costs
        from sim.training.hetero.replicas import mixed_path
        from sim.training.setup import prepare_step
        from sim.training.step import collective_timer, simulate_step

        tp, sp, ep, mb, recompute, cp = shape
        dp = self.gpus // (tp * cp)
        if dp < 1 or dp % ep:
            return 0.0
        sc = self.scenario
        par = dataclasses.replace(
            sc.parallel, tp=tp, pp=1, dp=dp, ep=ep, sp=sp, zero=0, micro_batch=mb,
            schedule="1f1b", virtual_stages=1, recompute=recompute, cp=cp,
        )  # fmt: skip
        training = dataclasses.replace(sc.training, global_batch=mb * dp)
        probe = dataclasses.replace(sc, cluster=self.cluster, parallel=par, training=training)
        try:
            setup = prepare_step(probe, "analytical")
            if mixed_path(setup):  # replicas of several speeds: the simulated step says
                self.simulated += 1
                return float(simulate_step(probe, "analytical").breakdown.get("compute", 0.0))
            costs = chunk_costs(setup, collective_timer(setup))
        except ClusterSimError:
            return 0.0  # no bound: the layout is simulated
        # what the step's breakdown["compute"] adds: its one stage's passes, in order
        return 0.0 + costs[(0, "F")].compute_s + costs[(0, "B")].compute_s


def lower_bound_s(layout: Layout, global_batch: int, per_microbatch_s: float) -> float:
    """``(m + (pp - 1) / v) * t / pp`` seconds (see the module docstring).

    >>> lower_bound_s(Layout(tp=1, pp=4, dp=2, micro_batch=1), 16, 2.0)
    5.5
    """
    m = global_batch // (layout.micro_batch * layout.dp)
    p, v = layout.pp, layout.virtual_stages
    return (m + (p - 1) / v) * per_microbatch_s / p


def pipeline_bound_s(costs: Mapping[tuple[int, str], PassCost], pp: int, v: int, m: int) -> float:
    """The longest chain of compute every pipeline schedule runs, seconds.

    ``costs`` maps (virtual stage ``c * pp + s``, ``"F"``/``"B"``) to the pass's cost,
    ``busy_s`` its least duration on the stage's compute stream. Stage ``s`` runs
    ``m`` forward and backward passes of each of its ``v`` chunks one after another
    (``W_s`` seconds of ``busy_s``); its first pass waits for micro-batch 0's forwards
    through virtual stages ``0 .. s - 1``, and its last (a backward) is followed by that
    micro-batch's backwards through them. So the step lasts at least
    ``max_s (sum_{u < s} F_u + W_s + sum_{u < s} B_u)``, less :data:`ROUNDING`.
    Gathers, sends, the gradient reduction and the optimizer only add to it.

    >>> from sim.training.compute.passes import PassCost
    >>> c = {(0, "F"): PassCost(1.0, 0, 0, 0, 0), (0, "B"): PassCost(2.0, 0, 0, 0, 0),
    ...      (1, "F"): PassCost(1.0, 0, 0, 0, 0), (1, "B"): PassCost(2.0, 0, 0, 0, 0)}
    >>> round(pipeline_bound_s(c, 2, 1, 4), 6)  # (4 + 1) micro-batch times of 3 s
    15.0
    """
    best = 0.0
    chain = 0.0  # forwards and backwards of virtual stages 0 .. s - 1, one micro-batch
    for s in range(pp):
        work = m * sum(costs[(c * pp + s, k)].busy_s for c in range(v) for k in ("F", "B"))
        best = max(best, chain + work)
        chain += costs[(s, "F")].busy_s + costs[(s, "B")].busy_s
    return best * (1.0 - ROUNDING)


def step_bounds(scenario: Scenario) -> Iterator[float]:
    """Ever tighter lower bounds on ``simulate_step(scenario, "analytical").step_time_s``,
    seconds, each dearer than the one before: :func:`pipeline_bound_s` of the step's own
    pass costs without, then with, the slowdown data-parallel collectives cause beside
    them (``comm_interference``, which only adds seconds and needs those collectives
    timed). None where they do not apply (mixed GPUs or a speed-based split, or
    techniques that amortise the step over several, which may report less than the
    graph ran).

    The scenario is resolved now, the bounds computed when asked for.

    Raises
    ------
    ClusterSimError
        Where the scenario does not resolve (its simulation raises the same).
    """
    from sim.training.hetero.replicas import mixed_path
    from sim.training.setup import prepare_step
    from sim.training.step import collective_timer
    from sim.workload.techniques import techniques_of
    from sim.workload.zero import zero_semantics

    setup = prepare_step(scenario, "analytical")
    plan = setup.plan
    if mixed_path(setup) or (techniques_of(scenario.parallel).active and plan.dp > 1):
        return iter(())
    quiet = _quiet(setup.compute)
    levels = [dataclasses.replace(setup, compute=quiet)]
    sem = zero_semantics(plan)
    beside = sem.reduce_every_microbatch or sem.gather_forward or sem.gather_backward
    if setup.compute.comm_interference > 0 and plan.dp_cp > 1 and beside:
        levels.append(setup)  # collectives run beside the passes: they slow them
    return _pass_bounds(levels, collective_timer(setup))


#: compute parameters -> (them, a copy without comm interference): one copy per object,
#: so the unit costs kept per compute parameters serve every layout's first bound.
_QUIET: Kept[ComputeParams] = Kept(limit=64)


def _quiet(compute: ComputeParams) -> ComputeParams:
    """``compute`` with ``comm_interference`` 0, the same object for the same ``compute``."""
    return _QUIET.get((), (compute,), lambda: dataclasses.replace(compute, comm_interference=0.0))


def _pass_bounds(levels: Sequence[StepSetup], timer: CollectiveTimer) -> Iterator[float]:
    """:func:`pipeline_bound_s` of each setup's pass costs, in turn (none after an error:
    the simulation reports it)."""
    from sim.training.graph.costs import chunk_costs

    for setup in levels:
        plan = setup.plan
        try:
            costs = chunk_costs(setup, timer)
        except ClusterSimError:
            return
        yield pipeline_bound_s(costs, plan.pp, plan.virtual_stages, plan.num_microbatches)
