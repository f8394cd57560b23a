"""Export an executed training step as Chakra execution traces: one trace per rank.

The step's task graph (:mod:`sim.training.graph`) holds replica 0's tasks, with TP ranks
sharing a stage's compute stream; :class:`StepTraces` makes every rank's trace from it
(docs/chakra.md, section 5), placing replica ``k``'s ranks and groups with
:class:`~sim.chakra.layout.JobLayout`:

- a compute task: a ``COMP_NODE`` on every GPU of its stage, ``duration_micros`` the
  simulated seconds rounded to whole microseconds (the exact seconds in ``duration_s``);
  ``is_cpu_op`` on the host's stream (offloaded optimizer);
- each part of a collective task: a ``COMM_COLL_NODE`` on every member of each of its
  groups: ``comm_type``, ``comm_size`` (Chakra's convention: an all-gather by one rank's
  share, sizes in whole bytes), ``pg_name`` (the group's id in the communicator-group
  file; none for the group of every rank);
- a transfer between two GPUs (a pipeline send): ``COMM_SEND_NODE`` on the sender
  (``comm_dst``) and ``COMM_RECV_NODE`` on the receiver (``comm_src``), one tag counter
  per ordered pair; a copy between a GPU and its host (offload): ``MEM_STORE_NODE`` /
  ``MEM_LOAD_NODE`` of ``tensor_size`` bytes on the GPU's rank (``host_copy``);
- dependencies: ``data_deps`` for the graph's, ``ctrl_deps`` for stream order, and, for
  ASTRA-sim (one collective or send at a time per rank), every rank's collectives and
  sends chained in one global order, the simulated start times (ties in dependency
  order): an order no two ranks contradict, so ASTRA-sim cannot deadlock. Those chain-only
  dependencies are listed in ``issue_after`` so an import drops them again.

Node ids are positions in that order (the file is in dependency order). Every node
carries ``task_id`` (the graph's task), ``stream`` / ``stream_name`` where the task has a
stream, and ``comm_part`` for a collective task's second and later parts. Where the graph
gives the analytical executor its contention rules (ZeRO-3 with overlapped reductions: a
stage's gathers and reductions share a NIC, the reductions filling the gathers' gaps, and
every stage's groups are taken to gather at once), the nodes say so for the import:
``nic``, ``fill`` and ``peer_groups`` (ids of the groups, 0 for every rank). TP, CP and EP
communication inside a pass is part of the pass's compute time, as in the graph.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from sim.chakra.codec import known_attr_piece, metadata_frame, node_pieces, node_template
from sim.chakra.groups import comm_groups_json
from sim.chakra.layout import Group, JobLayout, job_layout
from sim.chakra.ops import CHAKRA_TYPES
from sim.chakra.order import dependency_order
from sim.chakra.ranks import check_writable
from sim.chakra.stream import frame
from sim.chakra.trace import Attr, Metadata, Node, Trace, check_trace
from sim.errors import ConfigError
from sim.files import write_atomic
from sim.training.graph.execute import StepRun
from sim.training.graph.task import COLLECTIVE, COMPUTE, Comm, StepGraph
from sim.training.setup import StepSetup
from sim.version import __version__

__all__ = ["ET_VERSION", "GENERATOR", "ExportSummary", "StepTraces", "write_step_traces"]

#: The ``GlobalMetadata`` version written (ASTRA-sim's generators write this one).
ET_VERSION = "0.0.4"
#: ``generator`` metadata attribute of clustersim's exports; its import reads it.
GENERATOR = "clustersim"

_RECV, _SEND, _COLL, _COMP, _STORE, _LOAD = "recv", "send", "coll", "comp", "store", "load"
_NODE_TYPE = {
    _COMP: "COMP_NODE",
    _COLL: "COMM_COLL_NODE",
    _SEND: "COMM_SEND_NODE",
    _RECV: "COMM_RECV_NODE",
    _STORE: "MEM_STORE_NODE",
    _LOAD: "MEM_LOAD_NODE",
}


@dataclass(frozen=True, slots=True)
class _Slot:
    """One node of a replica-0 rank's trace: its task, part, kind and (for communication)
    the replica-0 group, or the peer's GPU."""

    task: int
    part: int
    kind: str
    group: Group = ()
    peer: str = ""


