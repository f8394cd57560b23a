"""Network backends: closed-form timings, agreement without contention, fairness, batching."""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any

import networkx as nx
import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.catalog import GpuSpec
from sim.errors import ConfigError
from sim.network import (
    BACKENDS,
    AnalyticalNetwork,
    FakeNetwork,
    FlowNetwork,
    make_network,
    uncontended_time_s,
)
from sim.topology.model import Topology

SPEC = GpuSpec(
    name="X",
    peak_flops={"bf16": 1e15},
    hbm_bytes=8e10,
    hbm_Bps=3e12,
    tdp_w=700,
    nvlink=None,
    pcie="pcie-gen5",
)

Edge = tuple[str, str, float, float]  # (u, v, capacity_Bps, latency_s), one direction


def build(edges: Sequence[Edge], gpus: Sequence[str]) -> Topology:
    """Topology from directed edges; names in ``gpus`` are GPUs, others switches."""
    g = nx.DiGraph()
    for name in {x for e in edges for x in e[:2]}:
        if name in gpus:
            g.add_node(name, kind="gpu", node=0)
        else:
            g.add_node(name, kind="leaf")
    for u, v, cap, lat in edges:
        g.add_edge(u, v, capacity_Bps=cap, latency_s=lat, kind="test", scope="net")
    return Topology(name="t", graph=g, gpus=tuple(gpus), gpu=SPEC, nodes=1, gpus_per_node=len(gpus))


def duplex(u: str, v: str, cap: float, lat: float) -> list[Edge]:
    return [(u, v, cap, lat), (v, u, cap, lat)]


def star(n: int, cap: float = 100.0, lat: float = 0.5) -> Topology:
    """``n`` GPUs ``g0..`` on switch ``sw``; every GPU link ``cap`` B/s, ``lat`` s each way."""
    gpus = [f"g{i}" for i in range(n)]
    return build([e for g in gpus for e in duplex(g, "sw", cap, lat)], gpus)


def dumbbell(cap: float = 100.0, core: float = 100.0, lat: float = 0.0) -> Topology:
    """a0, a1 on switch A; b0, b1 on switch B; one A<->B link of ``core`` B/s."""
    edges = duplex("A", "B", core, lat)
    for g, sw in (("a0", "A"), ("a1", "A"), ("b0", "B"), ("b1", "B")):
        edges += duplex(g, sw, cap, lat)
    return build(edges, ["a0", "a1", "b0", "b1"])


Start = tuple[float, str, str, float]  # (start time s, src, dst, nbytes)


def run(
    net_cls: Callable[..., object], topo: Topology, starts: Sequence[Start], **kw: bool
) -> list[float]:
    """Start each transfer at its time; return each one's landing time."""
    env = simpy.Environment()
    net = net_cls(env, topo, **kw)
    landed = [float("nan")] * len(starts)

    def one(i: int, t: float, src: str, dst: str, nbytes: float) -> Generator[simpy.Event]:
        yield env.timeout(t)
        yield net.transfer(src, dst, nbytes)  # type: ignore[attr-defined]
        landed[i] = env.now

    for i, s in enumerate(starts):
        env.process(one(i, *s))
    env.run()
    assert not net.busy  # type: ignore[attr-defined]
    return landed


# --- the flow backend's closed forms -------------------------------------------------


def test_two_flows_on_one_link_each_get_half() -> None:
    """Two equal transfers from one GPU share its up-link: both land at 2B/C + latency."""
    topo = star(3, cap=100.0, lat=0.5)  # route g0->sw->gX: 2 hops, 1 s latency
    times = run(FlowNetwork, topo, [(0, "g0", "g1", 300.0), (0, "g0", "g2", 300.0)])
    assert times == pytest.approx([600.0 / 100 + 1.0] * 2, rel=1e-12)


def test_early_finisher_frees_bandwidth() -> None:
    """Sizes B1 < B2 on one link: B1 lands at 2*B1/C + l, B2 at (B1 + B2)/C + l."""
    topo = star(3, cap=100.0, lat=0.5)
    times = run(FlowNetwork, topo, [(0, "g0", "g1", 100.0), (0, "g0", "g2", 500.0)])
    assert times == pytest.approx([2.0 + 1.0, 6.0 + 1.0], rel=1e-12)


def test_late_joiner_slows_the_first() -> None:
    """300 B alone for 1 s (100 sent), then 50/50: the joiner's 100 B drain by t=3, the
    first's last 100 B at full rate by t=4 (zero latency)."""
    topo = star(3, cap=100.0, lat=0.0)
    times = run(FlowNetwork, topo, [(0, "g0", "g1", 300.0), (1, "g0", "g2", 100.0)])
    assert times == pytest.approx([4.0, 3.0], rel=1e-12)


