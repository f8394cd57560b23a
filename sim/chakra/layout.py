"""Every rank of a training job from the step graph's one replica: ranks, replicas, groups.

The step's task graph (:mod:`sim.training.graph.build`) simulates data-parallel replica 0
and lets it stand for its peers; its collectives name the groups of replica 0's GPUs
(which may span replicas: a DP group holds one GPU of every replica), and its pipeline
sends the pairs of replica 0. A Chakra export needs every rank, so :class:`JobLayout`
places replica ``k``'s GPUs and groups: a GPU of replica 0 at (TP rank ``t``, stage ``s``)
maps to the GPU at (``t``, ``s``) of replica ``k`` (:func:`sim.workload.plan.rank_of`,
the data-parallel replica ``d`` and context-parallel rank ``c`` of ``k = d * cp + c``);
a group maps to the group of the same kind (:func:`sim.training.setup.membership`) that
holds the mapped GPU, or, for a group of replica 0's own GPUs (the tied-embedding pair, a
send's pair), to the mapped GPUs. Ranks are the GPUs' indices in the topology (the plan's
rank ``r`` runs on ``topology.gpus[r]``).

The replicas are an affine map of ranks: replica ``k``'s rank is replica 0's plus
``d * dp_stride + c * cp_stride`` (the plan's placement is a mixed-radix numbering), so a
trace set can say which ranks fold together in two numbers per axis
(:attr:`JobLayout.replica_axes`), whatever the plan's ``order``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sim.errors import ConfigError
from sim.training.graph.task import Comm
from sim.training.setup import StepSetup, membership
from sim.workload.plan import Coord, rank_of

__all__ = ["JobLayout", "job_layout"]

Group = tuple[str, ...]


@dataclass(frozen=True)
class JobLayout:
    """The ranks of a job and how replica 0 maps onto replica ``k``.

    Attributes
    ----------
    gpus : tuple of str
        GPU name of rank ``r`` (the job's ranks: the first ``plan.num_gpus`` GPUs).
    rank : dict of str to int
        Rank of each GPU name.
    roles : tuple of int
        Replica 0's ranks (one per TP rank and pipeline stage), ascending.
    stage_of : dict of int to int
        Pipeline stage of each rank of ``roles``.
    tp_of : dict of int to int
        TP rank of each rank of ``roles``.
    offsets : tuple of int
        Rank offset of replica ``k`` from replica 0 (``offsets[0] == 0``).
    replica_axes : tuple of (int, int)
        (size, rank stride) of the data-parallel and context-parallel axes.
    """

    gpus: tuple[str, ...]
    rank: dict[str, int]
    roles: tuple[int, ...]
    stage_of: dict[int, int]
    tp_of: dict[int, int]
    offsets: tuple[int, ...]
    replica_axes: tuple[tuple[int, int], ...]
    _kind_of: dict[Group, str]
    _member: dict[str, Mapping[int, Group]]
    _role_at: dict[tuple[int, int], int]

    @property
    def num_ranks(self) -> int:
        """Ranks of the job."""
        return len(self.gpus)

    def gpu_in(self, gpu: str, k: int) -> str:
        """Replica ``k``'s GPU standing where replica 0's ``gpu`` stands."""
        return self.gpus[self.rank[gpu] + self.offsets[k]]

    def in_replica0(self, gpu: str) -> bool:
        """Whether ``gpu`` is one of replica 0's GPUs."""
        r = self.rank.get(gpu)
        return r is not None and r in self.stage_of

    def group_in(self, group: Group, k: int) -> Group:
        """Replica ``k``'s group standing where replica 0's ``group`` stands.

        Raises
        ------
        ConfigError
            A group that spans replicas and is none of the plan's groups (it cannot be
            placed in another replica).
        """
        if k == 0:
            return group
        if all(self.in_replica0(g) for g in group):
            return tuple(self.gpu_in(g, k) for g in group)
        kind = self._kind_of.get(group)
        anchor = next((g for g in group if self.in_replica0(g)), None)
        if kind is None or anchor is None:
            raise ConfigError(
                f"chakra export: group {list(group)[:8]} spans replicas but is not a group of "
                "the plan; it cannot be placed in every replica"
            )
        return self._member[kind][self.rank[self.gpu_in(anchor, k)]]

    def tp_complete(self, groups: Sequence[Group], comm: Comm, tp: int) -> tuple[Group, ...]:
        """``groups``, or one copy per TP rank where they hold only TP rank 0's GPUs and
        the part stands for every TP rank's (``comm.copies >= tp``: the tied-embedding
        all-reduce of the first and last stage)."""
        ends = [self.rank[g] for group in groups for g in group if g in self.rank]
        only_tp0 = all(self.tp_of.get(r, -1) == 0 for r in ends)
        if tp == 1 or not ends or not only_tp0 or comm.copies < tp:
            return tuple(groups)
        return tuple(tuple(self._at_tp(g, t) for g in group) for t in range(tp) for group in groups)

    def _at_tp(self, gpu: str, t: int) -> str:
        """The GPU of TP rank ``t`` in the stage of replica 0's ``gpu`` (others: as is)."""
        r = self.rank.get(gpu)
        if r is None:
            return gpu
        return self.gpus[self._role_at[(self.stage_of[r], t)]]


def job_layout(setup: StepSetup) -> JobLayout:
    """The :class:`JobLayout` of a resolved scenario."""
    plan, topo = setup.plan, setup.topology
    world = plan.num_gpus
    gpus = tuple(topo.gpus[:world])
    rank = {g: r for r, g in enumerate(gpus)}
    stage_of: dict[int, int] = {}
    tp_of: dict[int, int] = {}
    for s in range(plan.pp):
        for t in range(plan.tp):
            r = rank_of(plan, Coord(t, s, 0, 0))
            stage_of[r], tp_of[r] = s, t
    base = rank_of(plan, Coord(0, 0, 0, 0))
    dp_stride = rank_of(plan, Coord(0, 0, 1, 0)) - base if plan.dp > 1 else 0
    cp_stride = rank_of(plan, Coord(0, 0, 0, 1)) - base if plan.cp > 1 else 0
    offsets = tuple(d * dp_stride + c * cp_stride for d in range(plan.dp) for c in range(plan.cp))
    member = membership(plan, gpus)
    kind_of = {grp: kind for kind, per in member.items() for grp in per.values()}
    return JobLayout(
        gpus=gpus,
        rank=rank,
        roles=tuple(sorted(stage_of)),
        stage_of=stage_of,
        tp_of=tp_of,
        offsets=offsets,
        replica_axes=((plan.dp, dp_stride), (plan.cp, cp_stride)),
        _kind_of=kind_of,
        _member=member,
        _role_at={(s, t): r for r, s in stage_of.items() for t in (tp_of[r],)},
    )