#: A piece of a rank's file (:meth:`StepTraces._role_runs`): bytes, a collective
#: (kind, position, replica-0 group), or a send or receive (kind, peer field, replica-0
#: peer, pieces before and after the peer's).
_Run = bytes | tuple[str, int, Group] | tuple[str, str, str, list[bytes], list[bytes]]


@dataclass
class _Role:
    """A replica-0 rank's trace before peers and groups are placed in a replica."""

    slots: list[_Slot]
    nodes: list[Node]  # template nodes (peers and groups of replica 0, pg_name unset)
    p2p: bool  # has sends or receives (its traces differ in every replica)


@dataclass
class StepTraces:
    """Every rank's Chakra trace of one executed step, made rank by rank on demand.

    Parameters
    ----------
    setup : StepSetup
        The resolved scenario the step ran.
    run : StepRun
        The executed graph (its tasks' start and end times).
    info : dict of str to str or float
        Provenance for the metadata (``scenario``, ``topology``, ``profile``, ...): strings
        as ``string_val``, numbers as ``double_val``.

    Attributes
    ----------
    layout : JobLayout
    metadata : Metadata
        The ``GlobalMetadata`` of every rank (the same for all).
    groups : dict of str to tuple of int
        Communicator groups by id (``"1"``, ``"2"``, ...), member ranks ascending.
    dropped_deps : int
        Dependencies on another rank's task that has no node on the rank (none in the
        graphs clustersim builds; counted, never silently).
    """

    setup: StepSetup
    run: StepRun
    info: dict[str, str | float]
    layout: JobLayout = field(init=False)
    metadata: Metadata = field(init=False)
    groups: dict[str, tuple[int, ...]] = field(init=False)
    dropped_deps: int = field(init=False, default=0)
    _roles: dict[int, _Role] = field(init=False)
    _pg: dict[Group, str] = field(init=False)
    _placed: dict[tuple[int, int], Group] = field(init=False)
    _colls: dict[tuple[int, int, str | None], Node] = field(init=False)
    _frames: dict[int, bytes] = field(init=False, default_factory=dict)  # by id(): nodes kept
    _runs: dict[int, list[_Run]] = field(init=False, default_factory=dict)
    _members: dict[tuple[int, int], tuple[frozenset[str], str | None]] = field(
        init=False, default_factory=dict
    )  # a placed group's members and id, by (id(replica-0 group), replica)

    def __post_init__(self) -> None:
        self.layout = job_layout(self.setup)
        graph = self.run.graph
        order = _task_order(graph, self.run.start)
        slots = _role_slots(graph, self.layout, self.setup.plan.tp)
        mine = {r0: sorted(slots[r0], key=lambda s: (order[s.task], s.part, s.kind == _RECV))
                for r0 in self.layout.roles}  # fmt: skip
        self._placed, self._colls = {}, {}
        self._pg = {}
        self._number_groups(mine)
        self._roles = {}
        intern: dict[Node, Node] = {}
        for r0 in self.layout.roles:
            self._roles[r0] = self._role(r0, mine[r0], intern)
        self.groups = {pg: tuple(self.layout.rank[g] for g in grp) for grp, pg in self._pg.items()}
        axes = tuple(v for axis in self.layout.replica_axes for v in axis)
        self.metadata = Metadata(
            ET_VERSION,
            (
                Attr("generator", "string_val", f"{GENERATOR} {__version__}"),
                *(Attr(k, "string_val" if isinstance(v, str) else "double_val", v)
                  for k, v in self.info.items()),
                Attr("replica_axes", "int64_list", axes,
                     "data-parallel and context-parallel replicas: size, rank stride of each; "
                     "replica k's ranks are replica 0's plus its offset, their traces the same "
                     "up to that map"),
            ),
        )  # fmt: skip

    @property
    def num_ranks(self) -> int:
        """Ranks of the job (one trace each)."""
        return self.layout.num_ranks

    def _role(self, r0: int, slots: list[_Slot], intern: dict[Node, Node]) -> _Role:
        """The template nodes of replica-0 rank ``r0`` (ids are positions in ``slots``)."""
        g = self.run.graph
        where: dict[int, list[int]] = defaultdict(list)
        for pos, s in enumerate(slots):
            where[s.task].append(pos)
        last_on: dict[int, int] = {}
        chain = -1
        tags: dict[tuple[str, str], int] = defaultdict(int)
        gpu = self.layout.gpus[r0]
        nodes: list[Node] = []
        for pos, s in enumerate(slots):
            i = s.task
            data: list[int] = []
            if s.kind != _RECV:
                for d in g.deps[i]:
                    local = where.get(d)
                    if local is None:
                        self.dropped_deps += g.kind[i] == COMPUTE
                    else:
                        assert all(p < pos for p in local), (i, d)
                        data += local
            ctrl: list[int] = []
            stream = g.stream_of[i]
            if stream >= 0:
                prev = last_on.get(stream)
                if prev is not None and prev not in data:
                    ctrl.append(prev)
                last_on[stream] = pos
            after: tuple[int, ...] = ()
            if s.kind in (_COLL, _SEND):
                if chain >= 0 and chain not in data and chain not in ctrl:
                    ctrl.append(chain)
                    after = (chain,)
                chain = pos
            tag = None
            if s.kind in (_SEND, _RECV):
                pair = (s.peer, gpu) if s.kind == _RECV else (gpu, s.peer)
                tag = tags[pair]
                tags[pair] += 1
            node = self._template(pos, s, tuple(data), tuple(ctrl), after, tag)
            nodes.append(intern.setdefault(node, node))
        return _Role(slots, nodes, any(s.kind in (_SEND, _RECV) for s in slots))

    def _template(self, pos: int, s: _Slot, data: tuple[int, ...], ctrl: tuple[int, ...],
                  after: tuple[int, ...], tag: int | None) -> Node:  # fmt: skip
        g, run, i = self.run.graph, self.run, s.task
        stream = g.stream_of[i]
        attrs = [Attr("task_id", "uint64_val", i)]
        if s.part:
            attrs.append(Attr("comm_part", "int64_val", s.part))
        if stream >= 0:
            attrs += [Attr("stream", "int64_val", stream),
                      Attr("stream_name", "string_val", g.streams[stream])]  # fmt: skip
        seconds = g.duration_s[i] if s.kind == _COMP else run.end[i] - run.start[i]
        if s.kind == _COMP:
            attrs.append(Attr("duration_s", "double_val", float(seconds)))
        if after:
            attrs.append(Attr("issue_after", "uint64_list", after))
        if g.nic[i] >= 0:  # the analytical executor's NIC sharing (ZeRO-3 with overlap)
            attrs.append(Attr("nic", "int64_val", g.nic[i]))
            if g.fill[i]:
                attrs.append(Attr("fill", "bool_val", True))
        fields: dict[str, object] = {}
        if s.kind == _COMP:
            fields["is_cpu_op"] = stream >= 0 and g.streams[stream].endswith(".cpu")
        else:
            fields["is_cpu_op"] = False
        comm = g.comm[i][s.part] if g.comm[i] else None
        if s.kind == _COLL:
            assert comm is not None
            fields.update(comm_type=CHAKRA_TYPES.get(comm.op), comm_bytes=_comm_size(comm, s))
            if comm.peers:
                ids = tuple(int(self._pg.get(self._group(p, 0), "0")) for p in comm.peers)
                attrs.append(Attr("peer_groups", "int64_list", ids))
        elif s.kind in (_SEND, _RECV):
            assert comm is not None and tag is not None
            fields.update(comm_bytes=round(comm.nbytes), comm_tag=tag)
            peer = self.layout.rank[s.peer]
            fields["comm_dst" if s.kind == _SEND else "comm_src"] = peer
        elif s.kind in (_STORE, _LOAD):
            assert comm is not None
            attrs += [Attr("tensor_size", "uint64_val", round(comm.nbytes)),
                      Attr("host_copy", "bool_val", True)]  # fmt: skip
        if s.kind == _COLL and fields["comm_type"] is None:
            raise ConfigError(
                f"chakra export: task {i} ({g.label[i]}) is a {comm.op if comm else '?'}, "
                f"which Chakra has no collective type for"
            )
        return Node(
            pos, _name(g, i), _NODE_TYPE[s.kind], data_deps=data, ctrl_deps=ctrl,
            start_time_micros=round(run.start[i] * 1e6), duration_micros=round(seconds * 1e6),
            attrs=tuple(attrs), **fields,  # type: ignore[arg-type]
        )  # fmt: skip

    def _number_groups(self, slots: dict[int, list[_Slot]]) -> None:
        """Ids 1, 2, ... for the job's groups in order of first use (ranks ascending), then
        for the groups the analytical executor takes to run alongside (``peers``), except
        the group of every rank (it needs no id)."""
        n = self.num_ranks
        used = {r0: list({id(s.group): s.group for s in mine if s.kind == _COLL}.values())
                for r0, mine in slots.items()}  # fmt: skip
        for r in range(n):
            r0, k = self.role_of(r)
            for group in used[r0]:
                grp = self._group(group, k)
                if len(grp) < n and grp not in self._pg:
                    self._pg[grp] = str(len(self._pg) + 1)
        for parts in self.run.graph.comm:
            for comm in parts:
                for peer in comm.peers:
                    grp = self._group(peer, 0)
                    if len(grp) < n and grp not in self._pg:
                        self._pg[grp] = str(len(self._pg) + 1)

    def _group(self, group: Group, k: int) -> Group:
        key = (id(group), k)
        hit = self._placed.get(key)
        if hit is None:
            placed = self.layout.group_in(group, k)
            hit = self._placed[key] = tuple(sorted(placed, key=self.layout.rank.__getitem__))
        return hit

    def node_count(self, r0: int) -> int:
        """Nodes in the traces of replica-0 rank ``r0`` and its replicas."""
        return len(self._roles[r0].slots)

    def role_of(self, rank: int) -> tuple[int, int]:
        """(replica-0 rank, replica) of ``rank``."""
        lay = self.layout
        for k, off in enumerate(lay.offsets):
            if rank - off in lay.stage_of:
                return rank - off, k
        raise AssertionError(f"rank {rank} is in no replica")  # pragma: no cover

    def trace(self, rank: int) -> Trace:
        """Rank ``rank``'s trace (its nodes shared with every rank where they are equal)."""
        nodes = [replace(node, **{f: peer}) if f else node  # type: ignore[arg-type]
                 for node, f, peer in self._nodes(rank)]  # fmt: skip
        return Trace(self.metadata, tuple(nodes))

    def _nodes(self, rank: int) -> Iterator[tuple[Node, str, int]]:
        """Rank ``rank``'s nodes; for a send or receive placed in another replica, its
        template node with the peer's field and rank (else ``""`` and -1)."""
        r0, k = self.role_of(rank)
        role = self._roles[r0]
        lay = self.layout
        gpu = lay.gpus[rank]
        for pos, s in enumerate(role.slots):
            node = role.nodes[pos]
            if s.kind == _COLL:
                yield self._coll_node(r0, pos, s.group, k, gpu), "", -1
            elif s.kind in (_SEND, _RECV) and k:
                peer = lay.rank[s.peer] + lay.offsets[k]
                field_name = "comm_dst" if s.kind == _SEND else "comm_src"
                yield node, field_name, peer
            else:
                yield node, "", -1

    def _coll_node(self, r0: int, pos: int, group: Group, k: int, gpu: str) -> Node:
        """Replica-0 rank ``r0``'s collective node ``pos`` placed on ``gpu`` of replica
        ``k`` (its ``pg_name`` the placed group's id; one node per distinct group)."""
        at = (id(group), k)
        placed = self._members.get(at)
        if placed is None:
            grp = self._group(group, k)
            placed = self._members[at] = (frozenset(grp), self._pg.get(grp))
        if gpu not in placed[0]:
            raise AssertionError(f"{gpu} is not in its group")
        pg = placed[1]
        key = (r0, pos, pg)
        hit = self._colls.get(key)
        if hit is None:
            hit = self._colls[key] = replace(self._roles[r0].nodes[pos], pg_name=pg)
        return hit

    def key(self, rank: int) -> tuple[int, ...] | None:
        """Equal for ranks whose traces are equal (None for a rank with sends or receives:
        its peers are its own)."""
        r0, _ = self.role_of(rank)
        if self._roles[r0].p2p:
            return None
        return tuple(id(node) for node, _, _ in self._nodes(rank))

    def traces(self) -> list[Trace]:
        """Every rank's trace; ranks with equal traces share one :class:`Trace` object
        (for jobs that fit in memory: :func:`write_step_traces` writes rank by rank)."""
        shared: dict[tuple[int, ...], Trace] = {}
        out = []
        for rank in range(self.num_ranks):
            key = self.key(rank)
            trace = shared.get(key) if key is not None else None
            if trace is None:
                trace = self.trace(rank)
                if key is not None:
                    shared[key] = trace
            out.append(trace)
        return out

    def encoded(self, rank: int, pieces: dict[object, bytes]) -> bytes:
        """Rank ``rank``'s file bytes: what :func:`~sim.chakra.codec.encode_trace` gives for
        :meth:`trace`, made from the encoded pieces of the nodes the ranks share (a send
        or receive in another replica swaps one piece: its peer)."""
        r0, k = self.role_of(rank)
        runs = self._runs.get(r0)
        if runs is None:
            runs = self._runs[r0] = self._role_runs(r0, pieces)
        lay = self.layout
        out: list[bytes] = []
        for item in runs:
            if isinstance(item, bytes):
                out.append(item)
            elif len(item) == 3:
                _, pos, group = item
                node = self._coll_node(r0, pos, group, k, lay.gpus[rank])
                hit = self._frames.get(id(node))
                if hit is None:
                    hit = self._frames[id(node)] = frame(b"".join(node_pieces(node, pieces)))
                out.append(hit)
            else:
                _, field_name, peer, head, tail = item
                piece = known_attr_piece(field_name, lay.rank[peer] + lay.offsets[k], pieces)
                out.append(frame(b"".join([*head, piece, *tail])))
        return b"".join(out)

    def _role_runs(self, r0: int, pieces: dict[object, bytes]) -> list[_Run]:
        """Replica-0 rank ``r0``'s file as pieces: bytes of the nodes every replica shares
        (runs joined), a collective (its group is placed per replica), or a send or
        receive (the encoded node around its peer's attribute)."""
        role = self._roles[r0]
        out: list[_Run] = [metadata_frame(self.metadata, "metadata")]
        static: list[bytes] = []
        for pos, (s, node) in enumerate(zip(role.slots, role.nodes, strict=True)):
            if s.kind not in (_COLL, _SEND, _RECV):
                static.append(frame(b"".join(node_pieces(node, pieces))))
                continue
            if static:
                out.append(b"".join(static))
                static = []
            if s.kind == _COLL:
                out.append((_COLL, pos, s.group))
                continue
            field_name = "comm_dst" if s.kind == _SEND else "comm_src"
            parts, where = node_template(node, (field_name,), pieces)
            at = where[field_name]
            out.append((s.kind, field_name, s.peer, parts[:at], parts[at + 1 :]))
        if static:
            out.append(b"".join(static))
        return out


