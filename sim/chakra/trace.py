"""One rank's Chakra execution trace in memory: plain frozen dataclasses, no protobuf.

A :class:`Trace` is what one ET file holds: its :class:`Metadata` (the ``GlobalMetadata``
message) and its :class:`Node` list in file order. The attributes both simulators read
(``is_cpu_op``, ``comm_type``, ``comm_size``, ``comm_src``, ``comm_dst``, ``comm_tag``,
``pg_name``) are fields of :class:`Node`; every other attribute is kept, in order, as an
:class:`Attr`. Durations stay in the format's integer microseconds (``duration_micros``,
exact) with :attr:`Node.duration_s` in seconds; sizes are bytes.

:func:`check_trace` refuses what no executor can run (duplicate node ids, a dependency on a
node the file does not have, a dependency cycle, a negative size), one line each naming the
file, the node and the field; :func:`topological_order` is the order in which
:mod:`sim.chakra.matching` counts a rank's collectives.

>>> a = Node(1, "fwd", "COMP_NODE", duration_micros=250)
>>> b = Node(2, "grad", "COMM_COLL_NODE", data_deps=(1,), comm_type="ALL_REDUCE", comm_bytes=64)
>>> t = Trace(Metadata("0.0.4"), (b, a))
>>> check_trace(t, "x.0.et"); [t.nodes[i].id for i in topological_order(t, "x.0.et")]
[1, 2]
>>> check_trace(Trace(Metadata(), (Node(1, "", "COMP_NODE", data_deps=(9,)),)), "x.0.et")
Traceback (most recent call last):
...
sim.errors.ConfigError: x.0.et: node 1: data_deps: 9 is not a node of this file
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from sim.chakra.schema import ATTR_KINDS, COLLECTIVE_TYPES, NODE_TYPES
from sim.errors import ConfigError

__all__ = [
    "KNOWN_ATTRS",
    "Attr",
    "AttrValue",
    "IOInfo",
    "Metadata",
    "Node",
    "Trace",
    "check_trace",
    "heap_order",
    "node_label",
    "topological_order",
]

#: A scalar attribute value, or a tuple of them for the ``*_list`` kinds.
AttrValue = bool | int | float | str | bytes | tuple[bool | int | float | str | bytes, ...]

#: Attribute names read into :class:`Node` fields (in the order a writer emits them), with
#: the kind written: the kinds Chakra's first feeder reads (its newer feeder, which
#: ASTRA-sim uses, also accepts any integer kind for the integer ones).
KNOWN_ATTRS: dict[str, str] = {
    "is_cpu_op": "bool_val",
    "comm_type": "int64_val",
    "comm_size": "int64_val",
    "comm_src": "int32_val",
    "comm_dst": "int32_val",
    "comm_tag": "int32_val",
    "pg_name": "string_val",
}


@dataclass(frozen=True, slots=True)
class Attr:
    """An attribute the model has no field for, kept as written.

    Attributes
    ----------
    name : str
    kind : str or None
        The ``AttributeProto.value`` case, e.g. ``"int64_val"`` or ``"bool_list"``
        (a key of :data:`sim.chakra.schema.ATTR_KINDS`); ``None`` for an attribute
        written without a value.
    value : AttrValue or None
        A scalar, a tuple for a ``*_list`` kind, ``None`` without a kind.
    doc : str
        The ``doc_string``.
    """

    name: str
    kind: str | None
    value: AttrValue | None
    doc: str = ""

    def __post_init__(self) -> None:
        if self.kind is None and self.value is not None:
            raise ConfigError(f"attribute {self.name!r}: a value {self.value!r} without a kind")
        if self.kind is not None and self.kind not in ATTR_KINDS:
            raise ConfigError(
                f"attribute {self.name!r}: kind {self.kind!r} is not one of {', '.join(ATTR_KINDS)}"
            )


@dataclass(frozen=True, slots=True)
class IOInfo:
    """A node's ``inputs`` or ``outputs``: three strings, as PyTorch's converter writes them."""

    values: str = ""
    shapes: str = ""
    types: str = ""


@dataclass(frozen=True, slots=True)
class Node:
    """One Chakra node.

    Attributes
    ----------
    id : int
        Unique within its file (uint64).
    name : str
    type : str
        A key of :data:`sim.chakra.schema.NODE_TYPES`, e.g. ``"COMP_NODE"``.
    data_deps, ctrl_deps : tuple of int
        Ids of nodes of the same file that must finish first (both kinds count).
    start_time_micros, duration_micros : int
        Recorded start and duration, microseconds.
    inputs, outputs : IOInfo or None
        ``None`` where the message has none.
    is_cpu_op : bool or None
        The ``is_cpu_op`` attribute; ``None`` where absent (readers then take ``False``).
    comm_type : str or None
        The ``comm_type`` attribute as a key of :data:`~sim.chakra.schema.COLLECTIVE_TYPES`.
    comm_bytes : int or None
        The ``comm_size`` attribute (bytes; ASTRA-sim's meaning per collective type is in
        docs/chakra.md).
    comm_src, comm_dst, comm_tag : int or None
        Point-to-point peers and tag (``comm_src``, ``comm_dst``, ``comm_tag``).
    pg_name : str or None
        The ``pg_name`` attribute: the communicator group (``None``, ``""`` and ``"0"``
        mean every rank, as in ASTRA-sim).
    attrs : tuple of Attr
        Every other attribute, in file order.
    """

    id: int
    name: str
    type: str
    data_deps: tuple[int, ...] = ()
    ctrl_deps: tuple[int, ...] = ()
    start_time_micros: int = 0
    duration_micros: int = 0
    inputs: IOInfo | None = None
    outputs: IOInfo | None = None
    is_cpu_op: bool | None = None
    comm_type: str | None = None
    comm_bytes: int | None = None
    comm_src: int | None = None
    comm_dst: int | None = None
    comm_tag: int | None = None
    pg_name: str | None = None
    attrs: tuple[Attr, ...] = ()

    def __post_init__(self) -> None:
        if self.type not in NODE_TYPES:
            raise ConfigError(
                f"node {self.id}: type {self.type!r} is not one of {', '.join(NODE_TYPES)}"
            )
        if self.comm_type is not None and self.comm_type not in COLLECTIVE_TYPES:
            raise ConfigError(
                f"node {self.id}: comm_type {self.comm_type!r} is not one of "
                f"{', '.join(COLLECTIVE_TYPES)}"
            )
        for name in ("duration_micros", "start_time_micros", "comm_bytes"):
            value = getattr(self, name)
            if value is not None and value < 0:
                field = "comm_size" if name == "comm_bytes" else name
                raise ConfigError(f"node {self.id}: {field} {value} is negative")

    @property
    def duration_s(self) -> float:
        """The recorded duration in seconds."""
        return self.duration_micros * 1e-6

    @property
    def deps(self) -> tuple[int, ...]:
        """Data then control dependencies, each id once (ASTRA-sim waits for both)."""
        return tuple(dict.fromkeys(self.data_deps + self.ctrl_deps))


@dataclass(frozen=True, slots=True)
class Metadata:
    """The ``GlobalMetadata`` message that opens every ET file."""

    version: str = ""
    attrs: tuple[Attr, ...] = ()


@dataclass(frozen=True, slots=True)
class Trace:
    """One rank's ET file: its metadata and its nodes in file order."""

    metadata: Metadata
    nodes: tuple[Node, ...]
    _order: tuple[int, ...] | None = field(default=None, init=False, repr=False, compare=False)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)


