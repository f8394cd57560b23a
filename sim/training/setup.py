"""The one resolution path: everything a training step needs, resolved once from a scenario.

Every entry point (``clustersim run``, ``sweep``, ``plan``, ``report``, ``explore`` and the
Python API) goes through :func:`prepare_step`: it loads the topology, chooses the profile
(an explicit one, the scenario's, or the shipped profile measured on this hardware, with
the hardware guard: :func:`resolve_step_profile`), validates the plan, and maps the
parallel plan onto GPU names: for each pipeline stage, the GPUs of data-parallel replica 0 (one per TP rank),
and the TP, EP, DP and expert-DP groups those GPUs belong to (the DP groups span the
``dp * cp`` ranks holding the same weights), and the context-parallel rings.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from sim.catalog import GpuSpec
from sim.files import file_stamp
from sim.kept import Kept
from sim.network import backend
from sim.profile import Profile
from sim.profile_select import Resolved, describe, resolve_profile
from sim.scenario.layer_list import LayerScenario
from sim.scenario.load import Scenario, resolve_plan
from sim.topology.model import Topology
from sim.topology.presets import load_topology
from sim.training.compute.params import ComputeParams, compute_params
from sim.workload.plan import Coord, ParallelPlan, group_of, rank_of, stage_group_ranks
from sim.workload.techniques import check_techniques, techniques_of

__all__ = [
    "StageGroups",
    "StepSetup",
    "cached_topology",
    "membership",
    "prepare_step",
    "resolve_step_profile",
    "stage_groups",
    "techniques_plan",
]


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

    ``profile_info``: the profile's facts for outputs (name, how it was chosen, hardware,
    error bars: :func:`sim.profile_select.describe`).
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
    profile_info: dict[str, Any] = field(default_factory=dict)

    def gpu_at(self, s: int) -> GpuSpec:
        """The GPU model pipeline stage ``s`` runs at."""
        return self.stage_gpus[s] if self.stage_gpus else self.topology.gpu

    def compute_at(self, s: int) -> ComputeParams:
        """The compute parameters of pipeline stage ``s``."""
        return self.stage_compute[s] if self.stage_compute else self.compute


#: Built topologies per (preset or file, servers, seed): the file's stamp and the topology.
_BUILT: dict[tuple[str, int | None, int], tuple[tuple[int, int] | None, Topology]] = {}


def _topology(name: str, nodes: int | None, seed: int) -> Topology:
    """The built topology, once per (preset or file, servers, seed) and per version of the
    file (:func:`sim.files.file_stamp`): an edited topology file is built again and
    replaces the version built before."""
    key, stamp = (name, nodes, seed), file_stamp(name)
    kept = _BUILT.get(key)
    if kept is None or kept[0] != stamp:
        kept = _BUILT[key] = (stamp, load_topology(name, nodes=nodes, seed=seed))
    return kept[1]


def cached_topology(name: str, nodes: int | None, seed: int) -> Topology:
    """The topology :func:`prepare_step` uses for (preset or file, servers, seed): built
    once per process, so a caller that needs it before the step (the CLI picks the
    profile from it) does not build a 16k-GPU cluster twice. Treat it as read-only."""
    return _topology(name, nodes, seed)


class _GroupsOf(Mapping[int, tuple[str, ...]]):
    """rank -> GPU names of the rank's group of one kind, computed when asked (a step
    needs its replica's groups, not every group of a 16k-GPU job)."""

    def __init__(self, plan: ParallelPlan, kind: str, names: tuple[str, ...]) -> None:
        self.plan, self.kind, self.names = plan, kind, names
        self._known: dict[int, tuple[str, ...]] = {}

    def __getitem__(self, rank: int) -> tuple[str, ...]:
        named = self._known.get(rank)
        if named is None:
            group = group_of(self.plan, self.kind, rank)
            named = tuple(self.names[r] for r in group)
            for r in group:
                self._known[r] = named
        return named

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.plan.num_gpus))

    def __len__(self) -> int:
        return self.plan.num_gpus


Membership = dict[str, Mapping[int, tuple[str, ...]]]


def membership(plan: ParallelPlan, names: tuple[str, ...]) -> Membership:
    """kind -> rank -> GPU names of the rank's group of that kind (each group found when
    first asked for)."""
    return {kind: _GroupsOf(plan, kind, names)
            for kind in ("tp", "ep", "dp", "edp", "shard", "replica")}  # fmt: skip


