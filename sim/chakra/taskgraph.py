"""A Chakra trace set as a task graph that clustersim's executors run (docs/chakra.md, §5).

Rank ``r`` runs on GPU ``gpus[r]``. Per node:

- ``COMP_NODE``: a compute task for ``duration_s`` (clustersim's exports) or
  ``duration_micros`` (replayed, as ASTRA-sim does without its roofline model);
- matched ``COMM_COLL_NODE``s (:func:`sim.chakra.matching.match_collectives`): one
  collective task, which starts when every member's node is ready and ends on all of them
  together. The nodes of clustersim's exports with one ``task_id`` (one collective issued
  in several groups, e.g. every TP rank's DP group) are one task again, ``comm_part`` its
  parts;
- a matched send and receive: one transfer task from the sender's GPU to the receiver's
  (clustersim's exports: the sends of one ``task_id`` together), started when the send's
  dependencies are met, with NCCL's send/recv software latency; the receive is a
  zero-time task after it and after its own dependencies;
- ``MEM_STORE_NODE`` / ``MEM_LOAD_NODE`` that clustersim exported for offload copies
  (``host_copy``): a transfer of ``tensor_size`` bytes between the GPU and its server's
  host; any other memory node: a zero-time task, counted (clustersim has no remote-memory
  model);
- ``METADATA_NODE``, ``INVALID_NODE``: zero-time tasks that keep the order.

Dependencies are ``data_deps`` and ``ctrl_deps`` (both, as ASTRA-sim's feeder), less the
``issue_after`` chain a clustersim export adds for ASTRA-sim. Streams: a clustersim export
names them (``stream_name``: the step graph's streams, on each GPU); any other trace gets
per GPU a ``compute``, a ``comm`` (collectives and sends, one at a time, as ASTRA-sim's
hardware resource) and a ``cpu`` stream, each running its nodes in dependency order (ties
in file order, where ASTRA-sim takes whichever is ready first). A task spanning several
GPUs (a collective) waits for the task before it on each member's stream and holds up the
task after it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sim.chakra.export import GENERATOR
from sim.chakra.matching import Collective, PointToPoint, match_collectives, match_p2p
from sim.chakra.ops import CLUSTERSIM_OPS, op_bytes
from sim.chakra.order import dependency_order
from sim.chakra.ranks import TraceSet
from sim.chakra.trace import Node, node_label, topological_order
from sim.errors import ConfigError
from sim.training.graph.task import COLLECTIVE, COMPUTE, TRANSFER, Comm, StepGraph

__all__ = ["TraceGraph", "trace_graph"]

_UNSUPPORTED = ("GATHER", "SCATTER", "REDUCE_SCATTER_BLOCK")
_COUNTED = {"coll": "collective", "send": "transfer", "copy": "host_copy"}
_Key = tuple[object, ...]


@dataclass
class TraceGraph:
    """A trace set's task graph and what it was made of.

    Attributes
    ----------
    graph : StepGraph
    rank_tasks : dict of int to list of int
        The tasks each simulated rank takes part in.
    counts : dict of str to int
        Tasks by what they are (``compute``, ``collective``, ``transfer``, ``receive``,
        ``host_copy``, ``memory_not_simulated``, ``other``) and the bytes of the memory
        nodes not simulated (``memory_not_simulated_bytes``).
    notes : list of str
        Assumptions the run rests on.
    """

    graph: StepGraph
    rank_tasks: dict[int, list[int]]
    counts: dict[str, int]
    notes: list[str] = field(default_factory=list)


@dataclass
class _Merged:
    """A task several nodes make (a collective's members, one task's sends or copies)."""

    kind: int
    label: str
    parts: dict[tuple[int, str, int], list[tuple[str, ...]]] = field(default_factory=dict)
    peers: dict[tuple[int, str, int], tuple[tuple[str, ...], ...]] = field(default_factory=dict)
    nic: int = -1
    fill: bool = False


def _attr(node: Node, name: str) -> object:
    for a in node.attrs:
        if a.name == name:
            return a.value
    return None


def _nic(node: Node) -> tuple[int, bool]:
    """A clustersim export's NIC-sharing resource and gap filling of ``node`` (-1: none)."""
    nic = _attr(node, "nic")
    return (nic, _attr(node, "fill") is True) if isinstance(nic, int) else (-1, False)


