"""Parallel plans: validation against a model and a cluster, and rank placement.

A :class:`ParallelPlan` splits a job over ``tp * cp * pp * dp`` GPUs. Ranks are numbered
by a mixed radix whose fastest axis is the first of :attr:`ParallelPlan.order` (default
``("tp", "pp", "dp")`` with ``cp`` right after ``tp``: TP inside a node first, then CP,
PP, DP), so with 8 GPUs per node and ``tp = 8`` every TP group is one node. Context-
parallel (CP) ranks hold the same weights and different parts of each sequence, so
gradients are reduced over the combined ``dp * cp`` group (Megatron-Core's DP-CP group):
the ``dp``, ``shard``, ``replica`` and ``edp`` groups span it.

>>> plan = ParallelPlan(tp=2, pp=2, dp=2, global_batch=8)
>>> rank_coords(plan, 5)
Coord(tp=1, pp=0, dp=1, cp=0)
>>> groups(plan, "pp")[0]
[0, 2]
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from sim.errors import ConfigError

__all__ = [
    "AXES",
    "DEFAULT_BUCKET_BYTES",
    "GROUP_KINDS",
    "PLACEMENT_AXES",
    "RECOMPUTE",
    "SCHEDULE_NAMES",
    "Coord",
    "ParallelPlan",
    "full_order",
    "group_of",
    "group_rows",
    "groups",
    "parse_order",
    "placement_notes",
    "rank_coords",
    "rank_of",
    "stage_group_ranks",
]

AXES = ("tp", "pp", "dp")
PLACEMENT_AXES = ("tp", "cp", "pp", "dp")
GROUP_KINDS = ("tp", "pp", "dp", "cp", "ep", "edp", "shard", "replica")
SCHEDULE_NAMES = ("gpipe", "1f1b", "interleaved")
RECOMPUTE = ("none", "selective", "full")


class Coord(NamedTuple):
    """A rank's position: TP rank, pipeline stage, data-parallel replica, CP rank."""

    tp: int
    pp: int
    dp: int
    cp: int = 0


#: PyTorch DDP's gradient bucket (``bucket_cap_mb=25``), bytes.
DEFAULT_BUCKET_BYTES = 25 * 2**20


