"""Every collective algorithm's schedules pass the one checker, and move the bytes NCCL does."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.collectives.algorithms import ALGORITHMS, SUPPORTED, Layout, applicable
from sim.collectives.checker import check_schedule, traffic
from sim.collectives.hierarchical import hierarchical
from sim.collectives.nvls import nvls
from sim.collectives.pipeline import pipeline
from sim.collectives.rhd import rhd
from sim.collectives.ring import ring
from sim.collectives.schedule import OPS, Phase, Schedule, Transfer
from sim.collectives.tree import btree, dtree_parents, tree
from sim.errors import ConfigError, UnsupportedCollectiveError

NS = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16)
NBYTES = 3.0 * 2**20


def layouts(name: str, n: int) -> Iterator[Layout]:
    """Layouts on which ``name`` applies for ``n`` ranks (server-major and interleaved)."""
    if name in ("hierarchical", "nvls_tree", "collnet"):
        for nv in (True, False) if name == "collnet" else (name == "nvls_tree",):
            for nodes in (2, 4):
                if n % nodes == 0 and n >= nodes:
                    sharp = name == "collnet"
                    yield Layout.grid(nodes, n // nodes, node_nvswitch=nv, sharp=sharp)
                    yield Layout(tuple(r % nodes for r in range(n)), node_nvswitch=nv, sharp=sharp)
    else:
        yield Layout.flat(n, nvswitch=name == "nvls")
        if n == 8:  # servers interleaved: ring/tree order is not rank order
            yield Layout(tuple(r % 2 for r in range(n)), nvswitch=name == "nvls")


def grid_cases() -> Iterator[tuple[str, str, int, Layout, int, int, int]]:
    for name, ops in SUPPORTED.items():
        for op in ops:
            for n in (2,) if op == "send_recv" else NS:
                roots = (0, n - 1) if op in ("broadcast", "reduce") else (0,)
                for layout in layouts(name, n):
                    for channels in (1, 2, 4):
                        for chunks in (1, 3):
                            for root in roots:
                                yield name, op, n, layout, channels, chunks, root


@pytest.mark.parametrize(
    ("name", "op", "n", "layout", "channels", "chunks", "root"), list(grid_cases())
)
def test_every_schedule_passes_the_checker(
    name: str, op: str, n: int, layout: Layout, channels: int, chunks: int, root: int
) -> None:
    """Every algorithm, op, group size, channel count and pipelining is a correct collective."""
    s = ALGORITHMS[name](
        op, n, NBYTES, layout=layout, channels=channels, root=root, pipeline_chunks=chunks
    )
    assert (s.op, s.algorithm, s.n) == (op, name, n)
    check_schedule(s, nbytes=NBYTES)


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    n=st.integers(1, 24),
    nbytes=st.just(0.0) | st.floats(1.0, 1e12),
    channels=st.integers(1, 4),
    chunks=st.integers(1, 5),
)
def test_random_groups_and_sizes_pass_the_checker(
    data: st.DataObject, n: int, nbytes: float, channels: int, chunks: int
) -> None:
    """Any group size, placement and buffer size gives a correct, byte-conserving schedule."""
    name = data.draw(st.sampled_from(["ring", "tree", "rhd", "nvls", "direct"]))
    op = data.draw(st.sampled_from(SUPPORTED[name]))
    n = 2 if op == "send_recv" else n
    root = data.draw(st.integers(0, n - 1))
    node_of = data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    layout = Layout(tuple(node_of), nvswitch=True)
    s = ALGORITHMS[name](
        op, n, nbytes, layout=layout, channels=channels, root=root, pipeline_chunks=chunks
    )
    check_schedule(s, nbytes=nbytes)


# --- closed forms ---------------------------------------------------------------------


def per_rank(s: Schedule) -> tuple[tuple[float, ...], tuple[float, ...]]:
    sent, received = traffic(s)
    return sent[: s.n], received[: s.n]


@pytest.mark.parametrize("n", [2, 3, 5, 8, 12])
@pytest.mark.parametrize("channels", [1, 4])
def test_ring_moves_nccl_bus_bytes(n: int, channels: int) -> None:
    """Ring all_reduce sends and receives 2(n-1)/n·nbytes per rank; AG/RS (n-1)/n."""
    lay = Layout.flat(n)
    for op, factor, steps in [
        ("all_reduce", 2 * (n - 1) / n, 2 * (n - 1)),
        ("all_gather", (n - 1) / n, n - 1),
        ("reduce_scatter", (n - 1) / n, n - 1),
    ]:
        s = ring(op, n, NBYTES, layout=lay, channels=channels)
        assert s.num_steps == steps
        sent, received = per_rank(s)
        for b in sent + received:
            assert math.isclose(b, factor * NBYTES)


def test_ring_phases_are_uniform_and_a_4096_rank_ring_is_lazy() -> None:
    """A 4096-rank, 8-channel ring builds without expanding its 8190 steps."""
    s = ring("all_reduce", 4096, 1e9, layout=Layout.flat(4096), channels=8)
    assert s.num_steps == 2 * 4095
    assert all(p.uniform for p in s.phases)
    assert len(s.phases[0].steps(17)) == 4096 * 8
    sent, _ = per_rank(s)
    assert math.isclose(sent[123], 2 * 4095 / 4096 * 1e9)


def test_ring_odd_channels_run_backwards() -> None:
    """Channel 0 sends to the next rank, channel 1 to the previous one."""
    s = ring("all_gather", 4, 4.0, layout=Layout.flat(4), channels=2)
    pairs = {(t.chunks[0] % 2, t.src, t.dst) for t in s.phases[0].steps(0)}
    assert {(0, 0, 1), (1, 1, 0)} <= pairs


@pytest.mark.parametrize("op", ["broadcast", "reduce"])
def test_ring_chain_is_pipelined(op: str) -> None:
    """A broadcast/reduce chain over n ranks with C pieces takes n-2+C steps, nbytes per hop."""
    n, c = 6, 4
    s = ring(op, n, NBYTES, layout=Layout.flat(n), root=2, pipeline_chunks=c)
    assert s.num_steps == n - 2 + c
    sent, received = per_rank(s)
    assert sum(sent) == pytest.approx((n - 1) * NBYTES)
    assert (sent if op == "broadcast" else received)[2] == pytest.approx(NBYTES)


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_rhd_power_of_two_bytes(n: int) -> None:
    """RHD all_reduce on 2^k ranks: 2·log2 n steps, 2(n-1)/n·nbytes per rank each way."""
    s = rhd("all_reduce", n, NBYTES, layout=Layout.flat(n))
    assert s.num_steps == 2 * int(math.log2(n))
    for b in sum(per_rank(s), ()):
        assert math.isclose(b, 2 * (n - 1) / n * NBYTES)


def test_rhd_fold_for_non_power_of_two() -> None:
    """n=6 folds 2 ranks: folded ranks send nbytes once, their partners add nbytes back."""
    n, p = 6, 4
    s = rhd("all_reduce", n, NBYTES, layout=Layout.flat(n))
    assert s.num_steps == 2 * 2 + 2
    sent, _ = per_rank(s)
    core = 2 * (p - 1) / p * NBYTES
    assert sent == pytest.approx([NBYTES, core + NBYTES, NBYTES, core + NBYTES, core, core])


@pytest.mark.parametrize("n", [2, 5, 8])
def test_nvls_bytes_per_rank(n: int) -> None:
    """NVLS all_reduce: nbytes·(1+1/n) out and in per rank; RS and AG are its halves."""
    lay = Layout.flat(n, nvswitch=True)
    expect = {
        "all_reduce": ((1 + 1 / n), (1 + 1 / n)),
        "reduce_scatter": (1.0, 1 / n),
        "all_gather": (1 / n, 1.0),
    }
    for op, (out, into) in expect.items():
        s = nvls(op, n, NBYTES, layout=lay, channels=2)
        assert s.reducers == 1
        sent, received = per_rank(s)
        assert sent == pytest.approx([out * NBYTES] * n)
        assert received == pytest.approx([into * NBYTES] * n)


def test_nvls_pipelined_steady_state_is_uniform() -> None:
    """With pipeline_chunks >= steps, the middle slots run every step and are uniform."""
    s = nvls("all_reduce", 4, NBYTES, layout=Layout.flat(4, nvswitch=True), pipeline_chunks=6)
    assert s.num_steps == 4 + 6 - 1
    assert [(p.repeat, p.uniform) for p in s.phases] == [(3, False), (3, True), (3, False)]
    check_schedule(s, NBYTES)


@pytest.mark.parametrize("n", [2, 3, 8])
def test_all_to_all_bytes_per_rank(n: int) -> None:
    """all_to_all: one step; each rank sends and receives (n-1)/n of its buffer."""
    s = ALGORITHMS["direct"]("all_to_all", n, NBYTES, layout=Layout.flat(n), channels=2)
    assert s.num_steps == 1
    for b in sum(per_rank(s), ()):
        assert math.isclose(b, (n - 1) / n * NBYTES)


def test_hierarchical_crosses_servers_with_one_gth_of_the_data() -> None:
    """2x4 all_reduce: 2(n-1)/n·nbytes per rank in all, 2(N-1)/(N·g)·nbytes across servers."""
    nodes, g = 2, 4
    lay = Layout.grid(nodes, g)
    s = hierarchical("all_reduce", nodes * g, NBYTES, layout=lay, channels=2)
    assert [p.repeat for p in s.phases] == [g - 1, nodes - 1, nodes - 1, g - 1]
    assert all(p.uniform for p in s.phases)
    sent, _ = per_rank(s)
    assert sent == pytest.approx([2 * 7 / 8 * NBYTES] * 8)
    cross = [0.0] * 8
    for p in s.phases:
        for k in range(p.repeat):
            for t in p.steps(k):
                if lay.node_of[t.src] != lay.node_of[t.dst]:
                    cross[t.src] += s.transfer_bytes(t)
    assert cross == pytest.approx([2 * (nodes - 1) / (nodes * g) * NBYTES] * 8)


# --- NCCL's trees ---------------------------------------------------------------------


def test_btree_matches_nccl_picture() -> None:
    """ncclGetBtree on 14 ranks: 0-8, 8-{4,12}, 4-{2,6}, 12-{10,13}, 2-{1,3}, ..."""
    parents = [btree(14, r)[0] for r in range(14)]
    assert parents == [-1, 2, 4, 2, 8, 6, 4, 6, 0, 10, 12, 10, 8, 12]
    assert btree(14, 12)[1:] == (10, 13)


@pytest.mark.parametrize("m", [2, 4, 6, 8, 14, 16, 24])
def test_double_tree_interior_ranks_are_leaves_in_the_other_tree(m: int) -> None:
    """For even m (NCCL's mirror tree) no rank has children in both trees."""
    first, second = dtree_parents(m)
    interior = [{p for p in parents if p >= 0} for parents in (first, second)]
    assert not interior[0] & interior[1]


@pytest.mark.parametrize(("n", "steps"), [(2, 2), (4, 4), (8, 6), (16, 8), (12, 8)])
def test_tree_all_reduce_over_servers_takes_twice_the_depth(n: int, steps: int) -> None:
    """One GPU per server: the double tree over servers, 2·ceil(log2 n) steps; each tree
    carries half."""
    s = tree("all_reduce", n, NBYTES, layout=Layout.grid(n, 1))
    assert s.num_steps == steps
    assert s.chunk_bytes == NBYTES / 2


@pytest.mark.parametrize(("nodes", "per_node", "steps"), [(1, 8, 14), (2, 8, 16), (4, 8, 18)])
def test_nccl_tree_chains_gpus_inside_a_server(nodes: int, per_node: int, steps: int) -> None:
    """NCCL's tree: a chain of the server's GPUs below its head, the double tree over
    servers: 2·((per_node - 1) + ceil(log2 nodes)) steps."""
    s = tree("all_reduce", nodes * per_node, NBYTES, layout=Layout.grid(nodes, per_node))
    assert s.num_steps == steps


def test_tree_channels_use_different_head_gpus() -> None:
    """Across servers, each channel's trees enter a server through a different GPU
    (hence NIC): the cross-server edges of 4 channels touch 8 distinct GPUs per server."""
    layout = Layout.grid(2, 8)
    s = tree("all_reduce", 16, NBYTES, layout=layout, channels=4)
    cross = {
        (t.src, t.dst)
        for k in range(s.num_steps)
        for t in s.phases[0].steps(k)
        if layout.node_of[t.src] != layout.node_of[t.dst]
    }
    assert len({r for pair in cross for r in pair if layout.node_of[r] == 0}) == 8


def test_tree_pipelining_overlaps_levels() -> None:
    """C pieces through a T-step tree take T + C - 1 steps."""
    s = tree("all_reduce", 8, NBYTES, layout=Layout.grid(8, 1), pipeline_chunks=5)
    assert s.num_steps == 6 + 5 - 1
    assert s.nchunks == 2 * 5


# --- pipeline transform ---------------------------------------------------------------


def test_pipeline_runs_step_k_of_piece_c_in_slot_k_plus_c() -> None:
    """Sub-buffer c's chunk j is j*C + c, and its step k lands in slot k + c."""
    chain = Phase(3, lambda k: [Transfer(k, k + 1, (0,))])
    s = pipeline(Schedule("broadcast", "ring", 4, 1, 8.0, (chain,)), 2)
    slots = [s.phases[0].steps(t) for t in range(s.num_steps)]
    assert [[(t.src, t.chunks) for t in slot] for slot in slots] == [
        [(0, (0,))],
        [(1, (0,)), (0, (1,))],
        [(2, (0,)), (1, (1,))],
        [(2, (1,))],
    ]
    check_schedule(s, 8.0)


# --- the checker catches broken schedules ---------------------------------------------


def one_step(op: str, n: int, transfers: list[Transfer]) -> Schedule:
    """A one-chunk, one-step schedule of ``transfers``."""
    return Schedule(op, "test", n, 1, 1.0, (Phase(1, lambda k: transfers),))


def test_checker_catches_double_counted_reduce() -> None:
    """Rank 1's contribution reaching rank 0 twice is an error."""
    bad = Schedule(
        "reduce",
        "test",
        3,
        1,
        1.0,
        (
            Phase(1, lambda k: [Transfer(1, 2, (0,), True)]),
            Phase(1, lambda k: [Transfer(2, 0, (0,), True), Transfer(1, 0, (0,), True)]),
        ),
    )
    with pytest.raises(AssertionError, match="double-counts ranks \\[1\\]"):
        check_schedule(bad)


def test_checker_catches_missing_chunk() -> None:
    """A rank that never receives a chunk fails the final check, naming rank and chunk."""
    bad = one_step("broadcast", 3, [Transfer(0, 1, (0,))])
    with pytest.raises(AssertionError, match="rank 2 chunk 0 holds nothing"):
        check_schedule(bad)


def test_checker_catches_sending_unheld_data() -> None:
    """A rank cannot forward a chunk it does not hold."""
    bad = one_step("broadcast", 3, [Transfer(0, 1, (0,)), Transfer(1, 2, (0,))])
    with pytest.raises(AssertionError, match="participant 1 does not hold chunk 0"):
        check_schedule(bad)


def test_checker_catches_false_uniform_claim() -> None:
    """A phase claiming uniform=True must move the same (src, dst, size) every step."""
    bad = Schedule(
        "broadcast", "test", 3, 1, 1.0, (Phase(2, lambda k: [Transfer(k, k + 1, (0,))], True),)
    )
    with pytest.raises(AssertionError, match="claims uniform=True"):
        check_schedule(bad)


def test_checker_catches_wrong_bytes() -> None:
    """nchunks * chunk_bytes must equal nbytes."""
    s = ring("all_reduce", 4, 1000.0, layout=Layout.flat(4))
    with pytest.raises(AssertionError, match="bytes not conserved"):
        check_schedule(s, nbytes=1001.0)


def test_checker_catches_disagreeing_copies_and_reduce_in_gathers() -> None:
    """Two different values copied into one chunk at once, or a reduce in a gather, fail."""
    clash = one_step("all_reduce", 3, [Transfer(0, 2, (0,)), Transfer(1, 2, (0,))])
    with pytest.raises(AssertionError, match="concurrent copies disagree"):
        check_schedule(clash)
    summing = one_step("broadcast", 2, [Transfer(0, 1, (0,), True)])
    with pytest.raises(AssertionError, match="not a reducing op"):
        check_schedule(summing)


# --- unsupported combinations and bad arguments ---------------------------------------


@pytest.mark.parametrize("name", list(ALGORITHMS))
@pytest.mark.parametrize("op", OPS)
def test_unsupported_ops_raise_naming_op_and_algorithm(name: str, op: str) -> None:
    """An op outside SUPPORTED raises one line naming the op, the algorithm and the list."""
    lay = Layout.grid(2, 1, nvswitch=True, node_nvswitch=True, sharp=True)  # every one can
    if op in SUPPORTED[name]:
        assert applicable(name, op, lay)
        return
    assert not applicable(name, op, lay)
    with pytest.raises(UnsupportedCollectiveError) as err:
        ALGORITHMS[name](op, 2, 8.0, layout=lay)
    msg = str(err.value)
    assert name in msg and op in msg and SUPPORTED[name][0] in msg and "\n" not in msg


@pytest.mark.parametrize(
    ("name", "op", "layout", "words"),
    [
        ("hierarchical", "all_reduce", Layout.flat(4), "2 nodes"),
        ("hierarchical", "all_gather", Layout((0, 0, 1)), "equal ranks"),
        ("nvls", "all_reduce", Layout.flat(4), "nvswitch"),
        ("collnet", "all_reduce", Layout.flat(4, nvswitch=True), "two servers"),
        ("direct", "send_recv", Layout.flat(3), "n == 2"),
    ],
)
def test_unsupported_group_shapes_raise(name: str, op: str, layout: Layout, words: str) -> None:
    """Group shapes an algorithm cannot handle raise, and applicable() says so first."""
    assert not applicable(name, op, layout)
    with pytest.raises(UnsupportedCollectiveError, match=words):
        ALGORITHMS[name](op, layout.n, 8.0, layout=layout)


def test_unknown_names_raise() -> None:
    """Unknown op strings and algorithm names are user errors that list what exists."""
    with pytest.raises(UnsupportedCollectiveError, match="unknown collective op 'allreduce'"):
        ring("allreduce", 2, 8.0, layout=Layout.flat(2))
    with pytest.raises(UnsupportedCollectiveError, match="known: ring, tree"):
        applicable("butterfly", "all_reduce", Layout.flat(2))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"channels": 0},
        {"pipeline_chunks": 0},
        {"root": 4},
        {"layout": Layout.flat(3)},
        {"nbytes": -1.0},
        {"nbytes": math.inf},
    ],
)
def test_bad_arguments_raise_config_error(kwargs: dict[str, object]) -> None:
    """Out-of-range arguments raise ConfigError quoting the value."""
    args: dict[str, object] = {"layout": Layout.flat(4), "nbytes": 8.0, **kwargs}
    nbytes = args.pop("nbytes")
    with pytest.raises(ConfigError):
        ring("all_reduce", 4, nbytes, **args)  # type: ignore[arg-type]