def stage_groups(
    plan: ParallelPlan, s: int, names: tuple[str, ...], replica: int = 0
) -> StageGroups:
    """The GPUs and groups of stage ``s`` of data-parallel replica ``replica``, read from the
    plan's rank grid at once (:func:`sim.workload.plan.stage_group_ranks`)."""
    table = _name_table(names)
    named = {
        k: tuple(map(tuple, table[v].tolist()))
        for k, v in stage_group_ranks(plan, s, replica).items()
    }
    return StageGroups(
        gpus=named["tp"][0],
        tp=named["tp"][0],
        ep=named["ep"][0],
        dp=named["dp"],
        edp=named["edp"],
        shard=named["shard"],
        replica=named["replica"],
        cp_ring=_cp_ring(plan, s, names),
    )


_NAME_TABLES: Kept[np.ndarray] = Kept(limit=64)


def _name_table(names: tuple[str, ...]) -> np.ndarray:
    """``names`` as a numpy object array (kept per tuple: a topology's GPU names are asked
    for at every step)."""
    return _NAME_TABLES.get((), (names,), lambda: _frozen_array(names))


def _frozen_array(names: tuple[str, ...]) -> np.ndarray:
    table = np.array(names, dtype=object)
    table.flags.writeable = False
    return table


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


_RESOLVED: Kept[tuple[Resolved, dict[str, Any]]] = Kept(limit=64)


def _resolved(
    request: str | None, topology: Topology, force: bool
) -> tuple[Resolved, dict[str, Any]]:
    """:func:`resolve_profile` and its facts, kept per (request, topology, force) and per
    version of a profile file: a sweep or a plan asks again for every point."""

    def make() -> tuple[Resolved, dict[str, Any]]:
        resolved = resolve_profile(request, topology, force=force)
        return resolved, describe(resolved, topology)

    return _RESOLVED.get((request, force, file_stamp(request)), (topology,), make)


def resolve_step_profile(
    scenario: Scenario | LayerScenario,
    topology: Topology,
    profile: str | None = None,
    force_profile: bool = False,
) -> Resolved:
    """The profile a step of ``scenario`` on ``topology`` uses, for every entry point: the
    ``profile`` argument (``--profile``) when given, else the scenario's ``profile`` key,
    else the shipped profile measured on this hardware (``none``: the shipped defaults);
    one measured on other hardware is refused unless ``force_profile``
    (:func:`sim.profile_select.resolve_profile`) unless ``force_profile`` or the
    scenario's ``force_profile`` key. Cached per (request, topology)."""
    request = profile if profile is not None else scenario.profile
    return _resolved(request, topology, force_profile or scenario.force_profile)[0]


_STAGES: Kept[tuple[StageGroups, ...]] = Kept(limit=256)


def _stages(plan: ParallelPlan, topology: Topology) -> tuple[StageGroups, ...]:
    """Every stage's groups of ``plan`` on ``topology``, kept per (layout, topology): a
    sweep, a plan search and the API ask again for the same layout. The groups depend on
    the sizes, the ZeRO shard size and the placement order only (not on the batch)."""
    layout = (plan.tp, plan.pp, plan.dp, plan.cp, plan.ep, plan.shard, plan.order)
    return _STAGES.get(
        layout,
        (topology,),
        lambda: tuple(stage_groups(plan, s, topology.gpus) for s in range(plan.pp)),
    )


def prepare_step(
    scenario: Scenario,
    network: str | None = None,
    *,
    profile: str | None = None,
    force_profile: bool = False,
) -> StepSetup:
    """Resolve ``scenario``: the one path from a scenario to what its step needs, shared by
    ``run``, ``sweep``, ``plan``, ``report``, ``explore`` and :func:`sim.simulate_step`.

    Parameters
    ----------
    scenario : Scenario
        The validated scenario.
    network : str, optional
        A network backend overriding the scenario's (``flow`` or ``analytical``).
    profile : str, optional
        A profile overriding the scenario's (name, path or ``none``); see
        :func:`resolve_step_profile` for the order.
    force_profile : bool
        Use a profile measured on other hardware (as the scenario's ``force_profile``).

    Returns
    -------
    StepSetup
        Topology (cached per name, servers and seed), profile (with how it was chosen),
        compute parameters, validated plan and every stage's groups.
    """
    net = backend(network or scenario.network, "network").name
    from sim.collectives.algorithms import check_hardware

    topo = _topology(scenario.cluster.topology, scenario.cluster.nodes, scenario.seed)
    check_hardware(scenario.parallel.nccl_algo, topo, "parallel.nccl_algo")
    request = profile if profile is not None else scenario.profile
    resolved, info = _resolved(request, topo, force_profile or scenario.force_profile)
    plan = techniques_plan(scenario, resolve_plan(scenario, topo.num_gpus, topo.gpus_per_node))
    compute = compute_params(topo.gpu.name, resolved.profile.compute)
    return StepSetup(scenario, topo, plan, resolved.profile, compute, net, _stages(plan, topo),
                     profile_info=info)  # fmt: skip