def _is_clustersim(traces: TraceSet, ranks: Sequence[int]) -> bool:
    """Whether the (first simulated rank's) metadata names clustersim as its generator."""
    meta = traces.traces[ranks[0]].metadata if ranks else None
    gen = next((a.value for a in meta.attrs if a.name == "generator"), None) if meta else None
    return isinstance(gen, str) and gen.startswith(GENERATOR)


class _Builder:
    """State while building (private: :func:`trace_graph` is the interface)."""

    def __init__(self, traces: TraceSet, gpus: Sequence[str], ranks: Sequence[int],
                 groups: dict[str, tuple[int, ...]], host_of: Callable[[str], str],
                 latency_s: float) -> None:  # fmt: skip
        self.traces, self.gpus, self.ranks, self.groups = traces, gpus, ranks, groups
        self.host_of, self.latency_s = host_of, latency_s
        self.ours = _is_clustersim(traces, ranks)
        self.g = StepGraph()
        self.key_of: dict[tuple[int, int], _Key] = {}  # (rank, node id) -> merged task key
        self.recv_of: dict[tuple[int, int], _Key] = {}  # a receive -> its transfer's key
        self.merged: dict[_Key, _Merged] = {}
        self.task: dict[_Key, int] = {}
        self.task_of: dict[tuple[int, int], int] = {}
        self.rank_tasks: dict[int, list[int]] = {r: [] for r in ranks}
        self.counts: dict[str, int] = defaultdict(int)
        self.notes: list[str] = []
        self._peer_groups: dict[object, tuple[tuple[str, ...], ...]] = {}

    # -- what merges ---------------------------------------------------------------------
    def collectives(self, colls: Sequence[Collective]) -> None:
        """Key each collective's nodes: by ``task_id`` in clustersim's exports, else alone."""
        rooted = False
        for c in colls:
            own = [(r, i) for r, i in zip(c.ranks, c.node_ids, strict=True) if i >= 0]
            if c.comm_type in _UNSUPPORTED:
                raise ConfigError(
                    f"{self.traces.path(own[0][0])}: {c.comm_type} has no clustersim "
                    f"collective (supported: {', '.join([*CLUSTERSIM_OPS, 'BARRIER'])})"
                )
            if c.comm_type == "BARRIER":
                op, nbytes = "all_reduce", 0  # a synchronisation: nothing moves
            else:
                op, nbytes = (
                    CLUSTERSIM_OPS[c.comm_type],
                    op_bytes(c.comm_type, c.comm_bytes, len(c.ranks)),
                )
                rooted = rooted or op in ("broadcast", "reduce")
            first = self.node(*own[0])
            tid = _attr(first, "task_id") if self.ours else None
            key: _Key = ("coll", tid) if tid is not None else ("coll", c.group, c.index)
            part = _attr(first, "comm_part") if tid is not None else 0
            part = part if isinstance(part, int) else 0
            merged = self.merged.setdefault(key, _Merged(COLLECTIVE, first.name))
            group = tuple(self.gpus[m] for m in c.ranks)
            groups = merged.parts.get((part, op, nbytes))
            if groups is None:
                groups = merged.parts[(part, op, nbytes)] = []
                if tid is not None:  # a clustersim export: the executor's contention hints
                    merged.peers[(part, op, nbytes)] = self._peers(first)
                    merged.nic, merged.fill = _nic(first)
            groups.append(group)
            for ri in own:
                self.key_of[ri] = key
        if rooted:
            self.notes.append(
                "broadcast and reduce are rooted at their group's lowest rank (Chakra has no root)"
            )

    def transfers(self, p2ps: Sequence[PointToPoint]) -> None:
        """Key each send: by ``task_id`` and size in clustersim's exports, else alone."""
        for p in p2ps:
            send = self.node(p.src, p.send_id)
            tid = _attr(send, "task_id") if self.ours else None
            key: _Key = (
                ("send", tid, p.comm_bytes) if tid is not None
                else ("send", p.src, p.dst, p.tag, p.index)
            )  # fmt: skip
            merged = self.merged.setdefault(key, _Merged(TRANSFER, send.name))
            merged.parts.setdefault((0, "send", p.comm_bytes), []).append(
                (self.gpus[p.src], self.gpus[p.dst])
            )
            self.key_of[(p.src, p.send_id)] = key
            self.recv_of[(p.dst, p.recv_id)] = key

    def host_copies(self) -> None:
        """Key clustersim's offload copies (``host_copy`` memory nodes) by ``task_id``."""
        if not self.ours:
            return
        for r in self.ranks:
            for node in self.traces.traces[r].nodes:
                if node.type not in ("MEM_STORE_NODE", "MEM_LOAD_NODE"):
                    continue
                tid, size = _attr(node, "task_id"), _attr(node, "tensor_size")
                if _attr(node, "host_copy") is not True or tid is None or not isinstance(size, int):
                    continue
                key: _Key = ("copy", tid, size)
                gpu = self.gpus[r]
                pair = (gpu, self.host_of(gpu))
                merged = self.merged.setdefault(key, _Merged(TRANSFER, node.name))
                merged.parts.setdefault((0, "copy", size), []).append(
                    pair if node.type == "MEM_STORE_NODE" else pair[::-1]
                )
                self.key_of[(r, node.id)] = key

    def _peers(self, node: Node) -> tuple[tuple[str, ...], ...]:
        """The groups a clustersim export's ``peer_groups`` names (0: every rank)."""
        ids = _attr(node, "peer_groups")
        if not isinstance(ids, tuple):
            return ()
        hit = self._peer_groups.get(ids)
        if hit is None:
            out = []
            for i in ids:
                members = self.groups.get(str(i)) if i else range(self.traces.num_ranks)
                if members is None:
                    raise ConfigError(
                        f"{node_label(node)}: peer_groups: {i} is not a group of the file"
                    )
                out.append(tuple(self.gpus[m] for m in members))
            hit = self._peer_groups[ids] = tuple(out)
        return hit

    def node(self, rank: int, node_id: int) -> Node:
        return self._index[rank][node_id]

    # -- tasks ---------------------------------------------------------------------------
    def build(self) -> None:
        """One task per node (or per merged key), in each rank's dependency order."""
        last: dict[tuple[int, str], tuple[int, bool]] = {}  # stream -> (task, on it)
        order = {r: topological_order(self.traces.traces[r], self.traces.path(r))
                 for r in self.ranks}  # fmt: skip
        for r in self.ranks:
            nodes = self.traces.traces[r].nodes
            for i in order[r]:
                node = nodes[i]
                t, merged = self._task(r, node)
                self.task_of[(r, node.id)] = t
                self.rank_tasks[r].append(t)
                sname = self._stream(node)
                if sname is not None:
                    prev = last.get((r, sname))
                    if prev is not None and prev[0] != t and (merged or not prev[1]):
                        self.g.deps[t].append(prev[0])
                    last[(r, sname)] = (t, not merged)
        for r in self.ranks:
            for node in self.traces.traces[r].nodes:
                self._deps(r, node)
        for key, t in self.task.items():
            self.g.comm[t] = self._parts(self.merged[key])
        for deps in self.g.deps:
            deps[:] = dict.fromkeys(deps)

    def _task(self, r: int, node: Node) -> tuple[int, bool]:
        """The task of ``node`` on rank ``r`` (created on first sight) and whether it
        spans GPUs (a merged task, on no stream)."""
        g = self.g
        key = self.key_of.get((r, node.id))
        if key is not None:
            t = self.task.get(key)
            if t is None:
                m = self.merged[key]
                t = self.task[key] = g.add(m.kind, -1, [], label=m.label, nic=m.nic, fill=m.fill)
                self.counts[_COUNTED[str(key[0])]] += 1
            return t, True
        if node.type == "COMP_NODE":
            sname = self._stream(node)
            stream = g.stream(f"{self.gpus[r]}.{sname}") if sname is not None else -1
            self.counts["compute"] += 1
            nic, fill = _nic(node) if self.ours else (-1, False)
            seconds = self._seconds(node)
            return g.add(COMPUTE, stream, [], duration_s=seconds, label=node.name, nic=nic,
                         fill=fill), False  # fmt: skip
        if node.type == "COMM_RECV_NODE":
            self.counts["receive"] += 1
        elif node.type in ("MEM_LOAD_NODE", "MEM_STORE_NODE"):
            self.counts["memory_not_simulated"] += 1
            size = _attr(node, "tensor_size")
            self.counts["memory_not_simulated_bytes"] += size if isinstance(size, int) else 0
        else:
            self.counts["other"] += 1
        return g.add(COMPUTE, -1, [], label=node.name or node.type.lower()), False

    def _seconds(self, node: Node) -> float:
        exact = _attr(node, "duration_s") if self.ours else None
        return float(exact) if isinstance(exact, float) else node.duration_s

    def _stream(self, node: Node) -> str | None:
        if self.ours:
            name = _attr(node, "stream_name")
            return name if isinstance(name, str) else None
        if node.type == "COMP_NODE":
            return "cpu" if node.is_cpu_op else "compute"
        if node.type in ("COMM_COLL_NODE", "COMM_SEND_NODE"):
            return "comm"
        return None

    def _deps(self, r: int, node: Node) -> None:
        t = self.task_of[(r, node.id)]
        skip = _attr(node, "issue_after") if self.ours else None
        chain = set(skip) if isinstance(skip, tuple) else set()
        deps = self.g.deps[t]
        for d in node.deps:
            if d not in chain:
                td = self.task_of[(r, d)]
                if td != t:
                    deps.append(td)
        key = self.recv_of.get((r, node.id))
        if key is not None:
            deps.append(self.task[key])

    def _parts(self, m: _Merged) -> tuple[Comm, ...]:
        out = []
        for (part, op, nbytes), groups in sorted(m.parts.items()):
            if op == "send":
                out.append(Comm("send", nbytes, tuple(groups), latency_s=self.latency_s,
                                tag="chakra send"))  # fmt: skip
            elif op == "copy":
                out.append(Comm("send", nbytes, tuple(groups), tag="chakra host copy"))
            else:
                peers = m.peers.get((part, op, nbytes), ())
                out.append(Comm(op, nbytes, tuple(groups), peers, tag=f"chakra {op}"))
        return tuple(out)

    def index(self) -> None:
        self._index = {r: {n.id: n for n in self.traces.traces[r].nodes} for r in self.ranks}

    def check_acyclic(self) -> None:
        """Refuse a graph whose tasks wait for each other in a circle (traces whose
        collectives are issued in orders the ranks contradict)."""
        g = self.g
        order = dependency_order(g)
        done = len(order)
        if done == len(g):
            return
        came = set(order)
        stuck = next(i for i in range(len(g)) if i not in came)
        where = next((r, nid) for (r, nid), t in self.task_of.items() if t == stuck)
        raise ConfigError(
            f"{self.traces.path(where[0])}: {node_label(self.node(*where))} can never start: "
            f"{len(g) - done} tasks wait for each other in a circle (collectives or sends "
            "issued in an order the ranks contradict)"
        )


