"""sim.budget: estimates grow with the counts, limits come from the environment, and runs
over them are refused up front in one line with the estimate and a suggestion."""

from __future__ import annotations

import resource
import subprocess
import sys
import time

import pytest

from sim import budget
from sim.budget import (
    Estimate,
    check_estimate,
    cluster_shape,
    estimate_collective,
    estimate_events,
    estimate_samples,
    memory_limit_bytes,
    time_limit_s,
)
from sim.errors import ConfigError
from tests.helpers import REPO


def test_limits_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLUSTERSIM_TIME_LIMIT", raising=False)
    assert time_limit_s() == budget.DEFAULT_TIME_LIMIT_S
    monkeypatch.setenv("CLUSTERSIM_TIME_LIMIT", "20")
    assert time_limit_s() == 20.0
    monkeypatch.setenv("CLUSTERSIM_TIME_LIMIT", "1.5ms")
    assert time_limit_s() == pytest.approx(1.5e-3)
    monkeypatch.setenv("CLUSTERSIM_TIME_LIMIT", "none")
    assert time_limit_s() == float("inf")
    monkeypatch.setenv("CLUSTERSIM_MEMORY_LIMIT", "2GiB")
    assert memory_limit_bytes() == 2 * 2**30
    monkeypatch.setenv("CLUSTERSIM_TIME_LIMIT", "soon")
    with pytest.raises(ConfigError, match=r"CLUSTERSIM_TIME_LIMIT='soon': expected e\.g\."):
        time_limit_s()


def test_memory_limit_follows_ulimit_v_less_the_mapped_overhead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CLUSTERSIM_MEMORY_LIMIT", raising=False)
    cap = 3 * 2**30
    monkeypatch.setattr(resource, "getrlimit", lambda what: (cap, resource.RLIM_INFINITY))
    assert memory_limit_bytes() == cap - budget.ADDRESS_SPACE_OVERHEAD


def test_an_estimate_over_a_limit_is_one_line_with_the_numbers_and_a_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CLUSTERSIM_TIME_LIMIT", "20")
    monkeypatch.setenv("CLUSTERSIM_MEMORY_LIMIT", "1GiB")
    fits = Estimate("x", 19.0, 2**29, "try y")
    assert check_estimate(fits) is fits
    with pytest.raises(ConfigError) as slow:
        check_estimate(Estimate("one flow-network step", 45.0, 2**29, "try --network analytical"))
    text = str(slow.value)
    assert "\n" not in text
    assert "about 45 s" in text and "time limit is 20 s" in text
    assert "try --network analytical" in text
    with pytest.raises(ConfigError, match=r"memory limit is 1 GiB"):
        check_estimate(Estimate("big", 1.0, 2**31, ""))


def test_estimates_grow_with_the_counts() -> None:
    """More GPUs, sizes, samples or segments never cost less; flow costs more than
    analytical; three tiers more than two."""
    small, big = estimate_collective(1024, 2, 1, "flow"), estimate_collective(8192, 2, 1, "flow")
    assert big.time_s > small.time_s and big.memory_bytes > small.memory_bytes
    assert estimate_collective(8192, 2, 28, "flow").time_s > big.time_s
    assert estimate_collective(8192, 3, 1, "flow").time_s > big.time_s
    assert estimate_samples(10**6, 8).time_s > estimate_samples(10**4, 8).time_s
    assert estimate_events(10**6, 20).memory_bytes > estimate_events(10**3, 20).memory_bytes


