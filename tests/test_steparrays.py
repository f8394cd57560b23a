"""Steps as arrays (sim.collectives.steparrays): the speed-ups change no number.

The closed form and the link counters now work on numbered routes and per-step arrays,
and pipelined phases hand the closed form their base steps (``Phase.parts``). Each test
compares against the plain per-transfer computation they replaced, exactly (``==``):
the array code sums in the same order, so not even the last bit may move.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.collectives.engine import RouteCache, schedule_link_bytes, step_cost
from sim.collectives.schedule import Schedule, Transfer
from sim.collectives.simulate import CollectiveSetup
from sim.collectives.steparrays import StepMemo, phase_step, step_arrays, step_loads
from sim.topology.congestion import effective_capacity
from sim.topology.model import Topology
from sim.topology.paths import Path, latencies, merge
from sim.topology.presets import load_topology


def batch_capacity(topology: Topology, flat_links: np.ndarray) -> np.ndarray:
    """Every link's capacity less the incast loss of lossy links crossed by several of the
    batch's transfers (the reference formula, over all links)."""
    flows = np.bincount(flat_links, minlength=len(topology.capacity_Bps))
    return effective_capacity(topology.capacity_Bps, topology.link_loss, flows)


def _reference_cost(
    sched: Schedule, trs: Sequence[Transfer], endpoints: Sequence[str], routes: RouteCache
) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """The per-transfer step cost before the array version: (latency, drain, scope, sent)."""
    topo = routes.topology
    pairs = [(endpoints[t.src], endpoints[t.dst], t.rail) for t in trs]
    facts = [routes.facts(a, b, r) for a, b, r in pairs]
    size = np.array([len(t.chunks) for t in trs], dtype=float) * sched.chunk_bytes
    paths = [routes.path(a, b, r) for a, b, r in pairs]
    sent: dict[int, float] = {}
    for t in trs:
        if t.src < sched.n:
            sent[t.src] = sent.get(t.src, 0.0) + len(t.chunks) * sched.chunk_bytes
    payload = np.array([sent.get(t.src, 0.0) for t in trs])
    drain = np.zeros(len(trs))
    counts = np.array([len(p.links) for p in paths], dtype=np.intp)
    if counts.sum():
        flat = np.concatenate([p.links for p in paths])
        share = np.concatenate([p.shares for p in paths])
        owner = np.repeat(np.arange(len(trs)), counts)
        load = np.zeros(len(topo.capacity_Bps))
        np.add.at(load, flat, size[owner] * share)
        np.maximum.at(drain, owner, load[flat] / batch_capacity(topo, flat)[flat])
    lat = np.array([f[0] for f in facts])
    return lat, drain, max((f[2] for f in facts), default=0), payload


def _reference_link_bytes(sched: Schedule, setup: CollectiveSetup, scale: float) -> np.ndarray:
    """Per-transfer link counters, walking ``steps(k)`` (not the pipelined parts)."""
    out = np.zeros(len(setup.topology.capacity_Bps))
    ends = setup.endpoints(sched)
    for phase in sched.phases:
        reps = range(1) if phase.uniform else range(phase.repeat)
        mult = phase.repeat if phase.uniform else 1
        for k in reps:
            for t in phase.steps(k):
                path = setup.routes.path(ends[t.src], ends[t.dst], t.rail)
                if len(path.links):
                    np.add.at(out, path.links,
                              path.shares * (len(t.chunks) * sched.chunk_bytes * scale * mult))  # fmt: skip
    return out


_SETUPS: dict[str, CollectiveSetup] = {}


def _setup(name: str) -> CollectiveSetup:
    """4 servers of 8 H100: NDR InfiniBand (lossless) or 400G RoCE (incast loss)."""
    if name not in _SETUPS:
        _SETUPS[name] = CollectiveSetup(load_topology(name, nodes=4))
    return _SETUPS[name]


CASES = [
    ("all_reduce", "ring"), ("all_reduce", "tree"), ("all_reduce", "nvls_tree"),
    ("all_reduce", "rhd"), ("all_reduce", "hierarchical"), ("all_gather", "ring"),
    ("broadcast", "tree"), ("all_to_all", "direct"),
]  # fmt: skip


