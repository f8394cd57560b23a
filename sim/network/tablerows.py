"""A route table's routes as a flow network solves them, built once per table.

The collective engine numbers every route of a schedule in a
:class:`~sim.collectives.steparrays.RouteTable` and starts each step as arrays of route
numbers. :class:`TableRows` keeps, per route of one table, what a flow on it needs: its
solver row (one link per class, :mod:`sim.topology.linkclasses`) and shares, the solve
cache's route number and the network's path number. A step's flows are then rows picked
by fancy indexing, with no Python work per transfer (a step of a 4,096-GPU tree is tens
of thousands of transfers).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from sim.network.flowstate import path_rows, widen
from sim.topology.linkclasses import LinkClasses
from sim.topology.paths import Path

__all__ = ["RoutesLike", "TableRows"]


class RoutesLike(Protocol):  # sim.collectives.steparrays.RouteTable
    """Routes numbered ``0..n-1`` with their latencies."""

    latency_s: np.ndarray

    @property
    def paths(self) -> list[Path]: ...

    def freeze(self) -> None: ...


class TableRows:
    """Solver rows of the routes of one table that flows have used (see module docstring).

    A route's row is built when a flow first uses it (:meth:`update`): a tuner numbers the
    routes of every candidate schedule in the table, and only the chosen one's run. Its
    path number is given to every route of the table in table order, as the routes are
    numbered, so the byte counters sum routes in the same order whichever are used.

    Parameters
    ----------
    classes : LinkClasses
        The topology's link classes (observes every route used).
    pad : int
        Number of links: the pad value of the rows.
    path_no : callable
        The network's path numbers of a list of paths.
    route_id : callable, optional
        The solve cache's route number of a path (-1 without a cache).
    """

    def __init__(
        self,
        classes: LinkClasses,
        pad: int,
        path_no: Callable[[Sequence[Path]], np.ndarray],
        route_id: Callable[[Path], int] | None,
    ) -> None:
        self._classes, self._pad = classes, pad
        self._path_no, self._route_id = path_no, route_id
        self._paths: list[Path] = []
        self.version = classes.version
        self.built = np.zeros(0, dtype=bool)  # whether each route's row is built
        self.hops = np.zeros((0, 0), dtype=np.intp)
        self.share = np.zeros((0, 0))
        self.width = np.zeros(0, dtype=np.intp)  # solver links per route
        self.links = np.zeros(0, dtype=np.intp)  # links per route (0: a self-transfer)
        self.weighted = np.zeros(0, dtype=bool)
        self.path = np.zeros(0, dtype=np.intp)
        self.route = np.zeros(0, dtype=np.intp)

    def update(self, table: RoutesLike, used: np.ndarray) -> None:
        """Number the table's routes added since the last call; build the rows of routes
        ``used`` (route numbers) not built yet, and rebuild every built row when a class
        split since they were built."""
        table.freeze()
        self._extend(table.paths[len(self._paths) :])
        want = np.zeros(len(self._paths), dtype=bool)  # a mask, not np.unique: that loads
        want[used] = True  # numpy.ma on its first call (~20 ms of a command's start)
        todo = np.flatnonzero(want & ~self.built)
        if not todo.size and self.version == self._classes.version:
            return
        new = [self._paths[i] for i in todo.tolist()]
        self._classes.observe_all(new)
        if self._route_id is not None:
            self.route[todo] = [self._route_id(p) for p in new]
        self.built[todo] = True
        if self.version != self._classes.version:  # a class split: rebuild every built row
            self.version = self._classes.version
            todo = np.flatnonzero(self.built)
            new = [self._paths[i] for i in todo.tolist()]
        hops, share = self._classes.reduce(*path_rows(new, self._pad))
        width = max(self.hops.shape[1], hops.shape[1])
        self.hops, self.share = widen(self.hops, width, self._pad), widen(self.share, width, 0.0)
        self.hops[todo], self.share[todo] = widen(hops, width, self._pad), widen(share, width, 0.0)
        self.width[todo] = (hops < self._pad).sum(axis=1)

    def _extend(self, new: Sequence[Path]) -> None:
        """Number routes ``new`` (appended to the table): their path numbers, link counts
        and whether they are weighted; their rows not built."""
        if not new:
            return
        k = len(new)
        self._paths.extend(new)
        self.path = np.concatenate([self.path, self._path_no(new)])
        self.route = np.concatenate([self.route, np.full(k, -1, dtype=np.intp)])
        self.links = np.concatenate([self.links, [len(p.links) for p in new]]).astype(np.intp)
        weighted = np.array([p.weights is not None for p in new], dtype=bool)
        self.weighted = np.concatenate([self.weighted, weighted])
        self.built = np.concatenate([self.built, np.zeros(k, dtype=bool)])
        self.width = np.concatenate([self.width, np.zeros(k, dtype=np.intp)])
        self.hops = np.vstack([self.hops, np.full((k, self.hops.shape[1]), self._pad, np.intp)])
        self.share = np.vstack([self.share, np.zeros((k, self.share.shape[1]))])

    def rows(self, route: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Solver rows and shares of flows on routes ``route`` (built by :meth:`update`),
        trimmed to their width."""
        w = int(self.width[route].max()) if route.size else 0
        return self.hops[route, :w], self.share[route, :w]