def test_disjoint_paths_do_not_interact() -> None:
    """g0->g1 and g2->g3 share no directed link: each runs at full rate."""
    topo = star(4, cap=100.0, lat=0.5)
    times = run(FlowNetwork, topo, [(0, "g0", "g1", 300.0), (0, "g2", "g3", 300.0)])
    assert times == pytest.approx([4.0, 4.0], rel=1e-12)


def test_opposite_directions_do_not_interact() -> None:
    """Links are directed: g0->g1 and g1->g0 each get the full capacity."""
    topo = star(2, cap=100.0, lat=0.0)
    times = run(FlowNetwork, topo, [(0, "g0", "g1", 200.0), (0, "g1", "g0", 200.0)])
    assert times == [2.0, 2.0]


def test_shared_core_and_shared_uplink() -> None:
    """Dumbbell, all links 100 B/s: a0->b0 and a1->b1 share the core, a1->b1 and a1->a0
    share a1's up-link; every flow is held to 50 B/s and lands after 100 B / 50 B/s."""
    topo = dumbbell(cap=100.0, core=100.0)
    starts = [(0.0, "a0", "b0", 100.0), (0.0, "a1", "b1", 100.0), (0.0, "a1", "a0", 100.0)]
    assert run(FlowNetwork, topo, starts) == pytest.approx([2.0, 2.0, 2.0], rel=1e-12)


def test_unequal_bottlenecks() -> None:
    """Core 60 B/s shared by a0->b0 and a1->b1 (30 each); a1->a0 takes a1's remaining 70."""
    topo = dumbbell(cap=100.0, core=60.0)
    starts = [(0.0, "a0", "b0", 30.0), (0.0, "a1", "b1", 30.0), (0.0, "a1", "a0", 70.0)]
    assert run(FlowNetwork, topo, starts) == pytest.approx([1.0, 1.0, 1.0], rel=1e-12)


def test_zero_bytes_and_self_transfers() -> None:
    """A zero-byte transfer lands after the route latency; one to itself lands at once."""
    topo = star(2, cap=100.0, lat=0.25)
    for cls in (FlowNetwork, AnalyticalNetwork):
        times = run(cls, topo, [(1.0, "g0", "g1", 0.0), (1.0, "g0", "g0", 500.0)])
        assert times == [1.5, 1.0]


def test_subnormal_size_does_not_stall() -> None:
    """5e-324 bytes drain in a time that underflows to 0: the flow still ends (found by
    hypothesis: the drain timer used to fire at t=0 forever)."""
    topo = star(2, cap=1e10, lat=0.25)
    assert run(FlowNetwork, topo, [(0.0, "g0", "g1", 5e-324)]) == [0.5]


@pytest.mark.parametrize("nbytes", [-1.0, float("nan"), float("inf")])
def test_bad_sizes_rejected(nbytes: float) -> None:
    """A negative or non-finite size is a caller bug: ValueError quoting the value."""
    for cls in (FlowNetwork, AnalyticalNetwork):
        net = cls(simpy.Environment(), star(2))
        with pytest.raises(ValueError, match=repr(nbytes)):
            net.transfer("g0", "g1", nbytes)


def test_link_bytes_and_busy() -> None:
    """Both backends count each transfer's bytes on each link of its route once landed."""
    topo = star(3)
    for cls in (FlowNetwork, AnalyticalNetwork):
        env = simpy.Environment()
        net = cls(env, topo)
        assert not net.busy
        net.transfer("g0", "g1", 10.0)
        net.transfer("g0", "g2", 5.0)
        assert net.busy and net.active_flows == 2
        env.run()
        assert not net.busy and net.active_flows == 0
        up = topo.link_index[("g0", "sw")]
        assert net.link_bytes[up] == 15.0
        assert net.link_bytes[topo.link_index[("sw", "g1")]] == 10.0
        assert net.link_bytes.sum() == 30.0


# --- flow vs analytical without contention --------------------------------------------