def _comm_size(comm: Comm, s: _Slot) -> int:
    """``comm_size`` of a collective part on a group of ``len(s.group)`` ranks: whole bytes,
    an all-gather by one rank's share."""
    n = max(1, len(s.group))
    if comm.op == "all_gather":
        return round(comm.nbytes / n)
    return round(comm.nbytes)


def _name(g: StepGraph, i: int) -> str:
    """A node's name: the task's label, with the pass for compute (``F mb3 chunk0``)."""
    pid = g.pass_of[i]
    if pid < 0 or g.label[i] != "pass":
        return g.label[i] or ("compute" if g.kind[i] == COMPUTE else "comm")
    p = g.passes[pid]
    return f"{p.kind} mb{p.mb} chunk{p.chunk} stage{p.stage}"


def _task_order(g: StepGraph, start: list[float]) -> list[tuple[float, int]]:
    """Each task's place in one global order: its start time, ties in dependency order."""
    topo = [0] * len(g)
    order = dependency_order(g)
    assert len(order) == len(g), "the step graph has a cycle"
    for n, i in enumerate(order):
        topo[i] = n
    return [(start[i], topo[i]) for i in range(len(g))]


def _role_slots(g: StepGraph, lay: JobLayout, tp: int) -> dict[int, list[_Slot]]:
    """Every replica-0 rank's slots: its stage's compute tasks, and the collective parts
    and transfers it takes part in."""
    per_stage: dict[int, list[_Slot]] = defaultdict(list)
    for i, kind in enumerate(g.kind):
        if kind == COMPUTE:
            if g.stage[i] < 0:
                raise AssertionError(f"compute task {i} ({g.label[i]}) has no stage")
            per_stage[g.stage[i]].append(_Slot(i, 0, _COMP))
    out: dict[int, list[_Slot]] = {r: [] for r in lay.roles}
    for i, kind in enumerate(g.kind):
        if kind == COMPUTE:
            continue
        added = 0
        for p, comm in enumerate(g.comm[i]):
            groups = lay.tp_complete(comm.groups, comm, tp)
            if kind == COLLECTIVE:
                added += _collective_slots(out, lay, i, p, groups)
            else:
                added += _transfer_slots(out, lay, i, p, groups)
        if not added and g.stage[i] >= 0:
            # nothing moves (no parts, or groups of one GPU): a zero-time node on its
            # stage's GPUs keeps the order and dependencies it stands in
            per_stage[g.stage[i]].append(_Slot(i, 0, _COMP))
    for r in lay.roles:
        out[r] += per_stage[lay.stage_of[r]]
    return out