@settings(max_examples=25, deadline=None)
@given(
    topo=st.sampled_from(["h100-ib-ndr", "h100-roce-400g"]),
    case=st.sampled_from(CASES),
    size=st.floats(min_value=8.0, max_value=4e9),
    depth=st.sampled_from([None, 1, 3, 16]),
)
def test_step_cost_equals_per_transfer_reference(
    topo: str, case: tuple[str, str], size: float, depth: int | None
) -> None:
    """Every step's latency and scope are bit-identical to the per-transfer computation,
    pipelined or not, with and without incast loss; its drain time and sender payload equal
    to the last bits (summed in another order: 1 part in 1e16)."""
    setup = _setup(topo)
    op, algo = case
    sched = setup.schedule(op, algo, size, 0, depth)
    ends = setup.endpoints(sched)
    for phase in sched.phases:
        for k in range(min(phase.repeat, 6)):
            trs = phase.steps(k)
            if not trs:
                continue
            got = step_cost(sched, trs, ends, setup.routes)
            lat, drain, scope, sent = _reference_cost(sched, trs, ends, setup.routes)
            assert np.array_equal(got.latency_s, lat)
            np.testing.assert_allclose(got.drain_s, drain, rtol=1e-12, atol=0.0)
            assert got.scope == ("nvlink", "pcie", "net")[scope]
            np.testing.assert_allclose(got.src_payload_bytes, sent, rtol=1e-12, atol=0.0)


@pytest.mark.parametrize("topo", ["h100-ib-ndr", "h100-roce-400g"])
@pytest.mark.parametrize("case", CASES)
def test_link_bytes_equal_per_transfer_reference(topo: str, case: tuple[str, str]) -> None:
    """Link counters from the pipelined parts equal those from every slot's transfers."""
    setup = _setup(topo)
    op, algo = case
    for size, depth in ((1e3, None), (5e8, 8)):
        sched = setup.schedule(op, algo, size, 0, depth)
        got = schedule_link_bytes(sched, setup.endpoints(sched), setup.routes, 1.25)
        assert np.array_equal(got, _reference_link_bytes(sched, setup, 1.25))


@pytest.mark.parametrize("algo", ["tree", "nvls_tree", "ring"])
def test_pipelined_parts_are_the_slots_transfers(algo: str) -> None:
    """A pipelined phase's parts hold exactly its steps' transfers (chunk ids aside), in
    order, and a base step is the same list object wherever it recurs."""
    setup = _setup("h100-ib-ndr")
    op = "broadcast" if algo == "ring" else "all_reduce"
    sched = setup.schedule(op, algo, 1e8, 0, 8)
    with_parts = [p for p in sched.phases if p.parts is not None]
    assert with_parts, "a pipelined schedule exposes its base steps"
    seen: dict[int, list[tuple[int, int, int, int, bool]]] = {}
    for phase in with_parts:
        assert phase.parts is not None
        for k in range(phase.repeat):
            parts = phase.parts(k)
            flat = [(t.src, t.dst, t.rail, len(t.chunks), t.reduce) for p in parts for t in p]
            want = [(t.src, t.dst, t.rail, len(t.chunks), t.reduce) for t in phase.steps(k)]
            assert flat == want
            for p in parts:
                key = [(t.src, t.dst, t.rail, len(t.chunks), t.reduce) for t in p]
                assert seen.setdefault(id(p), key) == key


@pytest.mark.parametrize("algo", ["tree", "nvls_tree"])
def test_equal_slots_are_one_object_with_the_slots_arrays(algo: str) -> None:
    """Through one StepMemo every slot's arrays equal the slot's own transfers converted
    afresh, and slots whose arrays are equal are one object (NVLS-tree's ring steps over
    16 servers differ only in chunk ids: most of its 4-deep slots repeat), never two
    objects for one content."""
    setup = CollectiveSetup(load_topology("h100-ib-ndr", nodes=16))
    sched = setup.schedule("all_reduce", algo, 1e8, 0, 4)
    ends = setup.endpoints(sched)
    table, memo = setup.routes.table, StepMemo()
    by_content: dict[bytes, int] = {}
    slots = 0
    for phase in sched.phases:
        for k in range(phase.repeat):
            got = phase_step(phase, k, ends, table, memo)
            fresh = step_arrays(phase.steps(k), ends, table)
            for a, b in (
                (got.route, fresh.route),
                (got.chunks, fresh.chunks),
                (got.src, fresh.src),
            ):
                assert np.array_equal(a, b)
            key = got.route.tobytes() + got.chunks.tobytes() + got.src.tobytes()
            assert by_content.setdefault(key, id(got)) == id(got)
            slots += 1
    if algo == "nvls_tree":
        assert len(by_content) < slots / 2