@st.composite
def random_topologies(draw: st.DrawFn) -> Topology:
    """3-8 switches (random tree + extra links), 2-6 GPUs hung on random switches."""
    n = draw(st.integers(3, 8))
    caps = st.sampled_from([12.5e9, 25e9, 50e9, 100e9, 400e9, 900e9])
    lats = st.floats(0.0, 5e-6)
    pairs = {(f"s{i}", f"s{draw(st.integers(0, i - 1))}") for i in range(1, n)}
    extra = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=6))
    pairs |= {(f"s{a}", f"s{b}") for a, b in extra if a != b}
    gpus = [f"g{i}" for i in range(draw(st.integers(2, 6)))]
    pairs |= {(g, f"s{draw(st.integers(0, n - 1))}") for g in gpus}
    edges = [e for u, v in sorted(pairs) for e in duplex(u, v, draw(caps), draw(lats))]
    return build(edges, gpus)


@settings(max_examples=80, deadline=None)
@given(random_topologies(), st.data())
def test_uncontended_flow_equals_analytical(topo: Topology, data: st.DataObject) -> None:
    """One transfer alone: flow and analytical land at start + uncontended_time_s (1e-12)."""
    src = data.draw(st.sampled_from(topo.gpus))
    dst = data.draw(st.sampled_from(topo.gpus))
    nbytes = data.draw(st.one_of(st.just(0.0), st.floats(1.0, 1e11)))
    t0 = data.draw(st.floats(0.0, 1e3))
    want = t0 + uncontended_time_s(topo, src, dst, nbytes)
    for cls in (FlowNetwork, AnalyticalNetwork):
        assert run(cls, topo, [(t0, src, dst, nbytes)]) == pytest.approx([want], rel=1e-12)


@settings(max_examples=30, deadline=None)
@given(random_topologies(), st.data())
def test_sequential_transfers_agree(topo: Topology, data: st.DataObject) -> None:
    """Back-to-back transfers (never overlapping) agree between the backends."""
    hops = data.draw(
        st.lists(
            st.tuples(st.sampled_from(topo.gpus), st.sampled_from(topo.gpus)),
            min_size=1,
            max_size=6,
        )
    )
    sizes = data.draw(st.lists(st.floats(0.0, 1e10), min_size=len(hops), max_size=len(hops)))

    def chain(cls: Callable[..., object]) -> list[float]:
        env = simpy.Environment()
        net = cls(env, topo)
        out: list[float] = []

        def proc() -> Generator[simpy.Event]:
            for (s, d), b in zip(hops, sizes, strict=True):
                yield net.transfer(s, d, b)  # type: ignore[attr-defined]
                out.append(env.now)

        env.process(proc())
        env.run()
        return out

    assert chain(FlowNetwork) == pytest.approx(chain(AnalyticalNetwork), rel=1e-12)


# --- random contended runs --------------------------------------------------------------


@st.composite
def workloads(draw: st.DrawFn) -> tuple[Topology, list[Start]]:
    topo = draw(random_topologies())
    start = st.tuples(
        st.sampled_from([0.0, 0.0, 1e-3, 2e-3, 5e-3]),
        st.sampled_from(topo.gpus),
        st.sampled_from(topo.gpus),
        st.sampled_from([0.0, 1e6, 1e7, 5e7, 3e8]),
    )
    return topo, draw(st.lists(start, min_size=1, max_size=12))


@settings(max_examples=60, deadline=None)
@given(workloads())
def test_random_run_is_fair_feasible_and_deterministic(work: tuple[Topology, list[Start]]) -> None:
    """Debug mode checks max-min fairness and capacity at every re-solve; every transfer
    lands no earlier than alone; bytes are conserved; reruns give identical times."""
    topo, starts = work
    times = run(FlowNetwork, topo, starts, debug=True)
    for (t0, s, d, b), t in zip(starts, times, strict=True):
        assert t >= (t0 + uncontended_time_s(topo, s, d, b)) * (1 - 1e-12)
    assert run(FlowNetwork, topo, starts, debug=True) == times
    env = simpy.Environment()
    net = FlowNetwork(env, topo)
    for _, s, d, b in starts:
        net.transfer(s, d, b)
    env.run()
    want = np.zeros(len(topo.links))
    for _, s, d, b in starts:
        for link in topo.route(s, d):
            want[link] += b
    np.testing.assert_allclose(net.link_bytes, want, rtol=1e-12)


def test_recorded_samples_respect_capacity() -> None:
    """With record=True each re-solve logs per-link aggregate rates, all within capacity."""
    topo = star(4, cap=100.0, lat=0.0)
    env = simpy.Environment()
    net = FlowNetwork(env, topo, record=True)
    for dst in ("g1", "g2", "g3"):
        net.transfer("g0", dst, 100.0 * int(dst[1]))
    env.run()
    assert [t for t, _, _ in net.samples] == pytest.approx([0.0, 3.0, 5.0, 6.0])
    for _, links, rates in net.samples:
        assert np.all(rates <= topo.capacity_Bps[links] * (1 + 1e-12))
    _, links, rates = net.samples[0]
    assert dict(zip(links.tolist(), rates.tolist(), strict=True))[
        topo.link_index[("g0", "sw")]
    ] == pytest.approx(100.0)
    assert net.samples[-1][1].size == 0  # idle at the end


