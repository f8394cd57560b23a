"""Everything a training-step simulation needs, resolved once from a scenario.

Loads the topology and profile, validates the plan, and maps the parallel plan onto GPU
names: for each pipeline stage, the GPUs of data-parallel replica 0 (one per TP rank),
and the TP, EP, DP and expert-DP groups those GPUs belong to.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from sim.profile import Profile, load_profile
from sim.topology.model import Topology
from sim.topology.presets import load_topology
from sim.training.compute.params import ComputeParams, compute_params
from sim.training.scenario import Scenario, resolve_plan
from sim.training.workload.plan import Coord, ParallelPlan, groups, rank_of

__all__ = ["StageGroups", "StepSetup", "prepare_step"]

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

    def group(self, kind: str) -> tuple[tuple[str, ...], ...]:
        """The groups of ``kind`` (``dp``, ``edp``, ``shard``, ``replica``), one per TP rank."""
        return {"dp": self.dp, "edp": self.edp, "shard": self.shard, "replica": self.replica}[kind]


@dataclass(frozen=True)
class StepSetup:
    """A scenario resolved against its cluster, profile and network backend."""

    scenario: Scenario
    topology: Topology
    plan: ParallelPlan
    profile: Profile
    compute: ComputeParams
    network: str
    stages: tuple[StageGroups, ...]


@cache
def _topology(name: str, nodes: int | None, seed: int) -> Topology:
    return load_topology(name, nodes=nodes, seed=seed)


def cached_topology(name: str, nodes: int | None, seed: int) -> Topology:
    """The topology :func:`prepare_step` uses for (preset or file, servers, seed): built
    once per process, so a caller that needs it before the step (the CLI picks the
    profile from it) does not build a 16k-GPU cluster twice. Treat it as read-only."""
    return _topology(name, nodes, seed)


Membership = dict[str, dict[int, tuple[str, ...]]]


def _membership(plan: ParallelPlan, names: tuple[str, ...]) -> Membership:
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


def _stage(plan: ParallelPlan, s: int, names: tuple[str, ...], member: Membership) -> StageGroups:
    ranks = [rank_of(plan, Coord(t, s, 0)) for t in range(plan.tp)]
    return StageGroups(
        gpus=tuple(names[r] for r in ranks),
        tp=member["tp"][ranks[0]],
        ep=member["ep"][ranks[0]],
        dp=tuple(member["dp"][r] for r in ranks),
        edp=tuple(member["edp"][r] for r in ranks),
        shard=tuple(member["shard"][r] for r in ranks),
        replica=tuple(member["replica"][r] for r in ranks),
    )


def prepare_step(scenario: Scenario, network: str | None = None) -> StepSetup:
    """Resolve ``scenario``: topology (cached per name/nodes/seed), profile, plan, groups.

    ``network`` overrides the scenario's backend (``flow`` or ``analytical``).
    """
    from sim.errors import ConfigError

    net = network or scenario.network
    if net not in NETWORKS:
        raise ConfigError(f"network {net!r} is unknown; allowed: {', '.join(NETWORKS)}")
    topo = _topology(scenario.cluster.topology, scenario.cluster.nodes, scenario.seed)
    plan = resolve_plan(scenario, topo.num_gpus, topo.gpus_per_node)
    profile = load_profile(scenario.profile)
    compute = compute_params(topo.gpu.name, profile.compute)
    member = _membership(plan, topo.gpus)
    stages = tuple(_stage(plan, s, topo.gpus, member) for s in range(plan.pp))
    return StepSetup(scenario, topo, plan, profile, compute, net, stages)
