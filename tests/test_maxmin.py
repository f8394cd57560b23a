"""Max-min fair rates: the solver against an exact reference and an independent checker."""

from __future__ import annotations

import itertools
import time
from fractions import Fraction
from unittest import mock

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.network import maxmin
from sim.network.maxmin import (
    check_maxmin,
    maxmin_rates,
    pad_paths,
    progressive_fill,
    stable_order,
)


def reference_maxmin(paths: list[list[int]], capacity: list[int]) -> list[Fraction | None]:
    """Exact max-min rates by bottleneck removal, in rationals (None = empty path, inf).

    Repeatedly take the link with the smallest fair share (remaining capacity over
    the number of unfixed flows on it), fix those flows at that share, charge their
    rate to every link they cross, and forget them.
    """
    remaining = [Fraction(c) for c in capacity]
    rates: list[Fraction | None] = [None] * len(paths)
    unfixed = {f for f, p in enumerate(paths) if p}
    while unfixed:
        users: dict[int, list[int]] = {}
        for f in unfixed:
            for link in paths[f]:
                users.setdefault(link, []).append(f)
        link = min(users, key=lambda k: remaining[k] / len(users[k]))
        share = remaining[link] / len(users[link])
        for f in set(users[link]):
            rates[f] = share
            unfixed.discard(f)
            for hop in paths[f]:
                remaining[hop] -= share
    return rates


@st.composite
def networks(draw: st.DrawFn) -> tuple[list[list[int]], list[int]]:
    """A random connected switch graph (3-8 nodes), integer capacities, 1-12 flows."""
    n = draw(st.integers(3, 8))
    g = nx.DiGraph()
    edges = {(i, draw(st.integers(0, i - 1))) for i in range(1, n)}
    extra = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=8))
    edges |= {(a, b) for a, b in extra if a != b}
    for a, b in edges:
        g.add_edge(a, b, capacity=draw(st.integers(1, 20)))
        g.add_edge(b, a, capacity=draw(st.integers(1, 20)))
    links = list(g.edges())
    index = {e: i for i, e in enumerate(links)}
    pairs = draw(
        st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), min_size=1, max_size=12)
    )
    paths = []
    for s, d in pairs:
        nodes = nx.shortest_path(g, s, d)
        paths.append([index[(u, v)] for u, v in itertools.pairwise(nodes)])
    return paths, [int(g.edges[e]["capacity"]) for e in links]


