"""The flow network's bookkeeping at scale: steps shared by the sizes of a sweep, arrival
events by number, bytes counted per route. Each must leave the simulation unchanged."""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st
from test_collective_schedules import grid_cases

from sim.collectives.algorithms import ALGORITHMS, SUPPORTED, Layout
from sim.collectives.simulate import SIZE_SHAPED, CollectiveSetup, simulate_collective
from sim.network.arrivals import Arrivals, Countdown
from sim.network.routebytes import RouteBytes
from sim.topology.paths import Path
from sim.topology.presets import load_topology


def _steps(s: object) -> list[list[tuple[int, int, int, bool, int]]]:
    out = []
    for phase in s.phases:  # type: ignore[attr-defined]
        for k in range(phase.repeat):
            out.append([(t.src, t.dst, len(t.chunks), t.reduce, t.rail) for t in phase.steps(k)])
    return out


@pytest.mark.parametrize(
    ("name", "op", "n", "layout", "channels", "chunks", "root"),
    [c for c in grid_cases() if c[0] not in SIZE_SHAPED and c[2] in (2, 5, 8)],
)
def test_steps_depend_on_the_size_only_through_chunk_bytes(
    name: str, op: str, n: int, layout: object, channels: int, chunks: int, root: int
) -> None:
    """What lets the sizes of a sweep share their step arrays (Schedule.key): every
    algorithm outside SIZE_SHAPED builds the same transfers at any size."""
    args = {"layout": layout, "channels": channels, "root": root, "pipeline_chunks": chunks}
    small = ALGORITHMS[name](op, n, 8.0, **args)
    big = ALGORITHMS[name](op, n, 3.0 * 2**30, **args)
    assert small.nchunks == big.nchunks and _steps(small) == _steps(big)


def test_gloo_steps_do_depend_on_the_size() -> None:
    """Why gloo is in SIZE_SHAPED: its segments follow the size."""
    assert "gloo" in SIZE_SHAPED and "gloo" in SUPPORTED
    flat = Layout.flat(4)
    small = ALGORITHMS["gloo"]("all_reduce", 4, 64.0, layout=flat)
    big = ALGORITHMS["gloo"]("all_reduce", 4, 2.0**30, layout=flat)
    assert small.nchunks != big.nchunks


def test_a_sweep_gives_what_fresh_setups_give() -> None:
    """Sizes run on one setup (steps and solves reused) equal each size on its own setup."""
    topo = load_topology("h100-ib-ndr", nodes=4)
    shared = CollectiveSetup(topo)
    for size in (8.0, 2.0**16, 2.0**24, 2.0**30):
        a = simulate_collective(shared, "all_reduce", size)
        b = simulate_collective(CollectiveSetup(topo), "all_reduce", size)
        assert (a.time_s, a.algorithm, a.protocol) == (b.time_s, b.algorithm, b.protocol)
        assert a.wire_bytes_by_scope == pytest.approx(b.wire_bytes_by_scope, rel=1e-12)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from([1.0, 2.0])), min_size=1,
                max_size=30))  # fmt: skip
def test_events_fire_in_the_order_one_by_one_reporting_gives(flows: list) -> None:
    """Flows report to plain events (numbers 0, 1) and countdowns (2, 3); landing them by
    number fires the events at the same times and in the same order as telling each
    event once per flow, in flow order (one flow, one latency and several latencies take
    different paths through ``land``)."""

    def run(by_number: bool) -> list[tuple[float, int]]:
        env = simpy.Environment()
        fired: list[tuple[float, int]] = []
        per = [sum(1 for e, _ in flows if e == k) for k in range(4)]
        events: list[simpy.Event | Countdown] = []
        for k in range(4):
            ev = env.event()
            ev.callbacks.append(lambda _e, k=k: fired.append((env.now, k)))
            events.append(ev if k < 2 else Countdown(ev, max(per[k], 1)))
        ids = np.array([e for e, _ in flows])
        lat = np.array([x for _, x in flows])
        ok = [k for k in range(4) if k >= 2 or per[k] == 1]  # a plain event fires once
        keep = np.isin(ids, ok)
        if by_number:
            arr = Arrivals(env)
            nums = [arr.register(e) for e in events]
            arr.land(np.array(nums)[ids[keep]], lat[keep])
        else:
            for e, x in zip(ids[keep].tolist(), lat[keep].tolist(), strict=True):
                t = env.timeout(x)
                t.callbacks.append(lambda _t, e=e: events[e].succeed())
        env.run()
        if by_number:
            assert arr.landing == 0  # every landed flow counted off once
        return fired

    by_number, one_by_one = run(True), run(False)
    assert sorted(by_number) == sorted(one_by_one)
    for t in {x for x, _ in one_by_one}:  # same order within each instant
        assert [k for x, k in by_number if x == t] == [k for x, k in one_by_one if x == t]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.floats(0, 1e9), st.integers(0, 2)),
                min_size=1, max_size=40))  # fmt: skip
def test_bytes_per_route_equal_bytes_added_per_flow(flows: list) -> None:
    """Counting per route and spreading when read equals adding each flow's bytes to its
    links (shares included), in total and per tag (tag 0 counts in the total only)."""
    paths = [Path(np.array([0, 1])), Path(np.array([1, 2]), np.array([0.5, 0.5])),
             Path(np.array([3])), Path(np.array([0, 3, 4]), np.array([1.0, 0.25, 0.75])),
             Path(np.array([2, 4]))]  # fmt: skip
    rb = RouteBytes(5)
    nums = rb.numbers(paths)
    want, tagged = np.zeros(5), {1: np.zeros(5), 2: np.zeros(5)}
    for r, b, t in flows:
        np.add.at(want, paths[r].links, paths[r].shares * b)
        if t:
            np.add.at(tagged[t], paths[r].links, paths[r].shares * b)
    half = len(flows) // 2
    for part in (flows[:half], flows[half:]):
        if part:
            r, b, t = (np.array(x) for x in zip(*part, strict=True))
            rb.add(nums[r], b.astype(float), t, ["", "dp", "tp"])
    assert rb.link_bytes == pytest.approx(want, rel=1e-12, abs=1e-3)
    for t, name in ((1, "dp"), (2, "tp")):
        got = rb.by_tag.get(name, np.zeros(5))
        assert got == pytest.approx(tagged[t], rel=1e-12, abs=1e-3)
