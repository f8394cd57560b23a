"""Groups whose collectives cost exactly the same: the tuner's answer shared, with proof.

A training step times the same collective on many groups: the data-parallel group of
every tensor-parallel rank, the tensor-parallel group of every server. Where two groups
have the same shape (:func:`twin_key`: ranks, servers, NVSwitches, rings, NCCL channels)
the tuner builds the same schedules for both, and what it costs them depends only on
their routes. :class:`Twin` proves, route by route, that a group's routes are its
representative's under a one-to-one renaming of the links (same order, shares, latency,
scope, capacity, loss): every step then loads renamed links with the same bytes in the
same order, so the closed form gives the same bits, and the link counters are the
representative's, renamed. A route that does not match ends the twinship, and the group
tunes itself.

The check is exact (float equality) and costs about what numbering the group's own
routes does, which the group needed anyway; its tuning is what is saved.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

import numpy as np

from sim.collectives.engine import SCOPE_NAME

if TYPE_CHECKING:
    from sim.collectives.simulate import CollectiveSetup
    from sim.collectives.steparrays import RouteTable

__all__ = ["Twin", "twin_key"]


def twin_key(setup: CollectiveSetup) -> Hashable:
    """What the tuner reads of a group besides its routes (groups with equal keys build
    the same schedules and candidates; their routes are checked by :class:`Twin`)."""
    return (
        id(setup.topology),
        id(setup.params),
        setup.layout,
        setup.channels,
        setup.max_nccl_channels,
        setup.reducer is None,
        len(setup.node_switches),
    )


class Twin:
    """``me``'s routes proved equal to ``rep``'s, up to renaming links, as far as
    ``rep`` has numbered routes (:meth:`matches` checks the new ones).

    ``me``'s route table numbers its routes in ``rep``'s order, so the two tables' CSR
    arrays line up route by route and link by link: the renaming is ``rep``'s
    ``links[k]`` -> ``me``'s ``links[k]``, kept in the tables ``me`` would hold anyway.
    """

    def __init__(self, rep: CollectiveSetup, me: CollectiveSetup) -> None:
        self.rep, self.me = rep, me
        self.done = 0  # rep's routes checked
        self.names: dict[str, str] | None = None

    def _names(self) -> dict[str, str] | None:
        """rep's endpoint names -> me's (position by position); None if not one-to-one
        or on another topology or parameters."""
        rep, me = self.rep, self.me
        if rep.topology is not me.topology or rep.params is not me.params:
            return None
        pairs = list(zip(rep.group, me.group, strict=True))
        if rep.reducer is not None and me.reducer is not None:
            pairs.append((rep.reducer, me.reducer))
        pairs += zip(map(str, rep.node_switches), map(str, me.node_switches), strict=True)
        if rep.layout.sharp:
            pairs += zip(rep.sharp_switches(), me.sharp_switches(), strict=True)
        fwd: dict[str, str] = {}
        back: dict[str, str] = {}
        for a, b in pairs:
            if fwd.setdefault(a, b) != b or back.setdefault(b, a) != a:
                return None
        return fwd

    def matches(self) -> bool:
        """Whether every route ``rep`` has numbered so far is ``me``'s, renamed."""
        ta, tb = self.rep.routes.table, self.me.routes.table
        end = len(ta.paths)
        if self.done == end:
            return True
        if self.names is None:
            self.names = self._names()
        names = self.names
        if names is None:
            return False
        for i in range(self.done, end):  # number me's routes in rep's order
            src, dst, rail = ta.endpoints(i)
            if src not in names or dst not in names:
                return False
            if tb.id(names[src], names[dst], rail) != i:
                return False
        if not (_same_routes(ta, tb, self.done, end) and _one_to_one(ta, tb, end)):
            return False
        self.done = end
        return True

    def moved(self, rep_bytes: np.ndarray) -> np.ndarray:
        """``me``'s per-link counters from ``rep``'s (links renamed; untouched links 0),
        for counters of routes :meth:`matches` has checked."""
        ta, tb = self.rep.routes.table, self.me.routes.table
        out = np.zeros_like(rep_bytes)
        out[tb.links[: tb.ptr[self.done]]] = rep_bytes[ta.links[: ta.ptr[self.done]]]
        return out


def _same_routes(ta: RouteTable, tb: RouteTable, lo: int, hi: int) -> bool:
    """Whether routes ``lo:hi`` of the two (frozen) tables have the same latency, scope,
    link count, shares, and link by link the same capacity, loss and scope."""
    ta.freeze()
    tb.freeze()
    r = slice(lo, hi)
    if not (
        np.array_equal(ta.latency_s[r], tb.latency_s[r])
        and np.array_equal(ta.scope[r], tb.scope[r])
        and np.array_equal(ta.count[r], tb.count[r])
    ):
        return False
    k = slice(int(ta.ptr[lo]), int(ta.ptr[hi]))
    a, b = ta.links[k], tb.links[k]
    topo = ta.routes.topology
    return (
        np.array_equal(ta.shares[k], tb.shares[k])
        and np.array_equal(topo.capacity_Bps[a], topo.capacity_Bps[b])
        and np.array_equal(topo.link_loss[a], topo.link_loss[b])
        and all(np.array_equal(topo.scope_mask(s)[a], topo.scope_mask(s)[b]) for s in SCOPE_NAME)
    )


def _one_to_one(ta: RouteTable, tb: RouteTable, hi: int) -> bool:
    """Whether ``ta.links[k]`` -> ``tb.links[k]`` over routes ``:hi`` renames links one
    to one (a link that two routes share in one table is shared in the other)."""
    k = int(ta.ptr[hi])
    a, b = ta.links[:k], tb.links[:k]
    size = len(ta.routes.topology.capacity_Bps)
    fwd = np.full(size, -1, dtype=np.intp)
    fwd[a] = b
    if not np.array_equal(fwd[a], b):
        return False
    back = np.full(size, -1, dtype=np.intp)
    back[b] = a
    return bool(np.array_equal(back[b], a))
