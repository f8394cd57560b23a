"""Max-min fair sharing of directed links by flows, and an independent checker.

A *flow* is a path: a sequence of link indices. Every flow gets a rate (bytes/s) such
that no link carries more than its capacity and no flow can be given more without
taking from a flow whose rate is no larger (max-min fairness). The solver is
progressive filling (water-filling): raise every unfrozen flow's rate together until
some link saturates, freeze the flows crossing it, repeat. One round per distinct
bottleneck level; a round is two vectorised scans over the links plus work in
proportion to the flows it freezes (so a symmetric collective step, one level, costs
about as much as building the link -> flows index).

Internally paths are a padded 2-D integer array ``hops`` of shape ``(flows, max_hops)``
whose unused cells hold the pad value ``len(capacity)``: indexing an array of length
``len(capacity) + 1`` by ``hops`` is then one fancy-indexing operation, the pad cell
being a link of infinite capacity that never saturates. A link appearing twice in one
path counts twice (the flow uses it twice).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

if TYPE_CHECKING:
    import scipy.sparse as sp

__all__ = [
    "check_maxmin",
    "maxmin_rates",
    "pad_paths",
    "progressive_fill",
    "stable_order",
    "with_flow_caps",
]

#: Links whose fair share is within this relative distance of the round's minimum
#: saturate together; it merges levels that are equal in exact arithmetic but differ
#: by rounding, so a symmetric pattern takes one round, not one per link.
SHARE_RTOL = 1e-10
#: Rounds of a solve that find the flows on saturated links by a masked scan of every
#: unfrozen flow's hops before a link -> flows index is built for the rounds after (most
#: solves of a collective's steps end within two or three rounds, where the index's sort
#: cost more than the scans; hashed ECMP routes give tens of rate levels, where it pays).
SCAN_ROUNDS = 3

Paths: TypeAlias = "Sequence[Sequence[int]] | sp.csr_matrix | sp.csr_array"


def _sparse(paths: object) -> Any:
    """``paths`` as a scipy CSR matrix when it is a scipy sparse matrix, else None.

    scipy is not imported here: a caller that passes a sparse matrix has imported it.
    """
    sparse = sys.modules.get("scipy.sparse")
    return sparse.csr_matrix(paths) if sparse is not None and sparse.issparse(paths) else None


def pad_paths(paths: Paths, num_links: int) -> np.ndarray:
    """Padded ``(flows, max_hops)`` link-index array of ``paths``; pad value ``num_links``.

    Parameters
    ----------
    paths : sequence of sequences of int, or scipy.sparse CSR matrix
        One path (link indices) per flow, or a flows x links incidence matrix whose
        entries count how many times the flow crosses the link.
    num_links : int
        Number of links; also the pad value.

    Returns
    -------
    numpy.ndarray
        Integer array of shape ``(flows, max_hops)``.

    Examples
    --------
    >>> pad_paths([[0, 2], [], [1]], 3).tolist()
    [[0, 2], [3, 3], [1, 3]]
    """
    csr = _sparse(paths)
    if csr is not None:
        counts = np.rint(csr.data).astype(np.intp)
        flat = np.repeat(csr.indices.astype(np.intp), counts)
        row_nnz = np.diff(csr.indptr)
        rows = np.repeat(np.arange(csr.shape[0]), row_nnz)
        lengths = np.bincount(rows, weights=counts, minlength=csr.shape[0]).astype(np.intp)
    else:
        seq: list[Sequence[int]] = list(paths)
        lengths = np.fromiter((len(p) for p in seq), dtype=np.intp, count=len(seq))
        total = int(lengths.sum())
        flat = np.fromiter(itertools.chain.from_iterable(seq), dtype=np.intp, count=total)
    width = int(lengths.max()) if lengths.size else 0
    hops = np.full((lengths.size, width), num_links, dtype=np.intp)
    hops[np.arange(width) < lengths[:, None]] = flat
    return hops


def with_flow_caps(
    hops: np.ndarray, capacity: np.ndarray, caps: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Hops and capacities with each finite per-flow cap as a private link of its own.

    Max-min fairness with per-flow rate caps is max-min fairness on the graph where every
    capped flow also crosses a link that only it uses, of capacity equal to its cap.

    >>> h, c = with_flow_caps(np.array([[0], [0]]), np.array([4.0]), np.array([1.0, np.inf]))
    >>> h.tolist(), c.tolist()
    ([[0, 1], [0, 2]], [4.0, 1.0])
    """
    capped = np.flatnonzero(np.isfinite(caps))
    if not capped.size:
        return hops, capacity
    num_links = capacity.size
    pad = num_links + capped.size
    out = np.where(hops == num_links, pad, hops)
    extra = np.full((hops.shape[0], 1), pad, dtype=np.intp)
    extra[capped, 0] = num_links + np.arange(capped.size)
    return np.hstack([out, extra]), np.concatenate([capacity, caps[capped]])


