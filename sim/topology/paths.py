"""A transfer's path: the links it crosses and the share of its bytes on each.

With ECMP and one queue pair a transfer follows one hashed path: every link carries all of
its bytes. With ``qps_per_connection = q`` (NCCL_IB_QPS_PER_CONNECTION) its messages
rotate over ``q`` queue pairs, each hashed independently: a link carries the share of
the ``q`` paths that cross it. With adaptive routing (InfiniBand AR, packet spraying)
every switch splits the transfer evenly over its equal-cost next hops. Both are
approximated as ONE flow whose bytes are split over its links in fixed shares (the flow
moves at the pace of its most loaded link); independent per-QP flows that could finish
at different times are not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["Path", "latencies", "merge"]

#: Paths shorter than this many links have their latency summed in order, one rounded
#: product at a time, by :meth:`Path.latency_s` and :func:`latencies` alike; longer ones
#: by the BLAS dot product in both. The sum is written out rather than left to the BLAS
#: kernel: OpenBLAS picks its kernel by CPU at run time, and a fused multiply-add one
#: (found on a 2026 host) rounds a two-link dot product differently from the plain loop.
SEQUENTIAL_DOT = 16


@dataclass(frozen=True)
class Path:
    """Links of a transfer (distinct indices) and the share of its bytes on each.

    Attributes
    ----------
    links : numpy.ndarray
        Link indices (``intp``), each once.
    weights : numpy.ndarray or None
        Share in (0, 1] of the transfer's bytes on each link; None when every link
        carries all of them (one path).
    """

    links: np.ndarray
    weights: np.ndarray | None = None
    shares: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # ``weights``, or ones for a single path: kept, not rebuilt at every use.
        ones = self.weights is None
        object.__setattr__(self, "shares", np.ones(len(self.links)) if ones else self.weights)

    def alias(self) -> Path:
        """A new path object on this one's arrays (a route inside a server is the same for
        every rail; routes are numbered by object identity, arrays shared by their ids).

        >>> p = Path(np.array([2, 5]))
        >>> q = p.alias()
        >>> q is p, q.links is p.links, q.shares is p.shares
        (False, True, True)
        """
        new = object.__new__(Path)
        new.__dict__.update(self.__dict__)
        return new

    def latency_s(self, latency: np.ndarray) -> float:
        """Route latency (s): the sum of per-hop latencies weighted by share (every equal-cost
        path has the same hop count, so a single path's sum when latencies match); summed
        in link order below :data:`SEQUENTIAL_DOT` links, as :func:`latencies` does."""
        if len(self.links) >= SEQUENTIAL_DOT:
            return float(np.dot(latency[self.links], self.shares))
        total = 0.0
        for term in (latency[self.links] * self.shares).tolist():
            total += term
        return total


def merge(parts: list[tuple[tuple[int, ...] | list[int], float]]) -> Path:
    """One :class:`Path` from routes with their shares (shares of a link add up).

    >>> p = merge([((0, 1), 0.5), ((0, 2), 0.5)])
    >>> p.links.tolist(), p.weights.tolist()
    ([0, 1, 2], [1.0, 0.5, 0.5])
    >>> merge([((3, 4), 1.0)]).weights is None
    True
    """
    if len(parts) == 1 and parts[0][1] == 1.0:  # one route (most in-server paths)
        uniq = sorted(set(parts[0][0]))
        if len(uniq) == len(parts[0][0]):  # no link twice: every share is 1
            return Path(np.array(uniq, dtype=np.intp), None)
    acc: dict[int, float] = {}
    for links, share in parts:
        for li in links:
            acc[li] = acc.get(li, 0.0) + share
    order = sorted(acc)
    vals = [acc[i] for i in order]
    # np.allclose(vals, 1.0, rtol=0, atol=1e-12) in plain Python: numpy's overhead per
    # call was most of the cost of routing 30k adaptive paths
    one = all(abs(v - 1.0) <= 1e-12 for v in vals)
    return Path(np.array(order, dtype=np.intp), None if one else np.array(vals))


def latencies(
    ptr: np.ndarray, links: np.ndarray, shares: np.ndarray, latency: np.ndarray
) -> np.ndarray:
    """:meth:`Path.latency_s` of every path of a CSR array (path ``i``: ``links`` and
    ``shares`` at ``ptr[i]:ptr[i+1]``; ``ptr`` may cover a part of them), seconds: the
    same bits.

    Paths under :data:`SEQUENTIAL_DOT` links are summed together, one link position at a
    time (link order, in a handful of array operations instead of one call per path);
    longer ones by the dot product each.

    >>> lat = np.array([1e-6, 2e-7, 3e-9])
    >>> latencies(np.array([0, 2, 2, 3]), np.array([0, 1, 2]), np.array([1.0, 0.5, 1.0]), lat)
    array([1.1e-06, 0.0e+00, 3.0e-09])
    """
    count = np.diff(ptr)
    out = np.zeros(len(count))
    short = count < SEQUENTIAL_DOT
    if short.any():
        rows, width = np.flatnonzero(short), int(count[short].max())
        n = count[rows]
        start = np.repeat(ptr[rows], n)
        col = np.arange(len(start)) - np.repeat(np.cumsum(n) - n, n)
        at = start + col
        table = np.zeros((len(rows), width))
        table[np.repeat(np.arange(len(rows)), n), col] = latency[links[at]] * shares[at]
        acc = np.zeros(len(rows))
        for c in range(width):  # ((0 + p0) + p1) + ...: padding adds 0.0, exactly
            acc += table[:, c]
        out[rows] = acc
    for i in np.flatnonzero(~short).tolist():
        a, b = int(ptr[i]), int(ptr[i + 1])
        out[i] = np.dot(latency[links[a:b]], shares[a:b])
    return out