def test_the_step_estimate_bounds_the_measured_cases() -> None:
    """The measured CPU times of benchmarks/budget_calibration.py (shared 2-core host) lie
    within 0.4-1.0x of the estimate: an upper envelope, never a gross underestimate."""
    from sim.scenario.load import load_scenario

    measured = {  # (topology, nodes, dp, global batch, network): CPU s
        ("h100-ib-ndr", 2048, 256, 24576, "analytical"): 6.8,
        ("h100-ib-ndr", 10000, 1250, 120000, "analytical"): 31.7,
        ("h100-ib-ndr-3tier", 2048, 256, 24576, "analytical"): 9.4,
        ("h100-ib-ndr", 2048, 256, 24576, "flow"): 11.7,
    }
    for (topo, nodes, dp, batch, net), cpu_s in measured.items():
        sets = [f"cluster.topology={topo}", f"cluster.nodes={nodes}", f"parallel.dp={dp}",
                f"training.global_batch={batch}"]  # fmt: skip
        est = budget.estimate_step(load_scenario("gpt3-175b-1024", sets), net)
        assert 0.4 <= cpu_s / est.time_s <= 1.0, (topo, nodes, net, cpu_s, est.time_s)
    zero3 = ["parallel.zero=3", "parallel.pp=1", "parallel.dp=32"]  # 80 layers x 32 micro-batches
    est = budget.estimate_step(load_scenario("llama2-70b-256-roce", zero3), "flow")
    assert 0.4 <= 11.7 / est.time_s <= 1.0, est.time_s


def test_cluster_shape_reads_the_description_without_building() -> None:
    t0 = time.process_time()
    assert cluster_shape("h100-ib-ndr", 10000) == (80000, 2)
    assert cluster_shape("h100-ib-ndr-3tier", None)[1] == 3
    assert cluster_shape("dgx-h100", None) == (8, 1)
    assert time.process_time() - t0 < 1.0


