"""Everything a training-step simulation needs, resolved once from a scenario.

Loads the topology and profile, validates the plan, and maps the parallel plan onto GPU
names: for each pipeline stage, the GPUs of data-parallel replica 0 (one per TP rank),
and the TP, EP, DP and expert-DP groups those GPUs belong to (the DP groups span the
``dp * cp`` ranks holding the same weights), and the context-parallel rings.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache

from sim.catalog import GpuSpec
from sim.profile import Profile, load_profile
from sim.scenario.load import Scenario, resolve_plan
from sim.topology.model import Topology
from sim.topology.presets import load_topology
from sim.training.compute.params import ComputeParams, compute_params
from sim.workload.plan import Coord, ParallelPlan, groups, rank_of
from sim.workload.techniques import check_techniques, techniques_of

__all__ = ["StageGroups", "StepSetup", "membership", "prepare_step", "stage_groups"]
__all__ = ["StageGroups", "StepSetup", "prepare_step", "techniques_plan"]

NETWORKS = ("flow", "analytical")


@dataclass(frozen=True)
class StageGroups:
    """GPU names of one pipeline stage (replica 0) and the groups they talk in."""

    gpus: tuple[str, ...]  # one per TP rank
    tp: tuple[str, ...]  # the TP group of TP rank 0
    ep: tuple[str, ...]  # the EP group of TP rank 0
    dp: tuple[tuple[str, ...], ...]  # the DP group of every TP rank
    edp: tuple[tuple[str, ...], ...]  # the expert-DP group of every TP rank
    shard: tuple[tuple[str, ...], ...]  # the ZeRO shard group of every TP rank (= dp)
    replica: tuple[tuple[str, ...], ...]  # hybrid sharding's replica group of every TP rank
    cp_ring: tuple[tuple[str, str], ...] = ()  # (sender, receiver) of every CP ring's steps

    def group(self, kind: str) -> tuple[tuple[str, ...], ...]:
        """The groups of ``kind`` (``dp``, ``edp``, ``shard``, ``replica``), one per TP rank."""
        return {"dp": self.dp, "edp": self.edp, "shard": self.shard, "replica": self.replica}[kind]


@dataclass(frozen=True)
class StepSetup:
    """A scenario resolved against its cluster, profile and network backend.

    ``stage_gpus``/``stage_compute``: the GPU model and compute parameters each pipeline
    stage runs at, on a heterogeneous cluster (:mod:`sim.training.hetero`); empty: every
    stage runs at ``topology.gpu`` with ``compute``.
    """

    scenario: Scenario
    topology: Topology
    plan: ParallelPlan
    profile: Profile
    compute: ComputeParams
    network: str
    stages: tuple[StageGroups, ...]
    stage_gpus: tuple[GpuSpec, ...] = ()
    stage_compute: tuple[ComputeParams, ...] = ()

    def gpu_at(self, s: int) -> GpuSpec:
        """The GPU model pipeline stage ``s`` runs at."""
        return self.stage_gpus[s] if self.stage_gpus else self.topology.gpu

    def compute_at(self, s: int) -> ComputeParams:
        """The compute parameters of pipeline stage ``s``."""
        return self.stage_compute[s] if self.stage_compute else self.compute


@cache
def _topology(name: str, nodes: int | None, seed: int) -> Topology:
    return load_topology(name, nodes=nodes, seed=seed)


def cached_topology(name: str, nodes: int | None, seed: int) -> Topology:
    """The topology :func:`prepare_step` uses for (preset or file, servers, seed): built
    once per process, so a caller that needs it before the step (the CLI picks the
    profile from it) does not build a 16k-GPU cluster twice. Treat it as read-only."""
    return _topology(name, nodes, seed)


Membership = dict[str, dict[int, tuple[str, ...]]]


def membership(plan: ParallelPlan, names: tuple[str, ...]) -> Membership:
    """kind -> rank -> GPU names of the rank's group of that kind."""
    out: Membership = {}
    for kind in ("tp", "ep", "dp", "edp", "shard", "replica"):
        per: dict[int, tuple[str, ...]] = {}
        for g in groups(plan, kind):
            named = tuple(names[r] for r in g)
            for r in g:
                per[r] = named
        out[kind] = per
    return out


def stage_groups(
    plan: ParallelPlan, s: int, names: tuple[str, ...], member: Membership, replica: int = 0
) -> StageGroups:
    """The GPUs and groups of stage ``s`` of data-parallel replica ``replica``."""
    ranks = [rank_of(plan, Coord(t, s, replica)) for t in range(plan.tp)]
    return StageGroups(
        gpus=tuple(names[r] for r in ranks),
        tp=member["tp"][ranks[0]],
        ep=member["ep"][ranks[0]],
        dp=tuple(member["dp"][r] for r in ranks),
        edp=tuple(member["edp"][r] for r in ranks),
        shard=tuple(member["shard"][r] for r in ranks),
        replica=tuple(member["replica"][r] for r in ranks),
        cp_ring=_cp_ring(plan, s, names),
    )


def _cp_ring(plan: ParallelPlan, s: int, names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """(sender, receiver) GPU names of every ring step of stage ``s``'s CP rings (replica 0,
    every TP rank): CP rank ``c`` sends to ``c + 1``."""
    if plan.cp == 1:
        return ()
    return tuple(
        (names[rank_of(plan, Coord(t, s, 0, c))], names[rank_of(plan, Coord(t, s, 0, (c + 1) % plan.cp))])
        for t in range(plan.tp)
        for c in range(plan.cp)
    )  # fmt: skip


def techniques_plan(scenario: Scenario, plan: ParallelPlan) -> ParallelPlan:
    """``plan`` checked against the scenario's data-parallel techniques; under local SGD
    (``sync_every > 1``) the synchronisation runs after the inner step's backward, not
    overlapped with it (DiLoCo's outer step, arXiv:2311.08105)."""
    tech = techniques_of(scenario.parallel)
    check_techniques(tech, plan, scenario.model)
    return replace(plan, overlap_dp=False) if tech.sync_every > 1 and plan.dp > 1 else plan


def prepare_step(scenario: Scenario, network: str | None = None) -> StepSetup:
    """Resolve ``scenario``: topology (cached per name/nodes/seed), profile, plan, groups.

    ``network`` overrides the scenario's backend (``flow`` or ``analytical``).
    """
    from sim.errors import ConfigError

    net = network or scenario.network
    if net not in NETWORKS:
        raise ConfigError(f"network {net!r} is unknown; allowed: {', '.join(NETWORKS)}")
    topo = _topology(scenario.cluster.topology, scenario.cluster.nodes, scenario.seed)
    plan = techniques_plan(scenario, resolve_plan(scenario, topo.num_gpus, topo.gpus_per_node))
    profile = load_profile(scenario.profile)
    compute = compute_params(topo.gpu.name, profile.compute)
    member = membership(plan, topo.gpus)
    stages = tuple(stage_groups(plan, s, topo.gpus, member) for s in range(plan.pp))
    return StepSetup(scenario, topo, plan, profile, compute, net, stages)
