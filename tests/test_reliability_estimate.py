"""The reliability layer end to end: presets, checkpoint size and tiers, the estimate, bad input."""

from __future__ import annotations

import math

import pytest

from sim.errors import ConfigError
from sim.packaged import read_table, validate_section
from sim.reliability import (
    ReliabilityConfig,
    checkpoint_bytes,
    failure_preset,
    failure_preset_names,
    goodput_estimate,
    job_interruptions,
    storage_tier,
    storage_tier_names,
)

LLAMA3 = {"gpus": 16384, "gpus_per_node": 8, "params": 405e9}
BUDGET = {"tokens": 15.6e12, "tokens_per_step": 16 * 2**20}


def test_llama3_preset_reproduces_its_own_observation() -> None:
    """Llama 3 (arXiv:2407.21783, Table 5): 419 unexpected interruptions in 54 days on 16,384 H100."""
    job = job_interruptions(failure_preset("llama3-405b-h100"), 16384, 8, restart_s=0.0)
    assert job.rate_per_s * 54 * 86400 == pytest.approx(419, rel=1e-12)
    by_cause = {c.name: c.rate_per_s * 54 * 86400 for c in job.causes}
    assert by_cause == pytest.approx({"gpu": 268, "link": 42, "node": 46, "software": 63})


def test_rates_scale_with_gpus_and_nodes() -> None:
    rates = failure_preset("llama3-405b-h100")
    small = job_interruptions(rates, 1024, 8, 600.0)
    big = job_interruptions(rates, 2048, 8, 600.0)
    assert big.rate_per_s == pytest.approx(2 * small.rate_per_s)
    fat_nodes = job_interruptions(rates, 1024, 16, 600.0)  # half the nodes: node/software halve
    gpu_part = sum(c.rate_per_s for c in small.causes if c.name in ("gpu", "link"))
    node_part = small.rate_per_s - gpu_part
    assert fat_nodes.rate_per_s == pytest.approx(gpu_part + node_part / 2)


def test_every_preset_names_its_source() -> None:
    for name in failure_preset_names():
        assert "arXiv" in failure_preset(name).source or "http" in failure_preset(name).source
    for name in storage_tier_names():
        assert len(storage_tier(name).source) > 40


def test_mtbf_overrides_and_never_failing_components() -> None:
    cfg = ReliabilityConfig(
        gpu_mtbf_h=1e5, link_mtbf_h=math.inf, node_mtbf_h=math.inf, software_mtbf_h=math.inf
    )
    job = cfg.job(8, 8)
    assert job.mtbi_s == pytest.approx(1e5 * 3600 / 8)


def test_checkpoint_bytes_mixed_precision_adam() -> None:
    """ZeRO (SC20) K = 12 bytes of fp32 optimizer state + 2 bytes of bf16 weights per parameter."""
    assert checkpoint_bytes(405e9) == 405e9 * 14
    assert checkpoint_bytes(7e9, 2, 0) == 14e9


def test_tiers_limit_per_node_and_in_aggregate() -> None:
    nvme, pfs = storage_tier("local-nvme"), storage_tier("parallel-fs")
    assert nvme.bandwidth_Bps(4) == 4 * 32e9 and nvme.bandwidth_Bps(10_000) == 10_000 * 32e9
    assert pfs.bandwidth_Bps(1) == pfs.bandwidth_Bps(10_000) == 2e12
    assert storage_tier("parallel-fs", "500GB/s").write_s(1e12, 64) == 2.0


def test_estimate_for_llama3_405b() -> None:
    """16,384 H100, 10 s steps, 15.6T tokens: MTBI 3.09 h (54 d / 419), checkpoint 5.67 TB at 2 TB/s."""
    est = goodput_estimate(
        step_time_s=10.0, config=ReliabilityConfig(), usd_per_gpu_hour=2.49, **LLAMA3, **BUDGET
    )
    assert est.mtbi_s == pytest.approx(54 * 86400 / 419)
    assert est.checkpoint_write_s == pytest.approx(5.67e12 / 2e12)
    assert est.interval_young_s == pytest.approx(math.sqrt(2 * est.checkpoint_write_s * est.mtbi_s))
    assert est.interval_steps == 25
    assert est.expected_breakdown_s is not None and est.expected_wall_time_s is not None
    assert math.fsum(est.expected_breakdown_s.values()) == pytest.approx(est.expected_wall_time_s)
    assert est.goodput == pytest.approx(est.useful_time_s / est.expected_wall_time_s)
    assert 0.9 < est.goodput < 0.95  # Llama 3 reported "higher than 90% effective training time"
    assert est.cost_usd == pytest.approx(16384 * est.expected_wall_time_s / 3600 * 2.49)
    assert est.to_dict()["interval_policy"] == "daly"
    assert est.busy_time_s + est.idle_time_s == pytest.approx(est.expected_wall_time_s)  # type: ignore[operator]


