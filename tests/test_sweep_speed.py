"""Exact speed-ups of collective sweeps on the flow backend: results stay bit-identical."""

from __future__ import annotations

import numpy as np
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.collectives.simulate import CollectiveSetup, simulate_collective, sweep_sizes
from sim.network.flow import FlowNetwork
from sim.network.maxmin import progressive_fill
from sim.network.solvecache import SolveCache
from sim.topology.presets import load_topology


@st.composite
def flow_sets(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    links = draw(st.integers(1, 6))
    flows = draw(st.integers(1, 8))
    width = draw(st.integers(1, 3))
    hops = draw(st.lists(st.lists(st.integers(0, links), min_size=width, max_size=width),
                         min_size=flows, max_size=flows))  # fmt: skip
    cap = draw(st.lists(st.floats(0.5, 100.0), min_size=links, max_size=links))
    caps = draw(st.none() | st.lists(st.sampled_from([np.inf, 1.0, 7.5]), min_size=flows,
                                     max_size=flows))  # fmt: skip
    return np.array(hops), np.array(cap), None if caps is None else np.array(caps)


@settings(max_examples=60, deadline=None)
@given(flow_sets())
def test_cached_solve_equals_a_fresh_one(
    case: tuple[np.ndarray, np.ndarray, np.ndarray | None],
) -> None:
    """A hit returns the very rates a fresh solve gives, and a copy the caller may change."""
    hops, cap, caps = case
    cache = SolveCache()
    want = progressive_fill(hops, cap, caps)
    first = cache.solve(progressive_fill, hops, cap, caps, None)
    first[:] = -1.0  # a caller changing its rates must not change the cache
    again = cache.solve(progressive_fill, hops, cap, caps, None)
    assert again.tobytes() == want.tobytes()
    assert (cache.hits, cache.misses) == (1, 1)


def test_other_capacities_caps_or_shapes_miss() -> None:
    """Any input that differs (capacity, cap, hop array shape) is solved afresh."""
    cache = SolveCache()
    hops, cap = np.array([[0], [0]]), np.array([4.0])
    cache.solve(progressive_fill, hops, cap, None, None)
    assert cache.solve(progressive_fill, hops, np.array([6.0]), None, None).tolist() == [3.0, 3.0]
    capped = cache.solve(progressive_fill, hops, cap, np.array([1.0, np.inf]), None)
    assert capped.tolist() == [1.0, 3.0]
    padded = cache.solve(progressive_fill, np.array([[0, 1], [0, 1]]), cap, None, None)
    assert padded.tolist() == [2.0, 2.0]
    assert (cache.hits, cache.misses) == (0, 4)


def test_full_cache_keeps_solving_but_stores_nothing() -> None:
    """Past ``max_bytes`` new solves are not kept (memory stays bounded)."""
    cache = SolveCache(max_bytes=8)
    hops, cap = np.array([[0], [0]]), np.array([4.0])
    for _ in range(2):
        assert cache.solve(progressive_fill, hops, cap, None, None).tolist() == [2.0, 2.0]
    assert (cache.hits, cache.misses) == (0, 2)


def test_flow_network_with_cache_times_transfers_as_without() -> None:
    """Two runs of the same contended transfers on one shared cache: the second hits and
    lands at the same instant, bit for bit, as a network without a cache."""
    topo = load_topology("h100-ib-ndr", nodes=2)
    gpus = topo.gpus
    cache = SolveCache()
    ends = []
    for c in (None, cache, cache):
        env = simpy.Environment()
        net = FlowNetwork(env, topo, solve_cache=c)
        for i, size in enumerate((3e6, 1e6, 2e6)):  # three flows into one GPU
            net.transfer(gpus[i + 8], gpus[0], size)
        env.run()
        ends.append((env.now, net.link_bytes.tobytes(), net.solves))
    assert ends[0] == ends[1] == ends[2]
    assert cache.hits == ends[0][2] and cache.misses == ends[0][2]


def test_sweep_results_are_those_of_fresh_setups() -> None:
    """A sweep sharing one setup (and its solve cache) across sizes gives the records a
    fresh setup per size gives (the cache only skips repeated solves)."""
    topo = load_topology("h100-ib-ndr", nodes=4)
    shared = CollectiveSetup(topo)
    for size in sweep_sizes(8, 2**26, 16):
        got = simulate_collective(shared, "all_reduce", size)
        want = simulate_collective(CollectiveSetup(topo), "all_reduce", size)
        assert got == want
    assert shared.solve_cache.hits > 0