def _collective_slots(out: dict[int, list[_Slot]], lay: JobLayout, i: int, p: int,
                      groups: tuple[Group, ...]) -> int:  # fmt: skip
    seen: set[int] = set()
    for grp in groups:
        if len(grp) < 2:
            continue
        for gpu in grp:
            if lay.in_replica0(gpu):
                r = lay.rank[gpu]
                if r in seen:
                    raise ConfigError(
                        f"chakra export: rank {r} is in two groups of one collective (task {i})"
                    )
                seen.add(r)
                out[r].append(_Slot(i, p, _COLL, grp))
    return len(seen)


def _transfer_slots(out: dict[int, list[_Slot]], lay: JobLayout, i: int, p: int,
                    pairs: tuple[Group, ...]) -> int:  # fmt: skip
    added = 0
    for src, dst in pairs:
        if src == dst:
            continue
        a, b = src in lay.rank, dst in lay.rank
        if a and b:
            if not (lay.in_replica0(src) and lay.in_replica0(dst)):
                raise ConfigError(
                    f"chakra export: a transfer {src} -> {dst} (task {i}) leaves replica 0"
                )
            out[lay.rank[src]].append(_Slot(i, p, _SEND, peer=dst))
            out[lay.rank[dst]].append(_Slot(i, p, _RECV, peer=src))
        elif a:
            out[lay.rank[src]].append(_Slot(i, p, _STORE, peer=dst))
        elif b:
            out[lay.rank[dst]].append(_Slot(i, p, _LOAD, peer=src))
        added += a or b
    return added


