"""Route-numbered solve cache keys (sim.network.solvecache.SolveCache.route_id)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.network.maxmin import progressive_fill
from sim.network.solvecache import SolveCache
from sim.topology.paths import Path


def _path(links: list[int], weights: list[float] | None = None) -> Path:
    w = None if weights is None else np.array(weights)
    return Path(np.array(links, dtype=np.intp), w)


def test_route_id_by_content() -> None:
    c = SolveCache()
    a, b = _path([0, 1]), _path([0, 1])  # distinct objects, equal content
    assert c.route_id(a) == c.route_id(b) == c.route_id(a)
    assert c.route_id(_path([1, 0])) != c.route_id(a)
    assert c.route_id(_path([0, 1], [1.0, 0.5])) != c.route_id(a)
    assert c.route_id(_path([0])) != c.route_id(_path([0, 1]))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=3, unique=True), min_size=1,
                max_size=6))  # fmt: skip
def test_solve_routes_matches_solver(rows: list[list[int]]) -> None:
    c = SolveCache()
    paths = [_path(r) for r in rows]
    width = max(len(r) for r in rows)
    hops = np.full((len(rows), width), 4, dtype=np.intp)
    for i, r in enumerate(rows):
        hops[i, : len(r)] = r
    cap = np.array([1.0, 2.0, 3.0, 4.0])
    routes = np.array([c.route_id(p) for p in paths], dtype=np.intp)
    want = progressive_fill(hops, cap, None, None)
    for _ in range(2):
        got = c.solve_routes(progressive_fill, routes, hops, cap, None, None)
        assert got.tobytes() == want.tobytes()
    assert (c.hits, c.misses) == (1, 1)
    # the same routes with per-flow caps are another solve
    c.solve_routes(progressive_fill, routes, hops, cap, np.full(len(rows), 0.5), None)
    assert c.misses == 2