def test_steady_state_without_a_token_budget() -> None:
    est = goodput_estimate(step_time_s=10.0, config=ReliabilityConfig(), **LLAMA3)
    assert est.steps is None and est.expected_wall_time_s is None and est.cost_usd is None
    with_budget = goodput_estimate(step_time_s=10.0, config=ReliabilityConfig(), **LLAMA3, **BUDGET)
    assert est.goodput == pytest.approx(with_budget.goodput, rel=1e-4)


def test_faster_storage_raises_goodput_and_more_failures_lower_it() -> None:
    def g(**cfg: object) -> float:
        return goodput_estimate(step_time_s=10.0, config=ReliabilityConfig(**cfg), **LLAMA3).goodput  # type: ignore[arg-type]

    assert g(checkpoint_bandwidth="4TB/s") > g() > g(checkpoint_bandwidth="200GB/s")
    # 2048 nodes: local NVMe 65.5 TB/s > object store 12.8 TB/s > the shared file system 2 TB/s
    assert g(storage="local-nvme") > g(storage="object-store") > g(storage="parallel-fs")
    assert g(gpu_mtbf_h=40_000) < g() < g(gpu_mtbf_h=160_000)
    assert g(restart_s=60) > g() > g(restart_s=3600)


def test_fixed_interval_is_used_as_given() -> None:
    est = goodput_estimate(
        step_time_s=10.0, config=ReliabilityConfig(interval=100), **LLAMA3, **BUDGET
    )
    assert (est.interval_policy, est.interval_steps, est.interval_s) == ("fixed", 100, 1000.0)
    best = goodput_estimate(
        step_time_s=10.0, config=ReliabilityConfig(interval="exact"), **LLAMA3, **BUDGET
    )
    assert best.goodput > est.goodput


def test_local_disks_are_flagged() -> None:
    est = goodput_estimate(
        step_time_s=10.0, config=ReliabilityConfig(storage="local-nvme"), **LLAMA3
    )
    assert any("do not survive" in n for n in est.notes)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (
            {"failures": "nope"},
            "reliability.failures: unknown preset 'nope'; allowed: llama3-405b-h100, opt-175b-a100",
        ),
        ({"storage": "tape"}, "allowed: local-nvme, object-store, parallel-fs"),
        ({"gpu_mtbf_h": float("nan")}, "reliability.gpu_mtbf_h"),
        ({"gpu_mtbf_h": -5}, "reliability.gpu_mtbf_h"),
        ({"restart_s": -1}, "reliability.restart_s"),
        ({"restart_s": float("inf")}, "reliability.restart_s"),
        ({"interval": "hourly"}, "reliability.interval"),
        (
            {"interval": 0},
            "reliability.interval: expected young, daly, exact or a number of steps >= 1 (got 0)",
        ),
        ({"interval": True}, "reliability.interval"),
        ({"checkpoint_bandwidth": "fast"}, "cannot read 'fast' as a bandwidth"),
        ({"checkpoint_bytes": "-3TB"}, "reliability.checkpoint_bytes"),
        ({"retries": 3}, "reliability.retries: unknown key; allowed: failures, gpu_mtbf_h"),
    ],
)
def test_bad_sections_fail_with_one_line_naming_the_key(
    section: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        cfg = validate_section(ReliabilityConfig, section, "reliability")
        goodput_estimate(step_time_s=10.0, config=cfg, **LLAMA3)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"step_time_s": float("nan")},
        {"step_time_s": -1.0},
        {"params": float("nan")},
        {"params": -1.0},
        {"gpus": 0},
        {"tokens": float("nan"), "tokens_per_step": 1e6},
        {"tokens": 1e12, "tokens_per_step": None},
    ],
)
def test_bad_numbers_are_refused(kwargs: dict[str, object]) -> None:
    args: dict[str, object] = {"step_time_s": 10.0, **LLAMA3, **kwargs}
    with pytest.raises(ConfigError):
        goodput_estimate(config=ReliabilityConfig(), **args)  # type: ignore[arg-type]


def test_presets_are_read_from_package_data() -> None:
    assert set(read_table("sim.reliability", "failures.yaml")) == set(failure_preset_names())
