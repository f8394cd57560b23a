"""The graph a topology is built into, and its BFS, against networkx and scipy.

:class:`sim.topology.digraph.DiGraph` stands in for ``networkx.DiGraph`` (so building a
topology imports neither networkx nor scipy): every operation the simulator uses must
give what networkx gives, in the same order, and the numpy BFS the hop counts scipy's
``shortest_path`` gives.
"""

from __future__ import annotations

import pickle
from typing import Any

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components, shortest_path

from sim.topology.bfs import Adjacency, hops_from, weak_components
from sim.topology.digraph import DiGraph
from sim.topology.presets import load_topology

NAMES = st.sampled_from(["a", "b", "c", "d", "e", "f"])
ATTRS = st.dictionaries(st.sampled_from(["kind", "node", "capacity_Bps"]), st.integers(0, 3))
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("node"), NAMES, NAMES, ATTRS),
        st.tuples(st.just("edge"), NAMES, NAMES, ATTRS),
    ),
    max_size=30,
)


def _view(g: Any) -> tuple[object, ...]:
    """Everything the simulator reads of a graph, in iteration order."""
    nodes = list(g.nodes)
    return (
        dict(g.graph),
        nodes,
        list(g.nodes(data=True)),
        list(g.edges),
        list(g.edges(data=True)),
        {v: list(g.successors(v)) for v in nodes},
        {v: list(g.predecessors(v)) for v in nodes},
        {v: list(g.out_edges(v, data=True)) for v in nodes},
        {(u, v): g.has_edge(u, v) for u in nodes for v in nodes},
        {(u, v): dict(g.edges[u, v]) for u, v in g.edges},
        len(g),
        [v in g for v in ("a", "zz")],
    )


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_every_operation_matches_networkx(ops: list[tuple[str, str, str, dict[str, int]]]) -> None:
    """Adding and updating nodes and edges in any order: the same nodes, edges,
    attributes, neighbours and order as a networkx.DiGraph given the same calls."""
    ours, theirs = DiGraph(fabric="x"), nx.DiGraph(fabric="x")
    for op, u, v, attrs in ops:
        for g in (ours, theirs):
            if op == "node":
                g.add_node(u, **attrs)
            else:
                g.add_edge(u, v, **attrs)
    assert _view(ours) == _view(theirs)
    assert _view(ours.copy()) == _view(theirs.copy())
    # like networkx's own copy, a conversion adds edges by source: predecessor lists may
    # come in another order than the calls made them
    assert _view(ours.to_networkx()) == _view(theirs.copy())
    assert _view(pickle.loads(pickle.dumps(ours))) == _view(theirs)
    assert ours.number_of_edges() == theirs.number_of_edges()


def test_attribute_dicts_are_live_and_a_copy_is_independent() -> None:
    """``g.nodes[v]`` and ``g.edges[u, v]`` are the stored dicts (the builder edits them in
    place, as with networkx); a copy's are its own."""
    g = DiGraph()
    g.add_edge("a", "b", capacity_Bps=1.0)
    g.edges["a", "b"]["capacity_Bps"] = 2.0
    g.nodes["a"]["kind"] = "gpu"
    c = g.copy()
    c.edges["a", "b"]["capacity_Bps"] = 3.0
    assert g.edges["a", "b"] == {"capacity_Bps": 2.0} and g.nodes["a"] == {"kind": "gpu"}
    with pytest.raises(KeyError):
        g.edges["b", "a"]


def test_a_built_topology_converts_to_the_same_networkx_graph() -> None:
    """A preset's graph and its networkx conversion list the same parts and links."""
    g = load_topology("h100-ib-ndr", nodes=2).graph
    assert isinstance(g, DiGraph)
    assert _view(g.to_networkx()) == _view(g)


EDGES = st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11)), max_size=40)


@settings(max_examples=200, deadline=None)
@given(EDGES, st.integers(0, 11))
def test_bfs_hops_match_scipy(edges: list[tuple[int, int]], source: int) -> None:
    """Hop counts from a node (inf where unreachable), parallel edges and loops included."""
    n = 12
    rows = np.array([u for u, _ in edges], dtype=np.intp)
    cols = np.array([v for _, v in edges], dtype=np.intp)
    want = shortest_path(
        coo_matrix((np.ones(len(edges)), (rows, cols)), shape=(n, n)).tocsr(),
        unweighted=True,
        indices=source,
    )
    got = hops_from(Adjacency(n, rows, cols), source)
    assert got.dtype == want.dtype and got.tolist() == want.tolist()


@settings(max_examples=200, deadline=None)
@given(EDGES)
def test_weak_components_match_scipy(edges: list[tuple[int, int]]) -> None:
    """Weak components: the same partition as scipy's, each labelled by its smallest node."""
    n = 12
    u = np.array([a for a, _ in edges], dtype=np.intp)
    v = np.array([b for _, b in edges], dtype=np.intp)
    _, want = connected_components(
        coo_matrix((np.ones(len(edges)), (u, v)), shape=(n, n)), directed=True, connection="weak"
    )
    got = weak_components(n, u, v)
    for i in range(n):
        for j in range(n):
            assert (got[i] == got[j]) == (want[i] == want[j])
    assert all(got[i] == min(np.flatnonzero(got == got[i])) for i in range(n))
