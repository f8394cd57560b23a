"""Bytes carried per link, accumulated per route and spread over the links when read.

A flow network at thousands of GPUs finishes a million transfers per step; adding each
one's bytes to every link of its (adaptive, tens of links wide) route as it lands cost
more than solving the rates. :class:`RouteBytes` instead adds a landed transfer's bytes
to its route's total (one number per flow) and spreads the totals over the routes' links
only when the counters are read: the same sums up to rounding (a link's bytes are added
route by route instead of flow by flow).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sim.topology.paths import Path

__all__ = ["ALL", "RouteBytes"]

#: Key of the bytes of every transfer, tagged or not.
ALL = ""


class RouteBytes:
    """Per-link byte counters (total and per tag) fed by route number.

    Parameters
    ----------
    num_links : int
        Number of links of the topology.

    Examples
    --------
    >>> rb = RouteBytes(3)
    >>> a, b = rb.number(Path(np.array([0, 1]))), rb.number(Path(np.array([1, 2])))
    >>> rb.add(np.array([a, b, a]), np.array([1.0, 2.0, 3.0]), np.array([1, 0, 1]), ["", "dp"])
    >>> rb.link_bytes.tolist(), rb.by_tag["dp"].tolist()
    ([4.0, 6.0, 2.0], [4.0, 4.0, 0.0])
    """

    def __init__(self, num_links: int) -> None:
        self.num_links = num_links
        self.paths: list[Path] = []
        self._number: dict[int, int] = {}  # id(path) -> number (paths kept alive above)
        self._pending: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        self._links = np.zeros(num_links)
        self._by_tag: dict[str, np.ndarray] = {}

    def number(self, path: Path) -> int:
        """The route number of ``path`` (by identity; numbered as first seen)."""
        k = self._number.get(id(path))
        if k is None:
            k = self._number[id(path)] = len(self.paths)
            self.paths.append(path)
        return k

    def numbers(self, paths: Sequence[Path]) -> np.ndarray:
        """Route numbers of ``paths``."""
        return np.fromiter((self.number(p) for p in paths), np.intp, len(paths))

    def add(
        self,
        routes: np.ndarray,
        nbytes: np.ndarray,
        tags: np.ndarray | None = None,
        names: Sequence[str] = (),
    ) -> None:
        """Transfers of ``nbytes[i]`` bytes on route ``routes[i]`` landed; ``tags[i]``
        numbers transfer ``i``'s tag in ``names`` (0: the empty tag, counted in the total
        only)."""
        self._pending.setdefault(ALL, []).append((routes, nbytes))
        if tags is None or not tags.any():
            return
        for t in np.flatnonzero(np.bincount(tags[tags > 0])).tolist():  # (np.unique: numpy.ma)
            sel = tags == t
            self._pending.setdefault(names[t], []).append((routes[sel], nbytes[sel]))

    @property
    def link_bytes(self) -> np.ndarray:
        """Bytes on each link so far (the array itself: callers may add to it)."""
        self._flush()
        return self._links

    @link_bytes.setter
    def link_bytes(self, value: np.ndarray) -> None:
        self._flush()
        self._links = value

    @property
    def by_tag(self) -> dict[str, np.ndarray]:
        """Bytes on each link per tag (arrays callers may add to)."""
        self._flush()
        return self._by_tag

    @by_tag.setter
    def by_tag(self, value: dict[str, np.ndarray]) -> None:
        self._flush()
        self._by_tag = value

    def _flush(self) -> None:
        pending, self._pending = self._pending, {}
        for tag, parts in pending.items():
            acc = self._links if tag == ALL else self._by_tag.get(tag)
            if acc is None:
                acc = self._by_tag[tag] = np.zeros(self.num_links)
            routes = np.concatenate([r for r, _ in parts])
            total = np.bincount(routes, weights=np.concatenate([b for _, b in parts]))
            used = np.flatnonzero(total).tolist()
            if not used:
                continue
            links = np.concatenate([self.paths[k].links for k in used])
            moved = np.concatenate([self.paths[k].shares * total[k] for k in used])
            acc += np.bincount(links, weights=moved, minlength=self.num_links)
