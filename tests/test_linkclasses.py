"""Link classes (sim.topology.linkclasses): one constraint per class of links that carry the
same flows leaves max-min rates bit-identical, and the partition stays valid as paths come."""

from __future__ import annotations

import numpy as np
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.network.flow import FlowNetwork
from sim.network.maxmin import check_maxmin, pad_paths, progressive_fill
from sim.topology.linkclasses import LinkClasses
from sim.topology.paths import Path, merge
from sim.training.setup import cached_topology

NUM_LINKS = 12


@st.composite
def flows(draw: st.DrawFn) -> tuple[list[Path], np.ndarray]:
    """Paths over 12 links, some split over several routes (shares), and capacities drawn
    from a few values so that classes of equal capacity exist."""
    paths = []
    for _ in range(draw(st.integers(1, 12))):
        routes = draw(st.lists(st.lists(st.integers(0, NUM_LINKS - 1), min_size=1, max_size=5,
                                        unique=True), min_size=1, max_size=3))  # fmt: skip
        paths.append(merge([(r, 1.0 / len(routes)) for r in routes]))
    cap = np.array(draw(st.lists(st.sampled_from([1.0, 2.0, 5.0]), min_size=NUM_LINKS,
                                 max_size=NUM_LINKS)))  # fmt: skip
    return paths, cap


def _rows(paths: list[Path]) -> tuple[np.ndarray, np.ndarray]:
    hops = pad_paths([p.links.tolist() for p in paths], NUM_LINKS)
    share = np.zeros(hops.shape)
    for i, p in enumerate(paths):
        share[i, : len(p.links)] = p.shares
    return hops, share


@settings(max_examples=200, deadline=None)
@given(flows())
def test_one_link_per_class_gives_bit_identical_maxmin_rates(case: tuple) -> None:
    """Rates solved over the kept links equal those over all links, bit for bit, and are
    max-min fair on the full set of links (the independent checker)."""
    paths, cap = case
    classes = LinkClasses(cap, np.zeros(NUM_LINKS))
    classes.observe_all(paths)
    hops, share = _rows(paths)
    small_hops, small_share = classes.reduce(hops, share)
    full = progressive_fill(hops, cap, None, share)
    reduced = progressive_fill(small_hops, cap, None, small_share)
    assert full.tobytes() == reduced.tobytes()
    check_maxmin([p.links.tolist() for p in paths], cap, reduced,
                 weights=[p.shares.tolist() for p in paths])  # fmt: skip
    assert small_hops.shape[1] <= hops.shape[1]


@settings(max_examples=200, deadline=None)
@given(flows())
def test_every_path_crosses_a_class_whole_with_one_share_or_not_at_all(case: tuple) -> None:
    """The partition's invariant, checked path by path after all were observed."""
    paths, cap = case
    classes = LinkClasses(cap, np.zeros(NUM_LINKS))
    classes.observe_all(paths)
    members: dict[int, set[int]] = {}
    for li, k in enumerate(classes._class):
        if k >= 0:
            members.setdefault(k, set()).add(li)
    for p in paths:
        on = dict(zip(p.links.tolist(), p.shares.tolist(), strict=True))
        for links in members.values():
            crossed = links & on.keys()
            assert not crossed or (crossed == links and len({on[li] for li in links}) == 1)
            assert len({cap[li] for li in links}) == 1
    for links in members.values():  # one kept link per class
        assert sum(bool(classes.keep[li]) for li in links) == 1


def test_a_split_counts_a_version_and_moves_the_representative() -> None:
    classes = LinkClasses(np.ones(3), np.zeros(3))
    classes.observe(Path(np.array([0, 1, 2])))
    assert classes.keep.tolist() == [True, False, False, False] and classes.version == 0
    classes.observe(Path(np.array([1, 2]), np.array([0.5, 1.0])))  # 0 alone; 1 and 2 apart
    assert classes.keep.tolist() == [True, True, True, False] and classes.version >= 1


def test_unequal_capacity_or_loss_never_shares_a_class() -> None:
    classes = LinkClasses(np.array([1.0, 2.0, 1.0]), np.array([0.0, 0.0, 0.3]))
    classes.observe(Path(np.array([0, 1, 2])))
    assert classes.keep[:3].all()


def test_adaptive_fat_tree_step_is_unchanged_and_solves_far_fewer_hops() -> None:
    """An all-to-all of 64 GPUs on adaptive-routed InfiniBand: the same arrival times and
    link bytes as a network that keeps every link, checked fair at every solve (debug)."""
    topo = cached_topology("h100-ib-ndr", 8, 0)
    assert topo.routing == "adaptive"
    gpus = topo.gpus
    pairs = [(a, b) for i, a in enumerate(gpus) for b in gpus[i % 8 :: 9] if a != b]

    def run(reduce: bool) -> tuple[list[float], np.ndarray, int, int]:
        env = simpy.Environment()
        net = FlowNetwork(env, topo, debug=True)
        if not reduce:  # a partition with every link its own class
            net._classes = LinkClasses(topo.capacity_Bps, topo.link_loss)
            assert net._classes.keep[:-1].all()  # a fresh partition keeps every link
            net._classes.observe_all = lambda paths: None  # type: ignore[method-assign]
        done: list[float] = []
        for k, (a, b) in enumerate(pairs):
            ev = net.transfer(a, b, 1e6 * (1 + k % 5))
            ev.callbacks.append(lambda _e: done.append(env.now))
        widths = []
        env.process(_watch(env, net, widths))
        env.run()
        return done, net.link_bytes, max(widths), net.solves

    small, full = run(True), run(False)
    assert small[0] == full[0] and small[3] == full[3]
    assert small[1].tobytes() == full[1].tobytes()
    assert small[2] < full[2]


def _watch(env: simpy.Environment, net: FlowNetwork, widths: list[int]):  # type: ignore[no-untyped-def]
    while True:
        widths.append(net._flows.hops.shape[1] if len(net._flows) else 0)
        if not net.busy and env.now > 0:
            return
        yield env.timeout(1e-5)