# --- batching: one re-solve per instant ----------------------------------------------------


def test_many_starts_at_one_instant_cost_one_solve() -> None:
    """1000 ring transfers started at t=0, with a zero-delay yield between each start:
    one re-solve admits them all, one more when they all drain together."""
    n = 1000
    topo = star(n, cap=100.0, lat=0.5)
    env = simpy.Environment()
    net = FlowNetwork(env, topo)

    def sender() -> Generator[simpy.Event]:
        for i in range(n):
            net.transfer(f"g{i}", f"g{(i + 1) % n}", 100.0)
            yield env.timeout(0)  # other events of this instant run in between

    env.process(sender())
    env.run(until=0.5)
    assert net.solves == 1 and net.active_flows == n
    env.run()
    assert net.solves == 2 and env.now == pytest.approx(2.0)


def test_reaction_at_the_same_instant_shares_the_solve() -> None:
    """Zero latency: each landing starts the next transfer at the same instant; the drain
    and the next start are handled by one re-solve (5 transfers -> 5 + 1 solves)."""
    topo = star(2, cap=100.0, lat=0.0)
    env = simpy.Environment()
    net = FlowNetwork(env, topo)

    def chain() -> Generator[simpy.Event]:
        for _ in range(5):
            yield net.transfer("g0", "g1", 100.0)

    env.process(chain())
    env.run()
    assert env.now == 5.0 and net.solves == 6


def test_debug_mode_runs_the_checker(monkeypatch: pytest.MonkeyPatch) -> None:
    """With debug=True a wrong solver result is caught at the re-solve."""
    import sim.network.flow as flow

    monkeypatch.setattr(flow, "progressive_fill", lambda hops, *_: np.full(len(hops), 1e3))
    env = simpy.Environment()
    net = FlowNetwork(env, star(2, cap=100.0), debug=True)
    net.transfer("g0", "g1", 1.0)
    with pytest.raises(AssertionError, match="over capacity"):
        env.run()


def test_flows_finishing_together_cost_one_solve() -> None:
    """Three groups of 32 flows at 100/64 B/s each; the two 1-byte groups drain together
    (one re-solve), then the 3-byte group alone (one more): 3 re-solves in all."""
    topo = dumbbell(cap=100.0, core=100.0)
    env = simpy.Environment()
    net = FlowNetwork(env, topo)
    for _ in range(32):
        net.transfer("a0", "b0", 1.0)  # shares the core with a1->b1
        net.transfer("a1", "a0", 3.0)  # shares a1's up-link with a1->b1
        net.transfer("a1", "b1", 1.0)
    env.run()
    assert net.solves == 3
    assert env.now == pytest.approx(64 / 100 + 2 * 32 / 100, rel=1e-12)


def test_solves_follow_simpy_clock_only() -> None:
    """run(until=...) stops mid-transfer and resumes exactly: no hidden event loop."""
    topo = star(2, cap=100.0, lat=0.0)
    env = simpy.Environment()
    net = FlowNetwork(env, topo)
    ev = net.transfer("g0", "g1", 250.0)
    env.run(until=1.0)
    assert not ev.triggered and net.busy
    env.run(until=ev)
    assert env.now == 2.5


# --- fake backend and the factory ---------------------------------------------------------


def test_fake_network_default_one_second_and_time_fn() -> None:
    """Fake: 1 s per transfer by default, or whatever time_fn says; transfers logged."""
    env = simpy.Environment()
    net = FakeNetwork(env)
    net.transfer("a", "b", 1e12)
    env.run()
    assert env.now == 1.0 and net.log == [(0.0, "a", "b", 1e12)] and not net.busy
    fast = FakeNetwork(env, star(2), time_fn=lambda s, d, n: n / 4)
    fast.transfer("g0", "g1", 8.0)
    env.run()
    assert env.now == 3.0 and fast.link_bytes.sum() == 16.0


