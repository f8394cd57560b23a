"""The directed graph a topology is built into: the part of networkx's ``DiGraph`` we use.

:func:`sim.topology.build.build_topology` builds a :class:`DiGraph` rather than a
``networkx.DiGraph`` because importing networkx costs more than building a 256-GPU
topology (about 0.2 s of every command's start-up), and the simulator only stores parts
and links in it: nodes and directed edges with attribute dicts, in insertion order.
The methods have networkx's names, arguments, iteration order and live attribute dicts,
so code written for a ``networkx.DiGraph`` (the ``Topology(graph=...)`` of a user or a
test) and for this class is the same code. For networkx's algorithms, convert with
:meth:`DiGraph.to_networkx`.

>>> g = DiGraph(fabric="nvswitch")
>>> g.add_node("a", kind="gpu")
>>> g.add_edge("a", "b", capacity_Bps=1e9)
>>> list(g.nodes(data=True)), list(g.edges(data=True)), g.graph
([('a', {'kind': 'gpu'}), ('b', {})], [('a', 'b', {'capacity_Bps': 1000000000.0})], {'fabric': 'nvswitch'})
>>> g.nodes["a"]["kind"], g.edges["a", "b"]["capacity_Bps"], list(g.successors("a"))
('gpu', 1000000000.0, ['b'])
>>> list(g.to_networkx().edges(data=True)) == list(g.edges(data=True))
True
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["DiGraph"]

Node = Any  # hashable; a built topology names its parts with str
Attrs = dict[str, Any]


class _NodeView:
    """``g.nodes``: iterate node names, ``g.nodes[v]`` their attributes, ``g.nodes(data=True)``."""

    __slots__ = ("_node",)

    def __init__(self, node: dict[Node, Attrs]) -> None:
        self._node = node

    def __iter__(self) -> Iterator[Node]:
        return iter(self._node)

    def __len__(self) -> int:
        return len(self._node)

    def __contains__(self, v: object) -> bool:
        return v in self._node

    def __getitem__(self, v: Node) -> Attrs:
        return self._node[v]

    def __call__(self, data: bool = False) -> Iterator[Any]:
        return iter(self._node.items()) if data else iter(self._node)


class _EdgeView:
    """``g.edges``: iterate ``(u, v)``, ``g.edges[u, v]`` its attributes,
    ``g.edges(data=True)`` ``(u, v, attrs)``; by source in node order, then as added."""

    __slots__ = ("_succ",)

    def __init__(self, succ: dict[Node, dict[Node, Attrs]]) -> None:
        self._succ = succ

    def __iter__(self) -> Iterator[tuple[Node, Node]]:
        return ((u, v) for u, nbrs in self._succ.items() for v in nbrs)

    def __len__(self) -> int:
        return sum(len(nbrs) for nbrs in self._succ.values())

    def __contains__(self, e: object) -> bool:
        if not isinstance(e, tuple) or len(e) != 2:
            return False
        return e[1] in self._succ.get(e[0], ())

    def __getitem__(self, e: tuple[Node, Node]) -> Attrs:
        u, v = e
        try:
            return self._succ[u][v]
        except KeyError:
            raise KeyError(f"The edge {e} is not in the graph.") from None

    def __call__(self, data: bool = False) -> Iterator[Any]:
        if data:
            return ((u, v, d) for u, nbrs in self._succ.items() for v, d in nbrs.items())
        return iter(self)


class DiGraph:
    """Nodes and directed edges with attribute dicts, in insertion order.

    Parameters
    ----------
    **attr
        Graph attributes, kept in :attr:`graph`.

    Attributes
    ----------
    graph : dict
        Graph attributes (``fabric``, ``p2p`` for a built topology).
    nodes
        ``for v in g.nodes``, ``g.nodes[v]`` (the node's attribute dict, live),
        ``g.nodes(data=True)`` (``(v, attrs)`` pairs).
    edges
        ``for u, v in g.edges``, ``g.edges[u, v]`` (the edge's attribute dict, live),
        ``g.edges(data=True)`` (``(u, v, attrs)`` triples).
    """

    def __init__(self, **attr: Any) -> None:
        self.graph: Attrs = dict(attr)
        self._node: dict[Node, Attrs] = {}
        self._succ: dict[Node, dict[Node, Attrs]] = {}
        self._pred: dict[Node, dict[Node, Attrs]] = {}
        self.nodes = _NodeView(self._node)
        self.edges = _EdgeView(self._succ)

    def __getstate__(self) -> dict[str, Any]:
        return {"graph": self.graph, "node": self._node, "succ": self._succ, "pred": self._pred}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.graph = state["graph"]
        self._node, self._succ, self._pred = state["node"], state["succ"], state["pred"]
        self.nodes = _NodeView(self._node)
        self.edges = _EdgeView(self._succ)

    def __contains__(self, v: object) -> bool:
        try:
            return v in self._node
        except TypeError:
            return False

    def __iter__(self) -> Iterator[Node]:
        return iter(self._node)

    def __len__(self) -> int:
        return len(self._node)

    def add_node(self, v: Node, **attr: Any) -> None:
        """Add node ``v`` (or update its attributes: it keeps its place)."""
        d = self._node.get(v)
        if d is None:
            self._node[v] = dict(attr)
            self._succ[v] = {}
            self._pred[v] = {}
        else:
            d.update(attr)

    def add_edge(self, u: Node, v: Node, **attr: Any) -> None:
        """Add the edge ``u -> v`` (and missing end nodes), or update its attributes."""
        for w in (u, v):
            if w not in self._node:
                self.add_node(w)
        d = self._succ[u].get(v)
        if d is None:
            d = self._succ[u][v] = self._pred[v][u] = {}
        d.update(attr)

    def has_edge(self, u: Node, v: Node) -> bool:
        """Whether the edge ``u -> v`` exists."""
        return v in self._succ.get(u, ())

    def successors(self, u: Node) -> Iterator[Node]:
        """Heads of the edges out of ``u``, in the order they were added."""
        return iter(self._succ[u])

    def predecessors(self, v: Node) -> Iterator[Node]:
        """Tails of the edges into ``v``, in the order they were added."""
        return iter(self._pred[v])

    def out_edges(self, u: Node, data: bool = False) -> Iterator[Any]:
        """Edges out of ``u``: ``(u, v)``, or ``(u, v, attrs)`` with ``data=True``."""
        nbrs = self._succ[u]
        return ((u, v, d) for v, d in nbrs.items()) if data else ((u, v) for v in nbrs)

    def number_of_nodes(self) -> int:
        """Number of nodes."""
        return len(self._node)

    def number_of_edges(self) -> int:
        """Number of directed edges."""
        return len(self.edges)

    def copy(self) -> DiGraph:
        """An independent copy: same order, each attribute dict copied (values shared)."""
        g = DiGraph(**self.graph)
        for v, d in self._node.items():
            g.add_node(v, **d)
        for u, v, d in self.edges(data=True):
            g.add_edge(u, v, **d)
        return g

    def to_networkx(self) -> nx.DiGraph:
        """The same graph as a ``networkx.DiGraph`` (same order, attribute dicts copied)."""
        import networkx as nx

        g = nx.DiGraph(**self.graph)
        g.add_nodes_from((v, dict(d)) for v, d in self._node.items())
        g.add_edges_from((u, v, dict(d)) for u, v, d in self.edges(data=True))
        return g