def trace_graph(
    traces: TraceSet,
    gpus: Sequence[str],
    groups: dict[str, tuple[int, ...]] | None,
    *,
    ranks: Sequence[int] | None = None,
    host_of: Callable[[str], str],
    latency_s: float,
) -> TraceGraph:
    """The task graph of ``traces`` with rank ``r`` on GPU ``gpus[r]`` (module docstring).

    Parameters
    ----------
    traces : TraceSet
    gpus : sequence of str
        GPU node names, at least one per rank.
    groups : dict, optional
        Communicator groups by ``pg_name`` (else inferred from the ranks that name them).
    ranks : sequence of int, optional
        The ranks to simulate (default all): a folded trace set's replica 0
        (:mod:`sim.chakra.fold`); collectives keep their whole groups.
    host_of : callable
        The host node of a GPU's server (for offload copies).
    latency_s : float
        Software latency of a send/recv (NCCL's), seconds.

    Raises
    ------
    ConfigError
        Collectives or sends that do not match (:mod:`sim.chakra.matching`), a collective
        type clustersim has none of, or ranks whose orders deadlock.
    """
    own = list(range(traces.num_ranks)) if ranks is None else sorted(ranks)
    b = _Builder(traces, gpus, own, groups or {}, host_of, latency_s)
    b.index()
    b.collectives(match_collectives(traces, groups, own))
    b.transfers(match_p2p(traces, own))
    b.host_copies()
    b.build()
    b.check_acyclic()
    if b.counts.get("memory_not_simulated"):
        b.notes.append(
            f"{b.counts['memory_not_simulated']} memory nodes "
            f"({b.counts['memory_not_simulated_bytes']:,} B) take no time: clustersim has no "
            "remote-memory model"
        )
    return TraceGraph(b.g, b.rank_tasks, dict(b.counts), b.notes)
