"""NCCL's channel model: the channel count by size, and its cap on collective times.

Sources of the rules tested here: NVIDIA/nccl src/enqueue.cc (topoGetAlgoInfo's
``while (nBytes < nc*nt*threadThreshold) nc--``), src/include/comm.h (thread thresholds:
LL 8, LL128 8, Simple 64 bytes per thread; ring LL times nRanks).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.collectives.channels import CAPPED, channel_count, channel_rate_Bps
from sim.collectives.params import default_params
from sim.collectives.simulate import CollectiveSetup, simulate_collective
from sim.topology.presets import load_topology

CH = default_params().channels


@settings(max_examples=100, deadline=None)
@given(
    algo=st.sampled_from(["ring", "tree"]),
    proto=st.sampled_from(["ll", "ll128", "simple"]),
    size=st.floats(1.0, 2.0**34),
    n=st.integers(2, 1024),
    top=st.integers(1, 64),
)
def test_channel_count_follows_nccls_loop(algo: str, proto: str, size: float, n: int,
                                          top: int) -> None:  # fmt: skip
    """The closed form equals NCCL's loop: start at the top count and drop a channel while
    size < nc * threads * threshold (ring LL: times n), never below one."""
    per = (
        CH.threads[proto]
        * CH.thread_threshold_bytes[proto]
        * (n if (algo, proto) == ("ring", "ll") else 1)
    )
    nc = top
    while size < nc * per and nc >= 2:
        nc -= 1
    assert channel_count(CH, algo, proto, size, n, top) == nc


def test_channel_count_is_monotone_in_size() -> None:
    counts = [channel_count(CH, "ring", "simple", 2.0**k, 8, 24) for k in range(10, 30)]
    assert counts == sorted(counts) and counts[0] == 1 and counts[-1] == 24


def test_in_switch_and_point_to_point_are_not_capped() -> None:
    for algo in ("nvls", "nvls_tree", "direct"):
        assert algo not in CAPPED
        assert channel_rate_Bps(CH, algo, "simple", 1e6, 8, 24) == math.inf


def test_mid_size_ring_time_is_flat_while_channels_grow() -> None:
    """Ring Simple on one DGX H100 between 64 KiB and 512 KiB: the channel count doubles with
    the size, so the bandwidth term stays constant and the time grows by under 10%, while
    doubling the size with every channel in use (256 -> 512 MiB) nearly doubles it (the
    ring's 14 step latencies make it 1.8x)."""
    setup = CollectiveSetup(load_topology("dgx-h100"))

    def t(size: float) -> float:
        return simulate_collective(setup, "all_reduce", size, algorithm="ring",
                                   protocol="simple", network="analytical").time_s  # fmt: skip

    assert t(2**19) < 1.10 * t(2**16)
    assert t(2**29) > 1.8 * t(2**28)


def test_the_cap_binds_only_where_few_channels_run() -> None:
    """At 8 GiB every channel runs: the ring is link-bound, as without the cap. At 256 KiB
    ring LL runs on 8 channels of 5.9 GB/s, slower than the NVLink links would allow."""
    topo = load_topology("dgx-h100")
    base = default_params()
    uncapped = base.merged({"channels": {"bandwidth_GBps": {"simple": 1e6, "ll": 1e6}}})

    def t(params, size: float, proto: str) -> float:  # type: ignore[no-untyped-def]
        s = CollectiveSetup(topo, None, params)
        return simulate_collective(s, "all_reduce", size, algorithm="ring", protocol=proto,
                                   network="analytical").time_s  # fmt: skip

    assert t(base, 2**33, "simple") == pytest.approx(t(uncapped, 2**33, "simple"), rel=1e-9)
    assert t(base, 2**18, "ll") > 1.1 * t(uncapped, 2**18, "ll")


@pytest.mark.parametrize("network", ["flow", "analytical"])
def test_both_backends_charge_the_cap_the_same_way(network: str) -> None:
    """Nothing contends in one collective: flow and analytical agree with the cap."""
    setup = CollectiveSetup(load_topology("h100-ib-ndr", nodes=2))
    r = simulate_collective(setup, "all_reduce", 2**18, algorithm="ring", protocol="ll",
                            network=network)  # fmt: skip
    ref = simulate_collective(setup, "all_reduce", 2**18, algorithm="ring", protocol="ll",
                              network="analytical")  # fmt: skip
    assert r.time_s == pytest.approx(ref.time_s, rel=1e-9)


def test_auto_uses_only_nccls_algorithms() -> None:
    """Recursive halving-doubling and the hierarchical composition are not NCCL's: auto
    never picks them; they run when asked for by name."""
    setup = CollectiveSetup(load_topology("h100-ib-ndr", nodes=4))
    for size in (2.0**k for k in range(3, 34, 2)):
        r = simulate_collective(setup, "all_reduce", size, network="analytical")
        assert r.algorithm in ("ring", "tree", "nvls", "nvls_tree")
    r = simulate_collective(setup, "all_reduce", 2**20, algorithm="rhd", network="analytical")
    assert r.algorithm == "rhd"
