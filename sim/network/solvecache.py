"""Max-min solutions remembered by the content of their inputs, across flow networks.

An nccl-tests-style sweep runs one collective per size, each on a fresh
:class:`~sim.network.flow.FlowNetwork`, and most of those runs re-solve the very same
sets of flows: the same schedule steps on the same routes with the same per-flow caps
(a transfer's cap is its share of its sender's channel rate, which does not depend on
the message size), only with other byte counts. The rates of a solve depend on nothing
but the hop array, the link capacities, the per-flow caps and the weights, so a solve
whose inputs are byte-for-byte those of an earlier one can take that one's rates: the
results are bit-identical to solving again. :class:`SolveCache` keys each solve by a
BLAKE2b digest (256 bits) of those inputs.

Hashing every solve's full hop and share arrays cost as much as the solves themselves
at thousands of ranks, so a caller that knows each flow's route can key by route
numbers instead (:meth:`SolveCache.route_id`, :meth:`SolveCache.solve_routes`): a route
number stands for the route's links and shares, numbered by their content, so equal
numbers mean equal hop and share rows and the key is as exact as the full arrays'.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np

from sim.topology.paths import Path

__all__ = ["SolveCache"]

#: Default bound on the rates kept, bytes (float64 rates of every cached solve).
MAX_BYTES = 256 * 2**20

Solver = Callable[..., np.ndarray]


def _digest(*arrays: np.ndarray | None) -> bytes:
    h = hashlib.blake2b(digest_size=32)
    for a in arrays:
        if a is None:
            h.update(b"none;")
            continue
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape};".encode())
        h.update(a.data)
    return h.digest()


class SolveCache:
    """Rates of earlier max-min solves, looked up by their inputs' content.

    Parameters
    ----------
    max_bytes : int
        Most bytes of rates kept; once full, new solves are computed but not kept.

    Attributes
    ----------
    hits, misses : int
        Solves answered from the cache, and solved afresh.

    Examples
    --------
    >>> from sim.network.maxmin import progressive_fill
    >>> cache = SolveCache()
    >>> hops, cap = np.array([[0], [0]]), np.array([4.0])
    >>> [cache.solve(progressive_fill, hops, cap, None, None).tolist() for _ in range(2)]
    [[2.0, 2.0], [2.0, 2.0]]
    >>> cache.hits, cache.misses
    (1, 1)
    """

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._rates: dict[bytes, np.ndarray] = {}
        self._bytes = 0
        self.hits = 0
        self.misses = 0
        self._by_obj: dict[int, tuple[Path, int]] = {}  # keeps each Path alive: ids stay unique
        self._by_content: dict[bytes, int] = {}

    def route_id(self, path: Path) -> int:
        """Number of ``path``'s route: equal for paths with equal links and shares."""
        hit = self._by_obj.get(id(path))
        if hit is not None:
            return hit[1]
        links = np.ascontiguousarray(path.links, dtype=np.intp)
        content = len(links).to_bytes(8, "little") + links.tobytes()
        content += np.ascontiguousarray(path.shares, dtype=float).tobytes()
        rid = self._by_content.setdefault(content, len(self._by_content))
        self._by_obj[id(path)] = (path, rid)
        return rid

    def solve(
        self,
        solver: Solver,
        hops: np.ndarray,
        capacity: np.ndarray,
        caps: np.ndarray | None,
        weights: np.ndarray | None,
        capacity_key: bytes | None = None,
    ) -> np.ndarray:
        """``solver(hops, capacity, caps, weights)``, or a copy of the rates it gave
        before for byte-identical inputs. ``capacity_key``: :meth:`key` of ``capacity``
        when the caller already has it (a network's fixed capacities, hashed once)."""
        key = _digest(hops, caps, weights) + (capacity_key or self.key(capacity))
        return self._lookup(key, solver, hops, capacity, caps, weights)

    def solve_routes(
        self,
        solver: Solver,
        routes: np.ndarray,
        hops: np.ndarray,
        capacity: np.ndarray,
        caps: np.ndarray | None,
        weights: np.ndarray | None,
        capacity_key: bytes | None = None,
    ) -> np.ndarray:
        """As :meth:`solve`, keyed by the flows' route numbers (:meth:`route_id`; row
        ``i`` of ``hops`` and ``weights`` is route ``routes[i]``'s links and shares, padded
        to the width ``hops.shape[1]`` with the pad :func:`~sim.network.maxmin.pad_paths`
        uses) instead of the hop and share arrays themselves."""
        shape = np.array([*hops.shape, weights is None], dtype=np.int64)
        key = b"r" + _digest(shape, routes, caps) + (capacity_key or self.key(capacity))
        return self._lookup(key, solver, hops, capacity, caps, weights)

    def _lookup(
        self,
        key: bytes,
        solver: Solver,
        hops: np.ndarray,
        capacity: np.ndarray,
        caps: np.ndarray | None,
        weights: np.ndarray | None,
    ) -> np.ndarray:
        hit = self._rates.get(key)
        if hit is not None:
            self.hits += 1
            return hit.copy()
        self.misses += 1
        rates = solver(hops, capacity, caps, weights)
        if self._bytes + rates.nbytes <= self.max_bytes:
            self._rates[key] = rates.copy()
            self._bytes += rates.nbytes
        return rates

    @staticmethod
    def key(capacity: np.ndarray) -> bytes:
        """Digest of an array of link capacities (bytes/s)."""
        return _digest(capacity)
