"""Gloo's own algorithms (sim/collectives/gloo.py): message counts and bytes as in gloo's
source, the local copies of torch's wrapper, selection by ``backend: gloo``, exact times
on the cpu-host preset, and the calibration fast model agreeing with the simulator."""

from __future__ import annotations

import math

import pytest

from calibrate.measurements import CollectiveRecord, Measurements, Meta
from calibrate.model import FastModel, points_from, simulate_points
from sim.collectives.algorithms import ALGORITHMS, Layout
from sim.collectives.checker import check_schedule, traffic
from sim.collectives.gloo import gloo, local_bytes, local_time_s
from sim.collectives.params import default_params
from sim.collectives.schedule import OPS
from sim.collectives.simulate import CollectiveSetup, simulate_collective
from sim.errors import ConfigError, UnsupportedCollectiveError
from sim.topology.presets import load_topology

MIB = 2**20
GLOO = default_params().merged({"backend": "gloo"})


def ring_segments(n: int, size: float) -> int:
    """gloo/allreduce.cc: roundUp(max(ceil(S / 1 MiB), 2n), n)."""
    return math.ceil(max(math.ceil(size / MIB), 2 * n) / n) * n


@pytest.mark.parametrize("n", [2, 3, 4, 8])
@pytest.mark.parametrize("size", [4096.0, 3.0 * MIB, 64.0 * MIB])
def test_ring_allreduce_sends_one_segment_per_step(n: int, size: float) -> None:
    """2(n-1)k steps of one S/(nk) segment per rank; each rank sends 2(n-1)/n * S."""
    segments = ring_segments(n, size)
    k = segments // n
    for op in ("all_reduce", "reduce_scatter"):
        s = gloo(op, n, size, layout=Layout.flat(n))
        check_schedule(s, nbytes=size)
        assert s.num_steps == 2 * (n - 1) * k and s.nchunks == segments
        sent, received = traffic(s)
        assert all(math.isclose(b, 2 * (n - 1) / n * size) for b in sent + received)
        assert all(len(s.phases[0].steps(i)) == n for i in range(s.phases[0].repeat))


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_allgather_broadcast_reduce_and_alltoall_follow_gloo(n: int) -> None:
    """allgather.cc: 2(n-1) half chunks; broadcast.cc: ceil(log2 n) rounds of the whole
    buffer; reduce.cc: numSegments - 2 ring steps then one gather; alltoall.cc: one step."""
    size = 6.0 * MIB
    lay = Layout.flat(n)
    ag = gloo("all_gather", n, size, layout=lay)
    assert ag.num_steps == 2 * (n - 1) and ag.chunk_bytes == size / (2 * n)
    bc = gloo("broadcast", n, size, layout=lay, root=n - 1)
    assert bc.num_steps == math.ceil(math.log2(n)) and bc.chunk_bytes == size
    assert traffic(bc)[1][n - 1] == 0 and all(traffic(bc)[1][r] == size for r in range(n - 1))
    segment = min(math.ceil(size / (2 * n)), MIB)
    segments = math.ceil(max(math.ceil(size / segment), 2 * n) / n) * n
    assert gloo("reduce", n, size, layout=lay).num_steps == segments - 2 + 1
    a2a = gloo("all_to_all", n, size, layout=lay)
    assert a2a.num_steps == 1 and traffic(a2a)[0][0] == size * (n - 1) / n
    for s in (ag, bc, a2a, gloo("reduce", n, size, layout=lay, root=1)):
        check_schedule(s, nbytes=size)


def test_gloo_is_registered_for_every_op_and_send_recv_needs_two_ranks() -> None:
    assert ALGORITHMS["gloo"] is gloo
    for op in OPS:
        n = 2
        check_schedule(gloo(op, n, 1024.0, layout=Layout.flat(n)), nbytes=1024.0)
    with pytest.raises(UnsupportedCollectiveError, match="needs n == 2"):
        gloo("send_recv", 3, 8.0, layout=Layout.flat(3))


def test_local_work_is_gloos_reductions_and_torchs_copies() -> None:
    """Reductions (n-1)/n S in all_reduce, reduce_scatter, reduce; copies S + S/n in
    all_gather and reduce_scatter, S/n in all_to_all; nothing in broadcast."""
    assert local_bytes("all_gather", 4, 400.0) == 500.0
    assert local_bytes("reduce_scatter", 4, 400.0) == 500.0 + 300.0
    assert local_bytes("all_reduce", 4, 400.0) == local_bytes("reduce", 4, 400.0) == 300.0
    assert local_bytes("all_to_all", 4, 400.0) == 100.0
    assert local_bytes("broadcast", 4, 400.0) == local_bytes("send_recv", 2, 400.0) == 0.0
    assert local_time_s(GLOO, "all_gather", 2, 5e9) == pytest.approx(7.5e9 / 5e9)


def test_backend_gloo_selects_gloo_and_nccl_never_does() -> None:
    topo = load_topology("cpu-host")
    for op in ("all_reduce", "all_gather", "broadcast", "all_to_all"):
        assert simulate_collective(CollectiveSetup(topo, 4, GLOO), op, MIB).algorithm == "gloo"
        assert simulate_collective(CollectiveSetup(topo, 4), op, MIB).algorithm != "gloo"


@pytest.mark.parametrize("network", ["analytical", "flow"])
def test_allgather_time_is_the_closed_form_on_cpu_host(network: str) -> None:
    """2 ranks, cpu-host defaults: base 50 us + 2 steps x (20 us step latency + two 5 us
    loopback hops + S/4 at 10 GB/s x 0.80) + 1.5 S at the 5 GB/s copy rate."""
    size = 8.0 * MIB
    r = simulate_collective(CollectiveSetup(load_topology("cpu-host"), 2, GLOO), "all_gather",
                            size, network=network)  # fmt: skip
    want = 50e-6 + 2 * (20e-6 + 10e-6 + size / 4 / 8e9) + 1.5 * size / 5e9
    assert r.time_s == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize(
    ("tree", "key"),
    [({"backend": "mpi"}, "backend"), ({"gloo": {"local_GBps": 0}}, "local_GBps"),
     ({"gloo": {"speed": 1}}, "speed")],
)  # fmt: skip
def test_bad_backend_keys_are_config_errors(tree: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        default_params().merged(tree)


def test_fast_model_equals_the_simulator_for_gloo() -> None:
    """The calibration fit's compiled model gives the simulator's gloo times exactly."""
    recs = tuple(
        CollectiveRecord(op, s, s // 4, "float32", 1e-3, None, 0.0, 0.0, False, n, 5)
        for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")
        for n in (2, 4)
        for s in (4096, 3 * MIB)
    )  # fmt: skip
    m = Measurements("collectives", Meta("test", "2025-01-01T00:00:00Z", backend="gloo"), recs)
    params = GLOO.merged({"gloo": {"local_GBps": 2.5}, "link_efficiency": {"pcie": 0.3}})
    points = points_from([m], load_topology("cpu-host"), params=params)
    fast = FastModel(points).predict(params)
    slow = [t for t, _ in simulate_points(points, params)]
    assert fast == pytest.approx(slow, rel=1e-9)