@settings(max_examples=200, deadline=None)
@given(networks())
def test_rates_equal_exact_reference(net: tuple[list[list[int]], list[int]]) -> None:
    """On random graphs the solver matches exact bottleneck removal to 1e-12."""
    paths, capacity = net
    rates = maxmin_rates(paths, np.array(capacity, dtype=float))
    for got, want in zip(rates.tolist(), reference_maxmin(paths, capacity), strict=True):
        if want is None:
            assert got == float("inf")
        else:
            assert got == pytest.approx(float(want), rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(networks())
def test_rates_pass_checker(net: tuple[list[list[int]], list[int]]) -> None:
    """Solver output is feasible and every flow has a saturated bottleneck it tops."""
    paths, capacity = net
    cap = np.array(capacity, dtype=float)
    check_maxmin(paths, cap, maxmin_rates(paths, cap))


@settings(max_examples=100, deadline=None)
@given(networks(), st.data())
def test_checker_rejects_perturbed_rates(
    net: tuple[list[list[int]], list[int]], data: st.DataObject
) -> None:
    """Raising a flow overloads its bottleneck; lowering it leaves it no bottleneck."""
    paths, capacity = net
    cap = np.array(capacity, dtype=float)
    rates = maxmin_rates(paths, cap)
    routed = [f for f, p in enumerate(paths) if p]
    if not routed:
        return
    f = data.draw(st.sampled_from(routed))
    for factor in (1.01, 0.99):
        bad = rates.copy()
        bad[f] *= factor
        with pytest.raises(AssertionError):
            check_maxmin(paths, cap, bad)


@settings(max_examples=50, deadline=None)
@given(networks())
def test_sparse_incidence_input_matches_paths(net: tuple[list[list[int]], list[int]]) -> None:
    """A flows x links CSR incidence matrix gives the same rates as path lists."""
    paths, capacity = net
    cap = np.array(capacity, dtype=float)
    rows = [f for f, p in enumerate(paths) for _ in p]
    cols = [link for p in paths for link in p]
    inc = sp.csr_matrix((np.ones(len(cols)), (rows, cols)), shape=(len(paths), cap.size))
    np.testing.assert_array_equal(maxmin_rates(inc, cap), maxmin_rates(paths, cap))


def test_textbook_example() -> None:
    """Three flows on a 2-link line (Bertsekas & Gallager style): long flow gets 1/2."""
    # link 0 cap 1 shared by flows 0 and 2; link 1 cap 2 shared by flows 1 and 2
    rates = maxmin_rates([[0], [1], [0, 1]], np.array([1.0, 2.0]))
    assert rates.tolist() == [0.5, 1.5, 0.5]


def test_empty_path_gets_infinite_rate_and_no_flows_is_empty() -> None:
    """src == dst needs no link: rate inf; no flows: an empty result."""
    assert maxmin_rates([[], [0]], np.array([3.0])).tolist() == [float("inf"), 3.0]
    assert maxmin_rates([], np.array([3.0])).shape == (0,)


def test_repeated_link_counts_twice() -> None:
    """A flow crossing a link twice uses twice its rate there."""
    assert maxmin_rates([[0, 0], [0]], np.array([3.0])).tolist() == [1.0, 1.0]


def test_pad_paths_layout() -> None:
    """Rows are padded with the link count; widths follow the longest path."""
    assert pad_paths([[2], [0, 1, 2]], 5).tolist() == [[2, 5, 5], [0, 1, 2]]


def test_symmetric_pattern_single_round() -> None:
    """30k ring flows on a star: one bottleneck level, all rates equal."""
    n = 30_000
    src = np.arange(n)
    hops = np.stack([src, n + (src + 1) % n], axis=1)  # up-link of src, down-link of dst
    rates = progressive_fill(hops, np.full(2 * n, 5.0))
    assert np.all(rates == 5.0)


def test_30k_flows_six_hops_is_fast() -> None:
    """30k random 6-hop flows over 3k links with 4 capacity classes solve quickly."""
    rng = np.random.default_rng(0)
    num_links = 3_000
    hops = rng.integers(0, num_links, size=(30_000, 6))
    cap = rng.choice([25e9, 50e9, 100e9, 400e9], size=num_links)
    progressive_fill(hops, cap)  # warm up
    t0 = time.perf_counter()
    rates = progressive_fill(hops, cap)
    assert time.perf_counter() - t0 < 2.0  # loose: CI machines vary; benchmark has numbers
    load = np.bincount(hops.ravel(), weights=np.repeat(rates, 6), minlength=num_links)
    assert np.all(load <= cap * (1 + 1e-9))


@settings(max_examples=200, deadline=None)
@given(
    networks(), st.lists(st.sampled_from([1.0, 2.5, 4.0, float("inf")]), min_size=12, max_size=12)
)
def test_scanned_and_indexed_rounds_give_the_same_bits(
    net: tuple[list[list[int]], list[int]], caps: list[float]
) -> None:
    """Whether a round finds the flows on its saturated links by scanning every unfrozen
    flow or through the link -> flows index (``SCAN_ROUNDS``: when the index is built),
    the rates are the same, bit for bit, with and without per-flow caps."""
    paths, capacity = net
    hops, cap = pad_paths(paths, len(capacity)), np.array(capacity, dtype=float)
    flow_caps = np.array(caps[: len(paths)])
    for c in (None, flow_caps):
        runs = []
        for scans in (1, 2, 10**9):
            with mock.patch.object(maxmin, "SCAN_ROUNDS", scans):
                runs.append(progressive_fill(hops, cap, c))
        assert all(np.array_equal(runs[0], r) for r in runs[1:])


@given(st.integers(1, 2**34), st.lists(st.integers(0, 2**34 - 1), max_size=300),
       st.integers(0, 2**32))  # fmt: skip
def test_stable_order_is_numpy_s_stable_argsort(top: int, raw: list[int], seed: int) -> None:
    """The radix passes give exactly ``np.argsort(kind="stable")`` for keys below ``top``,
    on every side of the 16- and 32-bit boundaries (ties keep their order)."""
    rng = np.random.default_rng(seed)
    keys = np.array([k % top for k in raw] + list(rng.integers(0, top, 50)), dtype=np.intp)
    assert np.array_equal(stable_order(keys, top), np.argsort(keys, kind="stable"))


@pytest.mark.parametrize("top", [1, 2**16, 2**16 + 1, 2**32, 2**32 + 1])
def test_stable_order_at_the_pass_boundaries(top: int) -> None:
    keys = np.array([top - 1, 0, top - 1, top // 2, 0], dtype=np.intp)
    assert np.array_equal(stable_order(keys, top), np.argsort(keys, kind="stable"))
