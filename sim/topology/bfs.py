"""Hop counts and weak components of a graph given as index arrays (numpy).

What routing and the connectivity check need of a graph library, written with numpy so
that building a topology does not import scipy (about a third of a second of start-up):
breadth-first hop counts from one node (:func:`hops_from`, as scipy's
``shortest_path(..., unweighted=True, indices=w)``: float hops, ``inf`` where
unreachable) and the weakly connected components of a directed graph
(:func:`weak_components`). Each BFS level is a few array operations, so a fabric of
thousands of switches (a handful of levels) costs microseconds per level, not a Python
loop over its edges.

>>> adj = Adjacency(4, np.array([0, 1, 2]), np.array([1, 2, 0]))  # 0->1->2->0, 3 alone
>>> hops_from(adj, 0).tolist()
[0.0, 1.0, 2.0, inf]
>>> weak_components(4, np.array([0, 1]), np.array([1, 2])).tolist()
[0, 0, 0, 3]
"""

from __future__ import annotations

import numpy as np

__all__ = ["Adjacency", "hops_from", "weak_components"]


class Adjacency:
    """Out-neighbours of ``n`` nodes in compressed rows (edge ``rows[i] -> cols[i]``).

    Attributes
    ----------
    n : int
        Number of nodes.
    indptr, indices : numpy.ndarray
        Node ``u``'s out-neighbours are ``indices[indptr[u]:indptr[u + 1]]``.
    """

    def __init__(self, n: int, rows: np.ndarray, cols: np.ndarray) -> None:
        rows = np.asarray(rows, dtype=np.intp)
        order = np.argsort(rows, kind="stable")
        self.n = n
        self.indices = np.asarray(cols, dtype=np.intp)[order]
        self.indptr = np.zeros(n + 1, dtype=np.intp)
        np.cumsum(np.bincount(rows, minlength=n), out=self.indptr[1:])


def hops_from(adj: Adjacency, source: int) -> np.ndarray:
    """Fewest edges from ``source`` to each node (float; ``inf`` where unreachable).

    >>> hops_from(Adjacency(3, np.array([0, 0]), np.array([1, 2])), 1).tolist()
    [inf, 0.0, inf]
    """
    dist = np.full(adj.n, np.inf)
    dist[source] = 0.0
    frontier = np.array([source], dtype=np.intp)
    level, reached = 0.0, 1
    while frontier.size and reached < adj.n:  # a fabric is reached in a few levels
        level += 1.0
        starts = adj.indptr[frontier]
        counts = adj.indptr[frontier + 1] - starts
        total = int(counts.sum())
        if total == 0:
            break
        # Concatenated ranges indptr[u]:indptr[u + 1] of every frontier node u.
        offsets = np.repeat(starts - np.cumsum(counts) + counts, counts)
        nbrs = adj.indices[offsets + np.arange(total)]
        dist[nbrs[dist[nbrs] == np.inf]] = level
        frontier = np.flatnonzero(dist == level)
        reached += frontier.size
    return dist


def weak_components(n: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """A component label per node of the graph with edges ``u[i] - v[i]`` (direction
    ignored): equal labels exactly within a component (each the smallest node index of
    its component).

    Roots hook to the smaller root across every edge, then pointer jumping flattens the
    forest; repeated until no edge joins two labels.
    """
    label = np.arange(n, dtype=np.intp)
    u = np.asarray(u, dtype=np.intp)
    v = np.asarray(v, dtype=np.intp)
    while True:
        lu, lv = label[u], label[v]
        cross = lu != lv
        if not cross.any():
            return label
        lu, lv = lu[cross], lv[cross]
        np.minimum.at(label, np.maximum(lu, lv), np.minimum(lu, lv))
        while True:  # pointer jumping: every node to its root
            up = label[label]
            if np.array_equal(up, label):
                break
            label = up