def test_topology_indexes_match_the_graph() -> None:
    """Cached server of each GPU, GPUs of each server and scope masks agree with the graph."""
    topo: Topology = load_topology("h100-ib-ndr", nodes=3)
    for g in topo.gpus:
        assert topo.node_of(g) == int(topo.graph.nodes[g]["node"])
    for node in range(3):
        assert topo.server_gpus(node) == tuple(g for g in topo.gpus if topo.node_of(g) == node)
    assert topo.server_gpus(99) == ()
    masks = [topo.scope_mask(s) for s in ("nvlink", "pcie", "net")]
    assert sum(int(m.sum()) for m in masks) == len(topo.links)
    assert np.array_equal(masks[2], np.array([s == "net" for s in topo.link_scope]))


@given(st.lists(st.floats(min_value=0.01, max_value=1.0), min_size=1, max_size=6))
def test_merge_single_path_check_matches_allclose(shares: list[float]) -> None:
    """merge() drops the weights exactly when np.allclose(w, 1, rtol=0, atol=1e-12) holds."""
    p = merge([((0, i + 1), s) for i, s in enumerate(shares)])
    w = np.array([sum(shares), *shares])
    assert (p.weights is None) == bool(np.allclose(w, 1.0, rtol=0, atol=1e-12))


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 40), st.booleans()), min_size=1, max_size=12),
    st.integers(0, 2**31 - 1),
)
def test_batched_route_latencies_are_each_paths_bits(
    shape: list[tuple[int, bool]], seed: int
) -> None:
    """latencies() over a CSR array gives each Path.latency_s exactly (==): empty, short
    (summed column by column) and long (dot product) paths, with and without weights."""
    rng = np.random.default_rng(seed)
    latency = rng.random(64) * 10.0 ** rng.integers(-9, -5, 64)
    paths = [
        Path(rng.choice(64, n, replace=False), rng.random(n) + 0.01 if weighted else None)
        for n, weighted in shape
    ]
    ptr = np.concatenate([[0], np.cumsum([len(p.links) for p in paths])])
    links = np.concatenate([p.links for p in paths]).astype(np.intp)
    shares = np.concatenate([p.shares for p in paths])
    got = latencies(ptr, links, shares, latency)
    assert got.tolist() == [p.latency_s(latency) for p in paths]
    tail = latencies(ptr[1:], links, shares, latency)  # a part of the table (freeze's chunks)
    assert tail.tolist() == got[1:].tolist()


@pytest.mark.parametrize("topo", ["h100-ib-ndr", "aws-p5-efa", "h100-roce-400g-qp8"])
def test_route_table_facts_equal_each_routes(topo: str) -> None:
    """The table's batched latency and scope of every route a tuning numbers (on 8
    servers: adaptive spreads of 262 links, weighted queue-pair paths of 22, in-server
    aliases for every rail) equal RouteCache.facts, route by route."""
    setup = CollectiveSetup(load_topology(topo, nodes=8))
    setup.tune("all_reduce", 2**26)
    table = setup.routes.table
    table.freeze()
    for (src, dst, rail), i in table._ids.items():
        lat, _, scope = setup.routes.facts(src, dst, rail)
        assert (table.latency_s[i], table.scope[i]) == (lat, scope)
    few = RouteCache(setup.topology, setup.routes.rail_map).table  # a few routes per freeze
    for k, key in enumerate(list(table._ids)[::7]):
        few.id(*key)
        if k % 3 == 0:
            few.freeze()
    few.freeze()
    assert few.latency_s.tolist() == table.latency_s[: len(table._ids) : 7].tolist()
    assert few.scope.tolist() == table.scope[: len(table._ids) : 7].tolist()