@dataclass(frozen=True)
class ParallelPlan:
    """How one training job is split over GPUs.

    Attributes
    ----------
    tp, pp, dp : int
        Tensor-, pipeline- and data-parallel sizes.
    cp : int
        Context-parallel size: each CP rank holds ``seq / cp`` tokens of every sequence
        (ring attention; :mod:`.context`).
    ep : int
        Expert-parallel size (divides ``dp``; MoE only). Experts are replicated over
        ``dp // ep`` "expert data-parallel" ranks.
    sp : bool
        Megatron sequence parallelism (needs ``tp > 1``).
    zero : int
        ZeRO stage 0-3 over ``dp`` (see :mod:`.zero` for what each stage communicates).
    fsdp : str or None
        The PyTorch FSDP sharding strategy the plan was written with (``FULL_SHARD``,
        ``SHARD_GRAD_OP``, ``HYBRID_SHARD``, ``_HYBRID_SHARD_ZERO2``, ``NO_SHARD``), or None
        for DeepSpeed/Megatron semantics of ``zero``.
    shard_size : int or None
        Ranks that shard the model states (HYBRID_SHARD's shard group, consecutive data-
        parallel ranks); replicas of the shard group all-reduce gradients. None = ``dp``.
    grad_bytes : int
        Bytes per gradient element as accumulated and reduced (4: fp32 main grads,
        Megatron's default; 2: bf16 reduction).
    micro_batch : int
        Sequences per micro-batch per DP replica.
    global_batch : int
        Sequences per optimizer step over all replicas.
    schedule : str
        Pipeline schedule: ``gpipe``, ``1f1b`` or ``interleaved``.
    virtual_stages : int
        Model chunks per pipeline stage (interleaved schedule only).
    recompute : str
        Activation recomputation: ``none``, ``selective`` or ``full``.
    order : tuple[str, ...]
        Placement order, fastest-varying axis first.
    gpus_per_node : int
        GPUs per node of the cluster (for placement notes).
    overlap_tp, overlap_dp : bool
        Overlap TP communication with compute / DP gradient reduction with backward.
    bucket_bytes : float
        DDP gradient bucket size in bytes.
    first_stage_layers, last_stage_layers : int or None
        Layers of the first and last pipeline stage when they differ from the others
        (Megatron's ``--decoder-first/last-pipeline-num-layers``).
    embedding_as_layer, loss_as_layer : bool or None
        Count the embedding (loss) as one layer of the first (last) stage when splitting
        layers (Megatron's ``account_for_embedding/loss_in_pipeline_split``); None = only
        when the layer count needs it (see :mod:`.stages`).
    layer_split : tuple of int or None
        Layers of each pipeline stage, given outright (summing to the model's layers);
        set by ``parallel.stage_split: speed`` on a heterogeneous cluster
        (:mod:`sim.training.hetero`). None: placed as above.
    microbatch_group_size : int or None
        Interleaved schedule: micro-batches run through one model chunk before the next
        (Megatron-Core's ``--microbatch-group-size-per-virtual-pipeline-stage``, between
        ``pp`` and the micro-batches); None: ``pp``, Megatron's default.
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    sp: bool = False
    zero: int = 0
    micro_batch: int = 1
    global_batch: int = 1
    schedule: str = "1f1b"
    virtual_stages: int = 1
    recompute: str = "none"
    order: tuple[str, ...] = AXES
    gpus_per_node: int = 8
    overlap_tp: bool = False
    overlap_dp: bool = True
    bucket_bytes: float = DEFAULT_BUCKET_BYTES
    fsdp: str | None = None
    shard_size: int | None = None
    grad_bytes: int = 4
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    embedding_as_layer: bool | None = None
    loss_as_layer: bool | None = None
    cp: int = 1
    layer_split: tuple[int, ...] | None = None
    microbatch_group_size: int | None = None

    @property
    def num_gpus(self) -> int:
        """``tp * cp * pp * dp``."""
        return self.tp * self.cp * self.pp * self.dp

    @property
    def dp_cp(self) -> int:
        """Ranks holding the same weights, ``dp * cp`` (the gradient-reduction group)."""
        return self.dp * self.cp

    @property
    def num_microbatches(self) -> int:
        """Micro-batches per step per replica (gradient-accumulation steps)."""
        return self.global_batch // (self.micro_batch * self.dp)

    @property
    def edp(self) -> int:
        """Expert data-parallel size, ``dp * cp // ep``."""
        return self.dp_cp // self.ep

    @property
    def shard(self) -> int:
        """Ranks one copy of the sharded model states is spread over (``dp * cp`` unless
        hybrid)."""
        return self.shard_size or self.dp_cp