def node_label(node: Node) -> str:
    """``node 7`` or ``node 7 'all_reduce'``: how messages name a node."""
    return f"node {node.id}" + (f" {node.name[:60]!r}" if node.name else "")


def check_trace(trace: Trace, where: str) -> None:
    """Refuse a trace no executor can run: one ConfigError line naming ``where`` and the node.

    Parameters
    ----------
    trace : Trace
    where : str
        The file (or rank) for messages.

    Raises
    ------
    ConfigError
        Two nodes with one id, a dependency on an id the file does not have, or a
        dependency cycle (a node depending on itself included).
    """
    seen: set[int] = set()
    for node in trace.nodes:
        if node.id in seen:
            raise ConfigError(f"{where}: {node_label(node)}: id {node.id} is used by two nodes")
        seen.add(node.id)
    for node in trace.nodes:
        for kind in ("data_deps", "ctrl_deps"):
            for dep in getattr(node, kind):
                if dep not in seen:
                    raise ConfigError(
                        f"{where}: {node_label(node)}: {kind}: {dep} is not a node of this file"
                    )
    topological_order(trace, where)


def topological_order(trace: Trace, where: str) -> tuple[int, ...]:
    """Indices of ``trace.nodes`` in dependency order, ties taken in file order.

    Where the file is already in dependency order (Chakra's converters and clustersim's
    exporter write it so) this is ``0, 1, ..., n-1``.

    Raises
    ------
    ConfigError
        A dependency cycle, named by its node ids; run :func:`check_trace` first for
        duplicate and dangling ids.
    """
    if trace._order is not None:
        return trace._order
    index = {node.id: i for i, node in enumerate(trace.nodes)}
    preds = [[index[dep] for dep in node.deps] for node in trace.nodes]
    order = heap_order(preds)
    if len(order) < len(trace.nodes):
        came = set(order)
        waiting = [0 if i in came else 1 for i in range(len(trace.nodes))]
        raise ConfigError(f"{where}: dependency cycle {_cycle(trace, waiting, index)}")
    # kept on the (immutable) trace: checking, matching and importing it each ask
    object.__setattr__(trace, "_order", tuple(order))
    return tuple(order)


def heap_order(preds: Sequence[Sequence[int]]) -> list[int]:
    """Items ``0 .. n-1`` in dependency order, ``preds[i]`` being the items ``i`` waits for;
    among items ready together the lowest first. Shorter than ``n`` where items wait for
    each other in a circle: those never come.

    >>> heap_order([[2], [], [1]])
    [1, 2, 0]
    """
    waiting = [len(p) for p in preds]
    children: list[list[int]] = [[] for _ in preds]
    for i, ps in enumerate(preds):
        for p in ps:
            children[p].append(i)
    ready = [i for i, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for child in children[i]:
            waiting[child] -= 1
            if waiting[child] == 0:
                heapq.heappush(ready, child)
    return order


def _cycle(trace: Trace, waiting: Sequence[int], index: dict[int, int]) -> str:
    """A cycle among the nodes still waiting, as ``3 -> 5 -> 3`` (child before parent)."""
    start = next(i for i, count in enumerate(waiting) if count > 0)
    path: list[int] = []
    on_path: dict[int, int] = {}
    i = start
    while i not in on_path:
        on_path[i] = len(path)
        path.append(i)
        # A waiting node has at least one waiting parent: follow one.
        i = next(index[d] for d in trace.nodes[i].deps if waiting[index[d]] > 0)
    ring = [*path[on_path[i] :], i]
    ids = [str(trace.nodes[j].id) for j in ring]
    if len(ids) > 12:
        ids = [*ids[:6], "...", *ids[-5:]]
    return " -> ".join(ids) + " (each waits for the next)"
