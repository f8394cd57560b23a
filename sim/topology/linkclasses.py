"""Classes of links that carry exactly the same flows: one max-min constraint per class.

Adaptive routing spreads a transfer evenly over every equal-cost fabric path, so one
flow crosses tens of spine cables with the same share on each, and every other flow
that crosses one of those cables crosses all of them with one share too. Their
capacity constraints (``sum of share x rate <= capacity``) are then the same
inequality written many times. Max-min fair rates depend on the set of constraints
only, so keeping ONE link per class leaves every rate bit-identical (the load on the
kept link is summed over the same flows in the same order as on any other member)
while the solver scans far fewer hops; the same holds for the PCIe/NIC hops an ECMP
route always crosses together.

:class:`LinkClasses` keeps a partition of the links that every path it has seen
respects: each path crosses either all links of a class, all with one share, or none
of them; members of a class also have equal capacity and congestion loss. A new path
can only split classes (partition refinement), and a finer partition is still valid,
so one partition serves every network on a topology. Rows built before a split must
be rebuilt: :attr:`LinkClasses.version` counts the splits.
"""

from __future__ import annotations

import numpy as np

from sim.topology.paths import Path

__all__ = ["LinkClasses"]


class LinkClasses:
    """A partition of links respected by every path observed (see module docstring).

    Parameters
    ----------
    capacity : numpy.ndarray
        Link capacities, bytes/s.
    loss : numpy.ndarray
        Link congestion-loss parameters (members of a class have equal ones).

    Attributes
    ----------
    keep : numpy.ndarray
        Boolean, length ``links + 1``: True on each class's representative (its
        smallest link index) and on links no path has crossed yet; False on the other
        members and on the pad index ``links``.
    version : int
        Number of times an existing class was split (rows reduced before are stale).

    Examples
    --------
    >>> c = LinkClasses(np.ones(4), np.zeros(4))
    >>> c.observe(Path(np.array([0, 1, 2])))
    >>> c.keep.tolist()  # 0, 1, 2 always together: one constraint
    [True, False, False, True, False]
    >>> c.observe(Path(np.array([1, 3])))  # 1 without 0 and 2: the class splits
    >>> c.keep.tolist(), c.version
    ([True, True, False, True, False], 1)
    """

    def __init__(self, capacity: np.ndarray, loss: np.ndarray) -> None:
        n = capacity.size
        self._capacity = capacity.tolist()
        self._loss = loss.tolist()
        self._class = [-1] * n  # class of each link, -1: not crossed by any path yet
        self._members: dict[int, list[int]] = {}
        self._next = 0
        # (id of links, id of shares) -> a path on them (kept alive, so ids stay unique)
        self._seen: dict[tuple[int, int], Path] = {}
        # :attr:`keep`'s bytes: a new class's few links are marked one by one in Python
        # (an index array per new class cost more than the marking)
        self._keep = bytearray(b"\x01") * n + b"\x00"
        self.version = 0

    @property
    def keep(self) -> np.ndarray:
        """See the class docstring (a read-only view, current at every access)."""
        view = np.frombuffer(self._keep, dtype=bool)
        view.flags.writeable = False
        return view

    def observe(self, path: Path) -> None:
        """Refine the partition so that ``path`` respects it (no-op for a path seen, or one
        on the same link and share arrays: a route inside a server for every rail)."""
        key = (id(path.links), id(path.shares))  # paths on the same arrays: seen once
        if key in self._seen:
            return
        self._seen[key] = path
        cls, cap, loss = self._class, self._capacity, self._loss
        groups: dict[tuple[int, float, float, float], list[int]] = {}
        for li, w in zip(path.links.tolist(), path.shares.tolist(), strict=True):
            groups.setdefault((cls[li], w, cap[li], loss[li]), []).append(li)
        for (old, *_), links in groups.items():
            if old >= 0 and len(links) == len(self._members[old]):
                continue  # the path crosses the whole class with one share
            self._new_class(links, old)

    def _new_class(self, links: list[int], old: int) -> None:
        k = self._next
        self._next += 1
        self._members[k] = links
        keep, cls = self._keep, self._class
        for li in links:
            cls[li] = k
            keep[li] = 0
        keep[min(links)] = 1
        if old >= 0:  # split off an existing class: its representative may have moved
            rest = [li for li in self._members[old] if cls[li] == old]
            if rest:
                self._members[old] = rest
                keep[min(rest)] = 1
            else:  # every member went to a new class (one per share)
                del self._members[old]
            self.version += 1

    def observe_all(self, paths: list[Path]) -> None:
        """:meth:`observe` each path."""
        seen = self._seen
        for p in paths:
            if (id(p.links), id(p.shares)) not in seen:
                self.observe(p)

    def reduce(self, hops: np.ndarray, share: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows of ``hops`` (padded with the link count) and ``share`` with only each
        class's representative kept, compacted to the left and trimmed to the widest
        row. Every path of the rows must have been observed."""
        mask = self.keep[hops]
        counts = mask.sum(axis=1)
        width = int(counts.max()) if counts.size else 0
        pad = self.keep.size - 1
        out = np.full((hops.shape[0], width), pad, dtype=hops.dtype)
        out_share = np.zeros(out.shape)
        filled = np.arange(width) < counts[:, None]
        out[filled] = hops[mask]
        out_share[filled] = share[mask]
        return out, out_share