def test_route_facts_in_chunks_of_links(monkeypatch: pytest.MonkeyPatch) -> None:
    """freeze() costing the new routes in chunks of a few links (a 16k-GPU table's
    bound, made small) gives each route's facts, exactly."""
    from sim.collectives import steparrays

    monkeypatch.setattr(steparrays, "FACTS_CHUNK_LINKS", 7)
    setup = CollectiveSetup(load_topology("aws-p5-efa", nodes=4))
    g = setup.topology.gpus
    keys = [(a, b, r) for a in g[:12] for b in g[::5] for r in (-1, 1)]
    table = RouteCache(setup.topology, setup.routes.rail_map).table
    table.ids(keys)
    table.freeze()
    for key, i in table._ids.items():
        lat, _, scope = setup.routes.facts(*key)
        assert (table.latency_s[i], table.scope[i]) == (lat, scope)


def _run_flow(batch: bool, caps: list[float], sizes: list[float]) -> tuple[float, np.ndarray]:
    """Transfers between GPUs of a 2-server cluster (one to itself, one of zero bytes)
    started one by one under ``all_of`` or as one batch: (finish time s, link bytes)."""
    import simpy

    from sim.network.flow import FlowNetwork

    topo = load_topology("h100-roce-400g", nodes=2)
    g = topo.gpus
    pairs = [(g[0], g[9]), (g[1], g[9]), (g[2], g[2]), (g[3], g[12]), (g[4], g[5])]
    env = simpy.Environment()
    net = FlowNetwork(env, topo)
    if batch:
        paths = [topo.path(a, b) for a, b in pairs]
        lats = np.array([p.latency_s(topo.latency_s) for p in paths])
        ev = net.transfer_batch(paths, lats, np.array(sizes), np.array(caps), "x")
    else:
        ev = env.all_of([net.transfer(a, b, s, c, -1, "x")
                         for (a, b), s, c in zip(pairs, sizes, caps, strict=True)])  # fmt: skip
    env.run(ev)
    env.run()
    return float(env.now), net.link_bytes


@given(
    sizes=st.lists(st.sampled_from([0.0, 1.0, 3e6, 2e8]), min_size=5, max_size=5),
    caps=st.lists(st.sampled_from([np.inf, 1e9, 4e10]), min_size=5, max_size=5),
)
@settings(max_examples=15, deadline=None)
def test_transfer_batch_equals_all_of_transfers(sizes: list[float], caps: list[float]) -> None:
    """A batch lands when the last of its transfers would, with the same link counters,
    on a lossy fabric with shared links, rate caps, a self transfer and zero bytes."""
    t_one, bytes_one = _run_flow(False, caps, sizes)
    t_batch, bytes_batch = _run_flow(True, caps, sizes)
    assert t_batch == t_one
    assert np.array_equal(bytes_batch, bytes_one)


def test_transfer_batch_rejects_bad_sizes() -> None:
    """Negative sizes and non-positive caps are refused, as by transfer()."""
    import simpy

    from sim.network.flow import FlowNetwork

    topo = load_topology("h100-ib-ndr", nodes=1)
    net = FlowNetwork(simpy.Environment(), topo)
    path = [topo.path(topo.gpus[0], topo.gpus[1])]
    with pytest.raises(ValueError, match="nbytes"):
        net.transfer_batch(path, np.zeros(1), np.array([-1.0]), np.array([np.inf]))
    with pytest.raises(ValueError, match="max_rate"):
        net.transfer_batch(path, np.zeros(1), np.array([1.0]), np.array([0.0]))


@pytest.mark.parametrize("topo", ["h100-ib-ndr", "h100-roce-400g"])
@pytest.mark.parametrize("case", CASES)
def test_dense_and_sparse_link_loads_agree_bit_for_bit(
    topo: str, case: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loads summed over every link (bincount) or over the touched links (sort): the same
    drain times to the last bit, with and without incast loss."""
    from sim.collectives import steparrays

    setup = _setup(topo)
    table = setup.routes.table
    sched = setup.schedule(case[0], case[1], 3e8, 0, 4)
    ends = setup.endpoints(sched)
    steps = [
        step_arrays(phase.steps(k), ends, table)
        for phase in sched.phases
        for k in range(min(phase.repeat, 4))
    ]
    got = {}
    for ratio in (0, 10**9):  # never dense, always dense
        monkeypatch.setattr(steparrays, "DENSE_RATIO", ratio)
        got[ratio] = [step_loads(table, s, sched.chunk_bytes)[0] for s in steps]
    assert all(np.array_equal(a, b) for a, b in zip(got[0], got[10**9], strict=True))