def progressive_fill(
    hops: np.ndarray,
    capacity: np.ndarray,
    caps: np.ndarray | None = None,
    weights: np.ndarray | None = None,
    loss: np.ndarray | None = None,
) -> np.ndarray:
    """Max-min fair rates (bytes/s) of flows given as a padded hop array.

    Parameters
    ----------
    hops : numpy.ndarray
        Integer array ``(flows, max_hops)`` of link indices, padded with
        ``len(capacity)`` (see :func:`pad_paths`).
    capacity : numpy.ndarray
        Capacity of each link, bytes/s, all > 0.
    caps : numpy.ndarray, optional
        Per-flow rate caps, bytes/s (``inf``: none): as a private link of that capacity
        crossed by the flow alone (see :func:`with_flow_caps`).
    weights : numpy.ndarray, optional
        Share of each flow's bytes on each of its hops (same shape as ``hops``; pad
        cells ignored): a flow split over several paths (adaptive routing, several
        queue pairs) at rate ``r`` loads hop ``j`` with ``weights[j] * r``. Default 1.
    loss : numpy.ndarray, optional
        Incast loss of each link (:func:`sim.topology.congestion.effective_capacity`):
        a link crossed by ``k`` flows offers ``capacity * (1 - loss * (1 - 1/k))``.

    Returns
    -------
    numpy.ndarray
        Rate of each flow in bytes/s; ``inf`` for a flow with no link and no cap.

    Notes
    -----
    Works on the links the flows use only (renumbered ``0..k-1``), so a solve costs
    ``O(flows x hops)`` per round whatever the size of the topology; a round finds the
    flows crossing a saturated link by one masked scan over the unfrozen flows' hops.

    Examples
    --------
    >>> progressive_fill(np.array([[0, 1], [1, 2]]), np.array([1.0, 4.0])).tolist()
    [1.0, 3.0]
    >>> progressive_fill(np.array([[0], [0]]), np.array([4.0]), np.array([1.0, np.inf])).tolist()
    [1.0, 3.0]

    A flow split half-half over links 0 and 1 (1 B/s each) runs at 2 B/s:

    >>> two = np.array([1.0, 1.0])
    >>> progressive_fill(np.array([[0, 1]]), two, None, np.array([[0.5, 0.5]])).tolist()
    [2.0]
    """
    capacity = np.asarray(capacity, dtype=float)
    rates = np.zeros(hops.shape[0])
    if not rates.size:
        return rates
    local, spare, ids = _used_links(hops, capacity)
    pad = spare.size - 1
    if loss is not None:  # effective capacity of the used links, by their flow counts
        flows = np.maximum(np.bincount(local.ravel(), minlength=pad + 1)[:pad], 1)
        spare[:pad] *= 1.0 - loss[ids] * (1.0 - 1.0 / flows)
    share = None if weights is None else np.where(local == pad, 0.0, weights)
    fill = _Fill(local, share, spare, caps, rates)
    with np.errstate(divide="ignore", invalid="ignore"):
        fill.rounds()
    return rates