def parse_order(text: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Parse a placement order like ``"tp,pp,dp"`` (fastest axis first; ``cp`` optional).

    >>> parse_order("tp, dp, pp")
    ('tp', 'dp', 'pp')
    """
    parts = text.split(",") if isinstance(text, str) else list(text)
    order = tuple(str(p).strip() for p in parts)
    if sorted(order) not in (sorted(AXES), sorted(PLACEMENT_AXES)):
        raise ConfigError(
            f"parallel.placement: {text!r} must order each of tp, pp, dp (and optionally cp) "
            "once, e.g. 'tp,pp,dp' or 'tp,cp,pp,dp'"
        )
    return order


def full_order(order: tuple[str, ...] | list[str] | str) -> tuple[str, ...]:
    """The placement order with ``cp`` (inserted right after ``tp`` when not given).

    >>> full_order(("tp", "pp", "dp")), full_order("dp,tp,pp")
    (('tp', 'cp', 'pp', 'dp'), ('dp', 'tp', 'cp', 'pp'))
    """
    axes = parse_order(order)
    if "cp" in axes:
        return axes
    at = axes.index("tp") + 1
    return (*axes[:at], "cp", *axes[at:])


@lru_cache(maxsize=64)
def _grid(plan: ParallelPlan) -> np.ndarray:
    """Array ``g[tp, pp, dp, cp] = rank`` for the plan's placement order (cached per plan:
    read-only)."""
    sizes = {"tp": plan.tp, "cp": plan.cp, "pp": plan.pp, "dp": plan.dp}
    order = full_order(plan.order)
    # C order makes the last axis fastest, so lay the axes out slowest first.
    slow_first = order[::-1]
    ranks = np.arange(plan.num_gpus).reshape([sizes[a] for a in slow_first])
    grid = np.transpose(ranks, [slow_first.index(a) for a in Coord._fields])
    grid.flags.writeable = False
    return grid


def rank_coords(plan: ParallelPlan, rank: int) -> Coord:
    """The (tp, pp, dp, cp) coordinates of global ``rank``."""
    if not 0 <= rank < plan.num_gpus:
        raise ValueError(f"rank {rank} outside 0..{plan.num_gpus - 1}")
    sizes = {"tp": plan.tp, "cp": plan.cp, "pp": plan.pp, "dp": plan.dp}
    coord: dict[str, int] = {}
    rest = rank
    for axis in full_order(plan.order):
        rest, coord[axis] = divmod(rest, sizes[axis])
    return Coord(coord["tp"], coord["pp"], coord["dp"], coord["cp"])


def rank_of(plan: ParallelPlan, coord: Coord) -> int:
    """Global rank at ``coord`` (inverse of :func:`rank_coords`)."""
    return int(_grid(plan)[coord.tp, coord.pp, coord.dp, coord.cp])


def group_of(plan: ParallelPlan, kind: str, rank: int) -> list[int]:
    """The ranks of ``rank``'s group of ``kind``, in the order :func:`groups` lists them
    (one group, without enumerating every group of the job).

    >>> p = ParallelPlan(tp=2, dp=4, zero=3, shard_size=2, global_batch=4)
    >>> group_of(p, "replica", 1), group_of(p, "tp", 5), group_of(p, "dp", 2)
    ([1, 5], [4, 5], [0, 2, 4, 6])
    """
    c = rank_coords(plan, rank)
    grid = _grid(plan)
    if kind in ("tp", "pp", "cp"):
        index: list[int | slice] = [c.tp, c.pp, c.dp, c.cp]
        index[Coord._fields.index(kind)] = slice(None)
        return [int(r) for r in grid[tuple(index)]]
    row = grid.reshape(plan.tp, plan.pp, plan.dp_cp)[c.tp, c.pp]
    i = c.dp * plan.cp + c.cp  # the rank's place on the DP-CP axis
    if kind == "dp":
        out = row
    elif kind == "ep":
        out = row.reshape(plan.edp, plan.ep)[i // plan.ep]
    elif kind == "edp":
        out = row.reshape(plan.edp, plan.ep)[:, i % plan.ep]
    elif kind == "shard":
        out = row.reshape(plan.dp_cp // plan.shard, plan.shard)[i // plan.shard]
    elif kind == "replica":
        out = row.reshape(plan.dp_cp // plan.shard, plan.shard)[:, i % plan.shard]
    else:
        raise ValueError(f"unknown group kind {kind!r}; known: {', '.join(GROUP_KINDS)}")
    return [int(r) for r in out]


def stage_group_ranks(plan: ParallelPlan, s: int, replica: int = 0) -> dict[str, np.ndarray]:
    """Every group of stage ``s`` of data-parallel ``replica`` (CP rank 0) at once, read
    from the rank grid: kind -> array with one row per TP rank, its ranks in the order
    :func:`group_of` lists them (``tp``: the TP group, one row). Read-only views.

    >>> p = ParallelPlan(tp=2, dp=4, zero=3, shard_size=2, global_batch=4)
    >>> g = stage_group_ranks(p, 0, 1)
    >>> g["tp"].tolist(), g["dp"].tolist(), g["replica"].tolist()
    ([[2, 3]], [[0, 2, 4, 6], [1, 3, 5, 7]], [[2, 6], [3, 7]])
    """
    grid = _grid(plan)
    data = grid.reshape(plan.tp, plan.pp, plan.dp_cp)[:, s]  # (tp, dp_cp)
    i = replica * plan.cp  # the replica's place on the DP-CP axis
    by_expert = data.reshape(plan.tp, plan.edp, plan.ep)
    by_shard = data.reshape(plan.tp, plan.dp_cp // plan.shard, plan.shard)
    return {
        "tp": grid[:, s, replica, 0][None, :],
        "dp": data,
        "ep": by_expert[:, i // plan.ep],
        "edp": by_expert[:, :, i % plan.ep],
        "shard": by_shard[:, i // plan.shard],
        "replica": by_shard[:, :, i % plan.shard],
    }


def groups(plan: ParallelPlan, kind: str) -> list[list[int]]:
    """Rank lists of every group of ``kind`` (one of :data:`GROUP_KINDS`).

    ``cp`` groups are the context-parallel rings (ranks in ring order). ``dp`` groups
    join every rank holding the same weights: the ``dp * cp`` ranks of a TP rank and
    stage (Megatron-Core's DP-CP group, over which gradients are reduced). ``ep`` groups
    are ``ep`` consecutive DP replicas (same tp and pp); ``edp`` groups join the replicas
    holding the same experts (``dp // ep`` ranks each). ``shard`` groups are
    ``plan.shard`` consecutive ranks of the DP-CP group (a hybrid-sharding shard group);
    ``replica`` groups join the ranks at the same place of every shard group.

    >>> groups(ParallelPlan(dp=4, zero=3, shard_size=2, global_batch=4), "replica")
    [[0, 2], [1, 3]]
    >>> groups(ParallelPlan(dp=2, cp=2, global_batch=2), "cp"), groups(
    ...     ParallelPlan(dp=2, cp=2, global_batch=2), "dp")
    ([[0, 1], [2, 3]], [[0, 1, 2, 3]])
    """
    return group_rows(plan, kind).tolist()


def group_rows(plan: ParallelPlan, kind: str) -> np.ndarray:
    """:func:`groups` as an array, one row per group (read from the rank grid, no Python
    list per group: a 16k-GPU plan has thousands)."""
    grid = _grid(plan)
    if kind in ("tp", "pp", "cp"):
        axis = Coord._fields.index(kind)
        return np.moveaxis(grid, axis, -1).reshape(-1, grid.shape[axis])
    # the DP-CP axis: dp replica d, CP rank c at d * cp + c
    data = grid.reshape(plan.tp, plan.pp, plan.dp_cp)
    if kind == "dp":
        split = data.reshape(plan.tp, plan.pp, 1, plan.dp_cp)
    elif kind == "ep":
        split = data.reshape(plan.tp, plan.pp, plan.edp, plan.ep)
    elif kind == "edp":
        split = np.swapaxes(data.reshape(plan.tp, plan.pp, plan.edp, plan.ep), 2, 3)
    elif kind == "shard":
        split = data.reshape(plan.tp, plan.pp, plan.dp_cp // plan.shard, plan.shard)
    elif kind == "replica":
        split = np.swapaxes(
            data.reshape(plan.tp, plan.pp, plan.dp_cp // plan.shard, plan.shard), 2, 3
        )
    else:
        raise ValueError(f"unknown group kind {kind!r}; known: {', '.join(GROUP_KINDS)}")
    return split.reshape(-1, split.shape[-1])


def placement_notes(plan: ParallelPlan) -> list[str]:
    """Facts worth reporting about the placement (not errors), e.g. TP across nodes.

    >>> placement_notes(ParallelPlan(tp=16, global_batch=1, gpus_per_node=8))
    ['TP groups of 16 span 2 nodes each (8 GPUs per node): TP traffic crosses the network']
    """
    notes = []
    gpus_per_node = plan.gpus_per_node
    for kind in ("tp", "ep", "cp"):
        if kind == "cp" and plan.cp == 1:
            continue
        nodes = np.sort(group_rows(plan, kind) // gpus_per_node, axis=1)
        span = 1 + int((np.diff(nodes, axis=1) != 0).sum(axis=1).max())
        size = {"tp": plan.tp, "ep": plan.ep, "cp": plan.cp}[kind]
        if span > 1:
            notes.append(
                f"{kind.upper()} groups of {size} span {span} nodes each "
                f"({gpus_per_node} GPUs per node): {kind.upper()} traffic crosses the network"
            )
    return notes