@dataclass(frozen=True)
class ExportSummary:
    """What :func:`write_step_traces` wrote.

    Attributes
    ----------
    prefix : str
        ``DIR/NAME``: rank ``r``'s file is ``PREFIX.r.et``.
    groups_path : str
        The communicator-group file (``PREFIX.groups.json``, ASTRA-sim's
        ``--comm-group-configuration``).
    ranks, distinct, nodes, groups : int
        Files written, distinct traces among them (ranks with equal traces share one
        trace, encoded once), nodes over all files, communicator groups.
    bytes : int
        Bytes over all files.
    """

    prefix: str
    groups_path: str
    ranks: int
    distinct: int
    nodes: int
    groups: int
    bytes: int


def write_step_traces(traces: StepTraces, prefix: str) -> ExportSummary:
    """Write every rank's trace as ``PREFIX.RANK.et`` and the groups as ``PREFIX.groups.json``.

    Ranks are written one trace at a time (a 16,384-GPU job never holds every trace);
    ranks with equal traces share one, encoded once; the pieces of nodes that repeat across
    ranks are encoded once.

    Raises
    ------
    ConfigError
        A folder that does not exist, or rank files ``PREFIX.<r>.et`` with ``r >= n``
        already there (checked before anything is written).
    MissingExtraError
        protobuf is not installed.
    """
    n = traces.num_ranks
    check_writable(prefix, n)
    pieces: dict[object, bytes] = {}
    shared: dict[tuple[int, ...], bytes] = {}
    checked: set[int] = set()
    nodes = size = distinct = 0
    for rank in range(n):
        r0, _ = traces.role_of(rank)
        if r0 not in checked:  # every rank of a replica-0 rank's shape has its ids and deps
            check_trace(traces.trace(rank), f"{prefix}.{rank}.et")
            checked.add(r0)
        key = traces.key(rank)
        blob = shared.get(key) if key is not None else None
        if blob is None:
            blob = traces.encoded(rank, pieces)
            if key is not None:
                shared[key] = blob
        write_atomic(f"{prefix}.{rank}.et", blob, "Chakra ET file")
        nodes += traces.node_count(r0)
        size += len(blob)
        distinct += key is None
    distinct += len(shared)
    groups_path = f"{prefix}.groups.json"
    write_atomic(groups_path, comm_groups_json(traces.groups) + "\n", "communicator-group file")
    return ExportSummary(prefix, groups_path, n, distinct, nodes, len(traces.groups), size)