def _used_links(
    hops: np.ndarray, capacity: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``hops`` renumbered over the links they use (pad: their count), those links'
    capacities with an infinite pad link appended, and their indices."""
    num_links = capacity.size
    used = np.zeros(num_links + 1, dtype=bool)
    used[hops] = True
    used[num_links] = False
    ids = np.flatnonzero(used)
    number = np.full(num_links + 1, ids.size, dtype=np.intp)
    number[ids] = np.arange(ids.size)
    return number[hops], np.append(capacity[ids], np.inf), ids


class _Fill:
    """The water-filling state over the used links (the last one the infinite pad)."""

    def __init__(self, hops: np.ndarray, share: np.ndarray | None, spare: np.ndarray,
                 caps: np.ndarray | None, rates: np.ndarray) -> None:  # fmt: skip
        self.hops, self.share, self.spare, self.rates = hops, share, spare, rates
        self.size = spare.size
        self.count = np.bincount(hops.ravel(), minlength=self.size)
        self.load = self._load(hops, share)
        capped = caps is not None and bool(np.isfinite(caps).any())
        self.caps = np.asarray(caps, dtype=float) if capped else None
        empty = (hops == self.size - 1).all(axis=1)
        if self.caps is not None:
            empty &= ~np.isfinite(self.caps)
        rates[empty] = np.inf  # no link and no cap: never shared
        self.active = np.flatnonzero(~empty)

    def _load(self, hops: np.ndarray, share: np.ndarray | None) -> np.ndarray:
        if share is None:
            return np.bincount(hops.ravel(), minlength=self.size).astype(float)
        return np.bincount(hops.ravel(), weights=share.ravel(), minlength=self.size)

    def cut(self) -> np.ndarray:
        """Fill level at which each link saturates (``inf``: no unfrozen flow on it, or
        the pad); the caller silences the 0-division."""
        level = self.spare / self.load
        level[self.count == 0] = np.inf
        level[-1] = np.inf
        return level

    def rounds(self) -> None:
        """Raise every unfrozen flow's rate until a link (or a flow's cap) saturates;
        freeze the flows there; repeat. The first :data:`SCAN_ROUNDS` rounds find the
        flows on saturated links by a masked scan of every unfrozen flow's hops; later
        rounds (many rate levels, as hashed ECMP routes give) through a link -> flows
        index of the flows left. Both find the same flows, in the same order."""
        level = 0.0
        index: tuple[np.ndarray, np.ndarray] | None = None
        frozen = np.zeros(self.hops.shape[0], dtype=bool)
        scans = 0
        while self.active.size:
            cut = self.cut()
            caps = None if self.caps is None else self.caps[self.active]
            s = float(cut.min()) if caps is None else min(float(cut.min()), float(caps.min()))
            if not np.isfinite(s):  # only flows on infinite-capacity links are left
                self.rates[self.active] = np.inf
                return
            level = max(level, s)  # rounding must not make a later level lower
            bound = level * (1.0 + SHARE_RTOL)
            if index is None:
                hit = (cut <= bound)[self.hops[self.active]].any(axis=1)
                if caps is not None:
                    hit |= caps <= bound
                flows = self.active[hit]
                scans += 1
            else:
                hit = np.zeros(frozen.size, dtype=bool)  # a mask: no sort per round
                hit[_gather(*index, np.flatnonzero(cut <= bound))] = True
                if caps is not None:
                    hit[self.active[caps <= bound]] = True
                flows = np.flatnonzero(hit & ~frozen)
            frozen[flows] = True
            self.active = self.active[~frozen[self.active]]
            self.rates[flows] = level
            if self.active.size:
                self._freeze(flows, level)
                if index is None and scans >= SCAN_ROUNDS:
                    index = _link_index(self.hops, self.active, self.size - 1)

    def _freeze(self, flows: np.ndarray, level: float) -> None:
        """Take the frozen ``flows`` (at ``level``) off their links' counts and loads."""
        touched = self.hops[flows]
        self.count -= np.bincount(touched.ravel(), minlength=self.size)
        gone = self._load(touched, None if self.share is None else self.share[flows])
        self.load -= gone
        self.spare -= level * gone


def _link_index(hops: np.ndarray, rows: np.ndarray, pad: int) -> tuple[np.ndarray, np.ndarray]:
    """Flows ``rows`` crossing each link as CSR ``(ptr, flows)`` (pad cells left out)."""
    flat = hops[rows].ravel()
    owner = np.repeat(rows, hops.shape[1])
    real = flat < pad
    flat, owner = flat[real], owner[real]
    order = stable_order(flat, pad)
    ptr = np.zeros(pad + 1, dtype=np.intp)
    np.cumsum(np.bincount(flat, minlength=pad), out=ptr[1:])
    return ptr, owner[order]


def stable_order(keys: np.ndarray, top: int) -> np.ndarray:
    """``np.argsort(keys, kind="stable")`` for integer ``keys`` in ``[0, top)``, by NumPy's
    radix sort: it sorts 16-bit keys stably in linear time (6-12x faster than the merge
    sort it runs on 64-bit ones, measured at 15-57k keys), so keys below 2**16 sort in one
    pass and keys below 2**32 in two (low half, then high half, each stable).

    >>> stable_order(np.array([70000, 3, 70000, 3, 65536]), 70001).tolist()
    [1, 3, 4, 0, 2]
    """
    if top <= 1 << 16:
        return np.argsort(keys.astype(np.uint16), kind="stable")
    if top > 1 << 32:
        return np.argsort(keys, kind="stable")
    low = np.argsort((keys & 0xFFFF).astype(np.uint16), kind="stable")
    return low[np.argsort((keys[low] >> 16).astype(np.uint16), kind="stable")]