def _cli(*argv: str, limit: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "CLUSTERSIM_TIME_LIMIT": limit}
    return subprocess.run([sys.executable, "-m", "sim", *argv], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_a_run_over_the_limit_is_refused_before_building_anything() -> None:
    """80,000 GPUs under a 20 s limit: refused in a few seconds with the estimate and a
    suggestion, not after building the cluster."""
    t0 = time.monotonic()
    p = _cli("run", "gpt3-175b-1024", "--network", "flow", "--set", "cluster.nodes=10000",
             "--set", "parallel.dp=1250", "--set", "training.global_batch=120000", limit="20")  # fmt: skip
    assert p.returncode == 2
    assert "one flow-network step on 80,000 GPUs would take about" in p.stderr
    assert "--network analytical" in p.stderr and "Traceback" not in p.stderr
    assert time.monotonic() - t0 < 60


def test_a_collective_over_the_limit_is_refused() -> None:
    p = _cli("collective", "--topology", "h100-ib-ndr", "--nodes", "10000", "-b", "1K", "-e",
             "1K", limit="20")  # fmt: skip
    assert p.returncode == 2 and "all_reduce of 1 size(s) on 80,000 GPUs" in p.stderr


def test_a_sweep_point_over_the_limit_is_a_row_with_the_estimate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sim.studies.grid import sweep_spec
    from sim.studies.runner import run_sweep

    monkeypatch.setenv("CLUSTERSIM_TIME_LIMIT", "5")
    spec = sweep_spec("gpt2-1gpu", ["cluster.nodes=1,10000"],
                      ["cluster.topology=h100-ib-ndr", "network=analytical", "parallel.dp=null",
                       "training.global_batch=80000"])  # fmt: skip
    rows = run_sweep(spec, progress=False)
    assert rows[1]["reason"].startswith("one analytical-network step on 80,000 GPUs")
    assert rows[1]["step_time_s"] is None
    assert rows[1]["gpus"] == 80000


def test_a_refused_points_gpus_are_read_without_building_the_cluster() -> None:
    """The ``gpus`` cell of a refused point comes from the topology's description (building
    80,000 GPUs for it took 9 CPU s and 850 MB)."""
    from sim.studies.points import _gpus_of

    t0 = time.process_time()
    assert _gpus_of({"cluster": {"topology": "h100-ib-ndr", "nodes": 10000}}) == 80000
    assert _gpus_of({"cluster": {"topology": "h100-ib-ndr-3tier", "nodes": 16384}}) == 131072
    assert time.process_time() - t0 < 1.0
    assert _gpus_of({"cluster": {"topology": "no-such-fabric"}}) is None
    assert _gpus_of({"cluster": {"topology": "dgx-h100", "nodes": "many"}}) is None
    assert _gpus_of({"cluster": [1, 2]}) is None


def test_compare_export_and_topology_builds_are_refused_up_front() -> None:
    """A comparison adds up its runs' steps, a Chakra export costs at least its step, and
    ``topologies --show/--export`` of 131,072 GPUs is refused before the cluster is built
    (it was stopped at 20 CPU s holding 1.5 GB)."""
    big = ("--set", "cluster.nodes=10000", "--set", "parallel.dp=1250", "--set",
           "training.global_batch=120000")  # fmt: skip
    t0 = time.monotonic()
    p = _cli("compare", "gpt3-175b-1024", *big, "--variant", "a: seed=1", "--variant",
             "b: seed=2", "--network", "analytical", limit="20")  # fmt: skip
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert "compare of 2 runs (the largest: one analytical-network step on 80,000 GPUs)" in (
        p.stderr
    )
    assert "would take about" in p.stderr and "try fewer nodes" in p.stderr
    p = _cli("chakra", "export", "gpt3-175b-1024", *big, "--out", "/nonexistent/x", limit="20")
    assert p.returncode == 2 and "a Chakra export of one flow-network step on 80,000" in p.stderr
    assert "--network analytical" in p.stderr
    for option in ("--show", "--export"):
        p = _cli("topologies", option, "h100-ib-ndr-3tier", "--nodes", "16384", limit="20")
        assert p.returncode == 2 and "Traceback" not in p.stderr
        assert "building topology h100-ib-ndr-3tier on 131,072 GPUs would take" in p.stderr
        assert "try fewer nodes (--nodes)" in p.stderr
    assert time.monotonic() - t0 < 60


def test_the_topology_and_steps_estimates() -> None:
    from sim.budget import estimate_steps, estimate_topology

    small, big = estimate_topology("h100-ib-ndr-3tier", 4096), estimate_topology("dgx-h100", None)
    assert small.time_s > big.time_s and small.memory_bytes > big.memory_bytes
    # measured 32,768 GPUs on the 3-tier fabric: 6.1 CPU s, 442 MB; the estimate bounds it
    assert 6.1 <= small.time_s <= 2 * 6.1 and 442e6 <= small.memory_bytes <= 2 * 442e6
    steps = estimate_steps([small, big], "two")
    assert steps.time_s == pytest.approx(small.time_s + big.time_s - budget.START_S)
    assert steps.memory_bytes > small.memory_bytes and steps.what.startswith("two (the largest")


def test_samples_and_event_simulations_are_capped_by_their_estimates() -> None:
    p = _cli("run", "llama3-8b-dgx", "--network", "analytical", "--set",
             "variability.compute_cv=0.03", "--samples", "1000000000", limit="600")  # fmt: skip
    assert p.returncode == 2 and "--samples 1,000,000,000" in p.stderr
    p = _cli("run", "llama3-8b-dgx", "--network", "analytical", "--set", "training.tokens=1e16",
             "--set", "reliability.interval=1", "--set", "reliability.simulate_runs=2",
             limit="600")  # fmt: skip
    assert p.returncode == 2 and "checkpoint intervals" in p.stderr


def test_an_all_to_all_on_the_flow_network_grows_as_the_cube_of_the_gpus() -> None:
    """Its pairwise phases differ, so each is solved: 1 GiB on 512 GPUs is minutes, not the
    seconds an all-reduce of the same size takes (measured: 128 GPUs 7.5 s, 256 over 68 s)."""
    ring = estimate_collective(512, 2, 1, "flow")
    a2a = estimate_collective(512, 2, 1, "flow", "all_to_all")
    assert a2a.time_s > 60 > 10 > ring.time_s
    assert estimate_collective(512, 2, 1, "analytical", "all_to_all").time_s == pytest.approx(
        estimate_collective(512, 2, 1, "analytical").time_s
    )
    assert 5 < estimate_collective(128, 2, 1, "flow", "all_to_all").time_s < 15
    assert estimate_collective(256, 2, 1, "flow", "all_to_all").time_s > 60
