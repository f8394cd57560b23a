"""The collective engine: closed forms, backend agreement, monotonicity, a real golden number."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from sim.collectives.engine import scope_bytes
from sim.collectives.params import default_params
from sim.collectives.simulate import CollectiveSetup, run_on_network, simulate_collective
from sim.topology.presets import load_topology
from tests.helpers import SHARED_DATA, star


def ring_allreduce_closed_form(n: int, size: float, bw: float, lat: float) -> float:
    """2(n-1) steps of size/n bytes over two hops of a star, NCCL-style latencies (Simple).

    Where each of the 24 channels moves at least a slice (512 KiB) per step, a ring step's
    handshake overlaps its data (``Phase.overlap``): the step takes ``max(2 hops + data,
    step latency)``, else their sum; the message is large enough for NCCL's channel cap
    not to bind."""
    p = default_params()
    ring = p.algorithm("ring")
    wire = 1.0 / (p.protocol_efficiency["simple"] * ring.efficiency)
    cap = bw * p.link_efficiency["nvlink"]
    data, lat_step = 2 * lat + (size / n) * wire / cap, ring.step_latency_s["nvlink"]["simple"]
    overlap = size / n / p.channels.per_server >= p.channels.slice_bytes
    step = max(data, lat_step) if overlap else data + lat_step
    return ring.base_latency_s["simple"] + 2 * (n - 1) * step


@pytest.mark.parametrize("network", ["analytical", "flow"])
@pytest.mark.parametrize("n", [2, 3, 4, 5, 7, 8, 13, 16, 31, 32, 64])
def test_uncontended_ring_allreduce_matches_closed_form(n: int, network: str) -> None:
    """Each ring step is uncontended on a star, so both backends hit the closed form."""
    size = 3 * 2**26
    setup = CollectiveSetup(star(n, bandwidth_Bps=200e9, latency_s=0.7e-6))
    r = simulate_collective(
        setup, "all_reduce", size, algorithm="ring", protocol="simple", network=network
    )
    assert r.time_s == pytest.approx(ring_allreduce_closed_form(n, size, 200e9, 0.7e-6), rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(2, 12),
    size=st.floats(1e3, 1e10),
    op=st.sampled_from(["all_reduce", "all_gather", "reduce_scatter", "broadcast"]),
)
def test_flow_equals_analytical_when_nothing_contends(n: int, size: float, op: str) -> None:
    """Ring phases on a star never share a link direction: the two backends agree exactly."""
    setup = CollectiveSetup(star(n))
    a = simulate_collective(
        setup, op, size, algorithm="ring", protocol="simple", network="analytical"
    )
    f = simulate_collective(setup, op, size, algorithm="ring", protocol="simple", network="flow")
    assert f.time_s == pytest.approx(a.time_s, rel=1e-9)


def _steps(setup: CollectiveSetup, size: float) -> tuple[list[int], int]:
    """NCCL's channel count of every (algorithm, protocol) the tuner weighs at ``size``,
    and the size-derived pipeline depth."""
    channels = [setup.nccl_channels(a, p, size)
                for a, p in setup.candidates("all_reduce", "auto", "auto")]  # fmt: skip
    return channels, setup.pipeline_chunks(size)


@settings(max_examples=30, deadline=None)
@given(size=st.floats(64, 4e9), factor=st.floats(1.01, 8.0))
def test_larger_message_is_never_faster_between_channel_and_chunk_steps(
    size: float, factor: float
) -> None:
    """auto on dgx-h100: time is non-decreasing in message size wherever NCCL runs every
    candidate on the same number of channels and the message splits into the same number
    of pipelined pieces at both sizes. Across such a step a larger message may be faster
    (next test; a 3,000-size sweep finds one more, 8.36 -> 8.41 MB, where NVLS's depth goes
    2 -> 3 pieces and the time falls 0.3%)."""
    setup = CollectiveSetup(load_topology("dgx-h100"))
    assume(_steps(setup, size) == _steps(setup, size * factor))
    t1 = simulate_collective(setup, "all_reduce", size, network="analytical").time_s
    t2 = simulate_collective(setup, "all_reduce", size * factor, network="analytical").time_s
    assert t2 >= t1 * (1 - 1e-12)


def test_a_channel_count_step_may_make_a_larger_message_faster() -> None:
    """NCCL runs a small message on ``floor(size / threshold)`` channels, so each
    channel's load is a sawtooth in size and so is the time: on dgx-h100, tree LL takes
    5 channels at 21,846 B and 8 at 32,769 B, and the larger all-reduce is ~1% faster.
    Real runs step likewise: the shared nccl-tests logs have all_reduce at 32 KiB in
    43.82 us and 64 KiB in 37.85 us (2 x 8 H100 over InfiniBand), 4 KiB in 23.59 us and
    8 KiB in 17.40 us (one DGX H100). The drop stays small: within 2% here."""
    setup = CollectiveSetup(load_topology("dgx-h100"))
    small, large = (simulate_collective(setup, "all_reduce", b, network="analytical")
                    for b in (21846.0, 32769.0))  # fmt: skip
    assert (small.algorithm, small.protocol) == (large.algorithm, large.protocol) == ("tree", "ll")
    assert (
        setup.nccl_channels("tree", "ll", 21846.0),
        setup.nccl_channels("tree", "ll", 32769.0),
    ) == (5, 8)
    assert large.time_s < small.time_s < large.time_s * 1.02


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(2, 16),
    size=st.floats(1e3, 1e10),
    factor=st.floats(1.01, 10.0),
    algo=st.sampled_from(["ring", "tree", "rhd", "nvls"]),
)
def test_more_bandwidth_is_never_slower(n: int, size: float, factor: float, algo: str) -> None:
    """Scaling every link's bandwidth up never increases a collective's time (flow backend)."""
    slow = CollectiveSetup(star(n, bandwidth_Bps=50e9))
    fast = CollectiveSetup(star(n, bandwidth_Bps=50e9 * factor))
    t_slow = simulate_collective(slow, "all_reduce", size, algorithm=algo, protocol="simple").time_s
    t_fast = simulate_collective(fast, "all_reduce", size, algorithm=algo, protocol="simple").time_s
    assert t_fast <= t_slow * (1 + 1e-12)


def test_predictor_equals_simpy_analytical_backend() -> None:
    """The tuner's closed form and the SimPy analytical backend are the same model: time
    and bytes per link class (simulate_collective on analytical uses the closed form)."""
    from sim.collectives.engine import predict_step_sync

    setup = CollectiveSetup(load_topology("h100-ib-ndr", nodes=4))
    for algo in ("ring", "tree", "hierarchical", "rhd"):
        for size in (1e4, 3e7, 2e9):
            _, _, _, sched, _ = setup.tune("all_reduce", size, algo, "simple")
            cap = {"simple": setup.nccl_channels(algo, "simple", size)}
            pred = predict_step_sync(
                sched, setup.endpoints(sched), setup.routes, setup.params, ["simple"], cap
            )
            sim, link_bytes = run_on_network(setup, sched, "simple", size, "analytical")
            assert sim == pytest.approx(pred["simple"], rel=1e-12)
            fast = simulate_collective(
                setup, "all_reduce", size, algorithm=algo, protocol="simple", network="analytical"
            )
            assert fast.time_s == pytest.approx(sim, rel=1e-12)
            np.testing.assert_allclose(
                [fast.wire_bytes_by_scope[k] for k in ("nvlink", "pcie", "net")],
                [scope_bytes(setup.topology, link_bytes)[k] for k in ("nvlink", "pcie", "net")],
                rtol=1e-9,
            )


def _measured_busbw(path, size: int) -> float:  # type: ignore[no-untyped-def]
    for line in path.read_text().splitlines():
        f = line.split()
        if f and f[0] == str(size):
            return float(f[7])
    raise AssertionError(f"size {size} not in {path}")


def test_dgx_h100_allreduce_8GiB_busbw_matches_real_run() -> None:
    """Default parameters on dgx-h100: busbw at 8 GiB within 10% of a real DGX H100.

    Source: ../shared/data/nccl-tests/dgx-h100-1node-8gpu-all_reduce.txt (NVIDIA
    dgxc-benchmarking sample output, 8x H100 80GB HBM3, NVLS likely engaged): 480.16 GB/s
    out-of-place at 8589934592 B. When the shared data is absent the published value
    (480 GB/s, NVIDIA/nccl-tests issue 212) is used and this says so.
    """
    path = SHARED_DATA / "nccl-tests" / "dgx-h100-1node-8gpu-all_reduce.txt"
    if path.exists():
        measured = _measured_busbw(path, 8589934592)
    else:  # pragma: no cover - CI has ../shared
        print(f"NOTE: {path} absent; using the published 480 GB/s")
        measured = 480.0
    setup = CollectiveSetup(load_topology("dgx-h100"))
    r = simulate_collective(setup, "all_reduce", 8 * 2**30, network="flow")
    assert r.busbw_Bps / 1e9 == pytest.approx(measured, rel=0.10), (r.algorithm, r.protocol)


def test_auto_picks_low_latency_protocol_for_small_and_bandwidth_for_large() -> None:
    """Like NCCL's tuner: LL-family for tiny messages, Simple (or NVLS) for large ones."""
    setup = CollectiveSetup(load_topology("dgx-h100"))
    small = simulate_collective(setup, "all_reduce", 1024, network="analytical")
    large = simulate_collective(setup, "all_reduce", 2**31, network="analytical")
    assert small.protocol in ("ll", "ll128")
    assert large.protocol == "simple"
    assert re.match(r"nvls|ring", large.algorithm)