def test_make_network_builds_each_backend() -> None:
    """Every name in BACKENDS builds its backend, which has the whole Network interface,
    and only the closed-form one is marked so."""
    topo = star(2)
    kinds = {"flow": FlowNetwork, "analytical": AnalyticalNetwork}
    assert set(BACKENDS) == set(kinds)
    for name, spec in BACKENDS.items():
        net = make_network(name, simpy.Environment(), topo)
        assert isinstance(net, kinds[name]) and spec.name == name
        for attr in ("transfer", "transfer_routes", "expect_routes", "add_link_bytes",
                     "link_bytes", "link_bytes_by_tag", "samples", "busy"):  # fmt: skip
            assert hasattr(net, attr), (name, attr)
    assert [n for n, s in BACKENDS.items() if s.closed_form] == ["analytical"]


def test_make_network_bad_name_is_config_error() -> None:
    """An unknown name raises ConfigError quoting it and listing the allowed ones."""
    with pytest.raises(ConfigError, match=r"'packet'.*flow, analytical"):
        make_network("packet", simpy.Environment(), star(2))


# --- per-transfer rate caps (a sender's NCCL channels) ------------------------------


@settings(max_examples=60, deadline=None)
@given(
    paths=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=3), min_size=1, max_size=8),
    caps=st.lists(st.one_of(st.just(float("inf")), st.floats(0.1, 50.0)), min_size=8, max_size=8),
)
def test_capped_rates_are_maxmin_fair_with_caps_as_private_links(
    paths: list[list[int]], caps: list[float]
) -> None:
    """Max-min with per-flow caps equals max-min where each cap is a link of its own:
    the independent checker accepts it, and no flow exceeds its cap."""
    from sim.network.maxmin import check_maxmin, pad_paths, progressive_fill, with_flow_caps

    capacity = np.array([10.0, 4.0, 7.0, 1.5])
    cap = np.array(caps[: len(paths)])
    hops = pad_paths(paths, capacity.size)
    rates = progressive_fill(hops, capacity, cap)
    assert np.all(rates <= cap * (1 + 1e-12))
    h, c = with_flow_caps(hops, capacity, cap)
    check_maxmin([row[row < c.size] for row in h], c, rates)


@pytest.mark.parametrize("backend", [AnalyticalNetwork, FlowNetwork])
def test_a_capped_transfer_drains_at_its_cap(backend: Callable[..., Any]) -> None:
    """One transfer of 100 B on a 100 B/s link capped at 20 B/s: 5 s plus latency."""
    env = simpy.Environment()
    net = backend(env, star(2, cap=100.0, lat=0.5))
    done = net.transfer("g0", "g1", 100.0, max_rate_Bps=20.0)
    env.run(done)
    route_latency = 2 * 0.5  # g0 -> hub -> g1
    assert env.now == pytest.approx(5.0 + route_latency)


def test_a_capped_flow_leaves_the_rest_to_others() -> None:
    """Flow backend: two transfers share a 100 B/s link; one capped at 20 B/s, so the
    other gets 80 B/s (max-min with the cap as a private link)."""
    env = simpy.Environment()
    net = FlowNetwork(env, star(2, cap=100.0, lat=0.0))
    slow = net.transfer("g0", "g1", 40.0, max_rate_Bps=20.0)
    fast = net.transfer("g0", "g1", 160.0)
    env.run(fast)
    assert env.now == pytest.approx(2.0)
    env.run(slow)
    assert env.now == pytest.approx(2.0)


@pytest.mark.parametrize("backend", [AnalyticalNetwork, FlowNetwork])
def test_a_non_positive_cap_is_refused(backend: Callable[..., Any]) -> None:
    env = simpy.Environment()
    net = backend(env, star(2))
    with pytest.raises(ValueError, match="max_rate_Bps must be > 0"):
        net.transfer("g0", "g1", 1.0, max_rate_Bps=0.0)


@pytest.mark.parametrize("backend", [AnalyticalNetwork, FlowNetwork])
def test_tagged_bytes_add_up_to_the_link_counters(backend: Callable[..., Any]) -> None:
    """Bytes per tag on each link sum to the link's bytes; untagged bytes count only there."""
    env = simpy.Environment()
    topo = star(3, cap=100.0, lat=0.0)
    net = backend(env, topo)
    net.transfer("g0", "g1", 100.0, tag="dp")
    net.transfer("g0", "g2", 50.0, tag="pp")
    net.transfer("g1", "g2", 30.0, tag="dp")
    env.run()
    tagged = sum(net.link_bytes_by_tag.values())
    np.testing.assert_allclose(tagged, net.link_bytes)
    assert net.link_bytes_by_tag["dp"][topo.link_index[("g0", "sw")]] == 100.0
    assert net.link_bytes_by_tag["pp"][topo.link_index[("sw", "g2")]] == 50.0