def _gather(ptr: np.ndarray, items: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Concatenation of ``items[ptr[r]:ptr[r + 1]]`` over ``rows``, vectorised."""
    starts = ptr[rows]
    lengths = ptr[rows + 1] - starts
    ends = np.cumsum(lengths)
    offsets = np.repeat(starts - (ends - lengths), lengths)
    return items[np.arange(int(ends[-1]) if ends.size else 0) + offsets]


def maxmin_rates(paths: Paths, capacity: np.ndarray) -> np.ndarray:
    """Max-min fair rate of each flow, bytes/s, by progressive filling.

    Parameters
    ----------
    paths : sequence of sequences of int, or scipy.sparse CSR matrix
        One path (link indices into ``capacity``) per flow, or a flows x links
        incidence matrix (entry = times the flow crosses the link).
    capacity : numpy.ndarray
        Capacity of each link in bytes/s, all > 0.

    Returns
    -------
    numpy.ndarray
        Rate of each flow in bytes/s; ``inf`` for a flow with an empty path
        (``src == dst``).

    Examples
    --------
    Two flows share link 0 (10 B/s); the second also crosses link 1 (2 B/s):

    >>> maxmin_rates([[0], [0, 1]], np.array([10.0, 2.0])).tolist()
    [8.0, 2.0]
    """
    cap = np.asarray(capacity, dtype=float)
    return progressive_fill(pad_paths(paths, cap.size), cap)


def check_maxmin(
    paths: Paths,
    capacity: np.ndarray,
    rates: np.ndarray,
    rtol: float = 1e-9,
    weights: Sequence[Sequence[float]] | None = None,
) -> None:
    """Raise AssertionError, with the reason, unless ``rates`` are max-min fair.

    Checks, written independently of the solver (plain loops over flows): no link
    carries more than ``capacity * (1 + rtol)``; a flow with an empty path has rate
    ``inf``; every other flow has a finite rate >= 0 and a *bottleneck*: a link on its
    path that is saturated (load >= ``capacity * (1 - rtol)``) and on which no flow
    has a larger rate (up to ``rtol``). That is the characterisation of max-min
    fairness (Bertsekas & Gallager, *Data Networks*, 2nd ed., sec. 6.5.2).

    Parameters
    ----------
    paths : sequence of sequences of int, or scipy.sparse CSR matrix
        As for :func:`maxmin_rates`.
    capacity : numpy.ndarray
        Link capacities, bytes/s.
    rates : numpy.ndarray
        Flow rates to check, bytes/s.
    rtol : float
        Relative tolerance.
    weights : sequence of sequences of float, optional
        Share of each flow's bytes on each link of its path (default 1): a link then
        carries ``share * rate`` of the flow.

    Examples
    --------
    >>> check_maxmin([[0], [0]], np.array([2.0]), np.array([1.0, 1.0]))
    >>> check_maxmin([[0], [0]], np.array([2.0]), np.array([0.5, 1.5]))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    AssertionError: flow 0 (rate 0.5) has no bottleneck: ...
    """
    caps = [float(c) for c in np.asarray(capacity, dtype=float)]
    hops = pad_paths(paths, len(caps))
    flow_links = [[int(x) for x in row if x < len(caps)] for row in hops]
    rate = [float(r) for r in np.asarray(rates, dtype=float)]
    assert len(rate) == len(flow_links), f"{len(rate)} rates for {len(flow_links)} flows"
    load: dict[int, float] = {}
    top: dict[int, float] = {}
    for f, links in enumerate(flow_links):
        if not links:
            assert rate[f] == float("inf"), f"flow {f} has an empty path but rate {rate[f]}"
            continue
        assert 0.0 <= rate[f] < float("inf"), f"flow {f} has rate {rate[f]}"
        shares = [1.0] * len(links) if weights is None else [float(w) for w in weights[f]]
        for link, share in zip(links, shares, strict=True):
            load[link] = load.get(link, 0.0) + rate[f] * share
            top[link] = max(top.get(link, 0.0), rate[f])
    for link, x in load.items():
        assert x <= caps[link] * (1 + rtol), f"link {link} over capacity: {x} > {caps[link]}"
    for f, links in enumerate(flow_links):
        ok = any(
            load[link] >= caps[link] * (1 - rtol) and rate[f] >= top[link] * (1 - rtol)
            for link in links
        )
        assert ok or not links, (
            f"flow {f} (rate {rate[f]}) has no bottleneck: on each of its links "
            f"{links} there is spare capacity or a flow with a larger rate"
        )