def test_bytes_on_the_wire_are_conserved_for_ring() -> None:
    """Ring all-reduce puts exactly 2(n-1)/n * size * wire-factor * n bytes on GPU uplinks."""
    n, size = 8, 2**28
    topo = star(n)
    setup = CollectiveSetup(topo)
    r = simulate_collective(
        setup, "all_reduce", size, algorithm="ring", protocol="simple", network="flow"
    )
    p = default_params()
    wire = 1 / (p.protocol_efficiency["simple"] * p.algorithm("ring").efficiency)
    # every transfer crosses two links (up to the switch and down): count both
    assert r.wire_bytes_by_scope["nvlink"] == pytest.approx(
        2 * 2 * (n - 1) * size * wire, rel=1e-12
    )


@pytest.mark.parametrize(("nodes", "per_node"), [(2, 8), (3, 4), (4, 2)])
def test_nvls_tree_traffic_closed_form(nodes: int, per_node: int) -> None:
    """NVLS-tree per rank: nbytes*(1 + 1/g) into the switch, 2(N-1)/N * nbytes/g to peers."""
    from sim.collectives.checker import traffic
    from sim.collectives.layout import Layout
    from sim.collectives.nvls_tree import nvls_tree

    n, size = nodes * per_node, 2.0**20
    lay = Layout(tuple(r // per_node for r in range(n)), node_nvswitch=True)
    sent, received = traffic(nvls_tree("all_reduce", n, size, layout=lay, pipeline_chunks=4))
    peers = 2 * (nodes - 1) / nodes * size / per_node
    for r in range(n):
        assert sent[r] == pytest.approx(size * (1 + 1 / per_node) + peers, rel=1e-12)
        assert received[r] == pytest.approx(size * (1 + 1 / per_node) + peers, rel=1e-12)


def test_two_node_ib_allreduce_large_sizes_match_real_run() -> None:
    """Default parameters on h100-ib-ndr --nodes 2: busbw at 1 and 8 GiB within 10% of a real run.

    Source: ../shared/data/nccl-tests/h100-2node-16gpu-ib-all_reduce.txt (dstack docs,
    Nebius H100 2 x 8 GPUs, InfiniBand): 446.21 GB/s at 1 GiB, 467.54 GB/s at 8 GiB.
    """
    path = SHARED_DATA / "nccl-tests" / "h100-2node-16gpu-ib-all_reduce.txt"
    if not path.exists():
        pytest.skip(f"shared data absent: {path}")
    setup = CollectiveSetup(load_topology("h100-ib-ndr", nodes=2))
    for size in (2**30, 2**33):
        r = simulate_collective(setup, "all_reduce", size, network="flow")
        assert r.busbw_Bps / 1e9 == pytest.approx(_measured_busbw(path, size), rel=0.10), (
            size,
            r.algorithm,
        )


def test_tuner_answer_kept_and_shared_with_the_step_timer():
    """Asking the tuner the same question again returns the kept answer (the same
    objects), equal to a fresh setup's; a training step's timer plans a collective with
    the schedule the tuner built when it timed it (no second tuning)."""
    from sim.training.compute.passes import CollectiveTimer

    topo = load_topology("dgx-h100")
    setup = CollectiveSetup(topo)
    first = setup.tune("all_reduce", 2**20)
    assert setup.tune("all_reduce", 2**20.0) is first
    fresh = CollectiveSetup(topo).tune("all_reduce", 2**20)
    assert (fresh[0], fresh[1], fresh[2], fresh[4]) == (first[0], first[1], first[2], first[4])
    timer = CollectiveTimer(topo, default_params(), "analytical")
    group = topo.gpus[:4]
    t = timer.time_s(group, "all_gather", 2**24)
    sched, proto = timer.plan(group, "all_gather", 2**24)
    tuned = timer.setup(group).tune("all_gather", 2**24)
    assert (sched, proto, t) == (tuned[3], tuned[2], tuned[0])


def test_the_reported_pipeline_depth_is_the_one_the_schedule_runs() -> None:
    """A result's ``pipeline_chunks`` is the depth its schedule runs: 1 for a ring
    all_reduce (not pipelined) and, where the work cap cuts the tuner's option, the cut
    depth (NVLS-tree over 32 servers: 16, 32 and 64 all run 7 deep, costed once), not the
    option asked for."""
    setup = CollectiveSetup(load_topology("h100-ib-ndr", nodes=32))
    ring_ = simulate_collective(setup, "all_reduce", 64 * 2**20, algorithm="ring",
                                network="analytical")  # fmt: skip
    assert ring_.pipeline_chunks == 1
    nvls = simulate_collective(setup, "all_reduce", 64 * 2**20, algorithm="nvls_tree",
                               network="analytical")  # fmt: skip
    sched = setup.schedule("all_reduce", "nvls_tree", 64 * 2**20, 0, nvls.pipeline_chunks)
    assert nvls.pipeline_chunks == 7 == setup.depth("all_reduce", "nvls_tree", 64 * 2**20, 0, 64)
    assert sched.nchunks == 7 * setup.schedule("all_reduce", "nvls_tree", 64 * 2**20, 0, 1).nchunks
