"""Variability over a simulated step (sim.variability, ``clustersim run --samples``).

Closed forms of order statistics (the mean of the slowest of n GPUs), exact deterministic
slowdowns (throttling, stage and expert imbalance), the straggler probability, growth
with the GPU count, determinism, and the errors a user can make.
"""

from __future__ import annotations

import json
import math
import re
import shlex

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from sim.cli import main
from sim.errors import ConfigError
from sim.packaged import validate_section
from sim.variability import Groups, VariabilityConfig, sample_breakdown
from sim.variability import sample as sample_module
from tests.helpers import REPO

COMPUTE = {"compute": 1.0}


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["run", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def expected_max_normal(n: int) -> float:
    """E[max of n iid standard normals] = integral of x n phi(x) Phi(x)^(n-1) dx."""
    f = lambda x: x * n * stats.norm.pdf(x) * stats.norm.cdf(x) ** (n - 1)  # noqa: E731
    return integrate.quad(f, -12, 12, limit=200)[0]


@pytest.mark.parametrize("n", [2, 8, 64, 512])
def test_normal_jitter_mean_is_the_expected_maximum_of_n_normals(n: int) -> None:
    """Compute only, one sync group of n GPUs: step = C * max(1 + cv Z_i)."""
    cv, samples = 0.05, 4000
    cfg = VariabilityConfig(compute_cv=cv, distribution="normal")
    r = sample_breakdown(
        COMPUTE, 1.0, Groups(tp=8, dp=n // 8) if n >= 8 else Groups(tp=n), cfg, samples, 1
    )
    # Var(max Z) <= 1 for iid normals, so the Monte Carlo error is at most cv / sqrt(samples)
    assert r.mean_step_s == pytest.approx(
        1 + cv * expected_max_normal(n), abs=4 * cv / math.sqrt(samples)
    )


@pytest.mark.parametrize("n", [1, 16, 256])
def test_exponential_jitter_mean_is_the_harmonic_number(n: int) -> None:
    """gamma with cv = 1 is exponential; E[max of n Exp(1)] = H_n, Var = sum 1/k^2 < pi^2/6."""
    samples = 4000
    cfg = VariabilityConfig(compute_cv=1.0, distribution="gamma")
    r = sample_breakdown(COMPUTE, 1.0, Groups(dp=n), cfg, samples, 2)
    harmonic = sum(1 / k for k in range(1, n + 1))
    assert r.mean_step_s == pytest.approx(
        harmonic, abs=4 * (math.pi / math.sqrt(6)) / math.sqrt(samples)
    )


@pytest.mark.parametrize("distribution", ["normal", "lognormal", "gamma"])
def test_one_gpu_keeps_the_mean_and_shows_the_cv(distribution: str) -> None:
    """One GPU: the multipliers have mean 1 and the given coefficient of variation."""
    r = sample_breakdown(
        COMPUTE,
        1.0,
        Groups(),
        VariabilityConfig(compute_cv=0.1, distribution=distribution),
        20000,
        3,
    )
    assert r.mean_step_s == pytest.approx(1.0, abs=4 * 0.1 / math.sqrt(20000))
    assert r.std_step_s == pytest.approx(0.1, rel=0.05)


def test_pipeline_compute_follows_the_slowest_stage_and_the_bubble_the_others() -> None:
    """tp = 1, p stages: step = C max(a) + B (sum(a) - max(a)) / (p - 1), E[sum a] = p."""
    cv, p, samples = 0.05, 4, 8000
    c, b = 8.0, 6.0
    r = sample_breakdown(
        {"compute": c, "pipeline_bubble": b},
        c + b,
        Groups(pp=p),
        VariabilityConfig(compute_cv=cv),
        samples,
        4,
    )
    e_max = 1 + cv * expected_max_normal(p)
    expected = c * e_max + b * (p - e_max) / (p - 1)
    assert r.mean_step_s == pytest.approx(expected, abs=4 * (c + b) * cv / math.sqrt(samples))


@pytest.mark.parametrize(("n", "p"), [(1, 0.3), (64, 0.01), (1024, 0.001)])
def test_straggler_share_is_one_minus_no_straggler_anywhere(n: int, p: float) -> None:
    """P(at least one of n GPUs straggles) = 1 - (1 - p)^n; the mean step follows from it."""
    samples, slow = 10000, 1.5
    cfg = VariabilityConfig(straggler_probability=p, straggler_slowdown=slow)
    r = sample_breakdown(COMPUTE, 1.0, Groups(dp=n), cfg, samples, 5)
    q = 1 - (1 - p) ** n
    tol = 4 * math.sqrt(q * (1 - q) / samples)
    assert r.straggler_sample_share == pytest.approx(q, abs=tol)
    assert r.mean_step_s == pytest.approx(1 + (slow - 1) * r.straggler_sample_share, rel=1e-12)


def test_throttled_fraction_gives_the_exact_slowdown() -> None:
    """10 of 100 GPUs 20% slower, every step: the synchronous step is exactly 1.2x."""
    cfg = VariabilityConfig(throttle_fraction=0.1, throttle_clock_drop=0.2)
    r = sample_breakdown(
        {"compute": 3.0, "dp_comm_exposed": 1.0}, 4.0, Groups(tp=4, dp=25), cfg, 50, 6
    )
    for v in (r.mean_step_s, r.p50_step_s, r.p99_step_s, r.max_step_s):
        assert v == pytest.approx(3.0 * 1.2 + 1.0, rel=1e-14)
    assert r.std_step_s == pytest.approx(0.0, abs=1e-12)


def test_throttled_stage_slows_compute_but_not_the_bubble_of_the_others() -> None:
    """1 of 4 single-GPU stages throttled: C * 1.2 + B * (sum of the three others) / 3 = C * 1.2 + B."""
    cfg = VariabilityConfig(throttle_fraction=0.25, throttle_clock_drop=0.2)
    r = sample_breakdown({"compute": 8.0, "pipeline_bubble": 6.0}, 14.0, Groups(pp=4), cfg, 10, 7)
    assert r.mean_step_s == pytest.approx(8.0 * 1.2 + 6.0, rel=1e-14)


def test_stage_imbalance_is_exact() -> None:
    """Busiest of 4 stages at 1.6x the mean, the others at 0.8: 8 * 1.6 + 6 * 0.8 = 17.6 s."""
    cfg = VariabilityConfig(stage_imbalance=1.6)
    r = sample_breakdown(
        {"compute": 8.0, "pipeline_bubble": 6.0}, 14.0, Groups(tp=2, pp=4), cfg, 10, 8
    )
    assert r.p99_step_s == pytest.approx(17.6, rel=1e-14)


def test_moe_skew_scales_the_expert_share_and_the_all_to_all() -> None:
    """Half the compute in experts, busiest expert 1.4x the mean: 1 * 1.2 + 0.5 * 1.4 = 1.9 s."""
    cfg = VariabilityConfig(moe_skew=1.4)
    r = sample_breakdown(
        {"compute": 1.0, "ep_comm": 0.5}, 1.5, Groups(dp=4), cfg, 10, 9, expert_share=0.5
    )
    assert r.mean_step_s == pytest.approx(1.9, rel=1e-14)


def test_network_p99_over_p50_is_the_given_ratio() -> None:
    """One cluster-wide phase, lognormal with median 1: p50 = ideal, p99 / p50 = the ratio."""
    cfg = VariabilityConfig(network_p99_p50=3.0)
    r = sample_breakdown({"dp_comm_exposed": 2.0}, 2.0, Groups(dp=64), cfg, 40000, 10)
    assert r.p50_step_s == pytest.approx(2.0, rel=0.03)
    assert r.p99_step_s / r.p50_step_s == pytest.approx(3.0, rel=0.06)


def test_network_cv_keeps_the_mean_of_a_global_phase() -> None:
    cfg = VariabilityConfig(network_cv=0.2)
    r = sample_breakdown({"dp_comm_exposed": 2.0}, 2.0, Groups(dp=64), cfg, 20000, 11)
    assert r.mean_step_s == pytest.approx(2.0, abs=4 * 0.4 / math.sqrt(20000))
    assert r.std_step_s == pytest.approx(0.4, rel=0.05)


def test_network_tail_per_replica_grows_with_replicas() -> None:
    """TP communication draws one multiplier per replica; the step waits for the slowest."""
    cfg = VariabilityConfig(network_cv=0.2)
    means = [sample_breakdown({"tp_comm_exposed": 1.0}, 1.0, Groups(dp=d), cfg, 2000, 12).mean_step_s
             for d in (1, 8, 64)]  # fmt: skip
    assert means[0] < means[1] < means[2]


def test_p99_grows_with_gpu_count() -> None:
    """Fixed per-GPU cv: the slowest of more GPUs is slower (order statistics)."""
    cfg = VariabilityConfig(compute_cv=0.05)
    p99 = [sample_breakdown(COMPUTE, 1.0, Groups(tp=8, dp=n // 8), cfg, 1000, 13).p99_step_s
           for n in (8, 64, 512, 4096)]  # fmt: skip
    assert p99 == sorted(p99) and len(set(p99)) == 4


def test_zero_variability_is_exactly_the_ideal_step() -> None:
    parts = {"compute": 13.42, "pipeline_bubble": 0.62, "tp_comm_exposed": 4.98, "ep_comm": 0.1,
             "pp_comm_exposed": 0.001, "dp_comm_exposed": 0.43, "optimizer": 0.0036, "param_gather": 0.25,
             "zero3_gather_exposed": 0.0}  # fmt: skip
    ideal = 19.697625434250696  # not the float sum of the parts: the result must still equal it
    r = sample_breakdown(parts, ideal, Groups(tp=8, pp=4, dp=8), VariabilityConfig(), 100, 14)
    assert (r.mean_step_s, r.p50_step_s, r.p99_step_s, r.max_step_s) == (ideal,) * 4
    assert r.mean_slowdown == r.p99_slowdown == 1.0


def test_chunks_bound_memory_and_keep_every_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sampling in chunks of 3 steps still returns all 10 (exact under throttling)."""
    monkeypatch.setattr(sample_module, "CHUNK_ELEMENTS", 3 * 16)
    cfg = VariabilityConfig(
        throttle_fraction=0.5, straggler_probability=1.0, straggler_slowdown=2.0
    )
    r = sample_breakdown(COMPUTE, 1.0, Groups(dp=16), cfg, 10, 15)
    assert (
        r.samples == 10 and r.straggler_sample_share == 1.0 and r.max_step_s == pytest.approx(2.2)
    )


def test_unknown_parts_are_held_and_named() -> None:
    r = sample_breakdown(
        {"compute": 1.0, "offload": 0.5},
        1.5,
        Groups(dp=8),
        VariabilityConfig(compute_cv=0.1),
        50,
        16,
    )
    assert r.p50_step_s > 1.5 and any("offload" in n for n in r.notes)
    assert "not re-simulated" in r.note


@st.composite
def configs(draw: st.DrawFn) -> tuple[dict[str, float], Groups, VariabilityConfig]:
    """A pipeline-consistent breakdown (bubble = (p - 1) passes of m) and any valid section."""
    groups = Groups(
        tp=draw(st.sampled_from([1, 2, 4])),
        pp=draw(st.sampled_from([1, 2, 4])),
        dp=draw(st.integers(1, 8)),
    )
    compute = draw(st.floats(0.01, 10))
    micro = draw(st.integers(1, 64))
    parts = {
        "compute": compute,
        "pipeline_bubble": compute * (groups.pp - 1) / micro,
        "optimizer": draw(st.floats(0, 1)),
    }
    for key in ("tp_comm_exposed", "ep_comm", "pp_comm_exposed", "dp_comm_exposed", "param_gather"):
        parts[key] = draw(st.floats(0, 5))
    tail = draw(st.sampled_from(["none", "cv", "ratio"]))
    cfg = VariabilityConfig(
        compute_cv=draw(st.floats(0, 0.5)),
        distribution=draw(st.sampled_from(["normal", "lognormal", "gamma"])),
        straggler_probability=draw(st.floats(0, 1)),
        straggler_slowdown=draw(st.floats(1, 3)),
        throttle_fraction=draw(st.floats(0, 1)),
        throttle_clock_drop=draw(st.floats(0, 0.5)),
        network_cv=draw(st.floats(0, 0.5)) if tail == "cv" else 0.0,
        network_p99_p50=draw(st.floats(1, 4)) if tail == "ratio" else None,
        stage_imbalance=draw(st.floats(1, groups.pp)),
        moe_skew=draw(st.floats(1, 2)),
    )
    return parts, groups, cfg


@settings(max_examples=60, deadline=None, derandomize=True)
@given(case=configs(), share=st.floats(0, 1), seed=st.integers(0, 2**32 - 1))
def test_slowdown_is_at_least_one(
    case: tuple[dict[str, float], Groups, VariabilityConfig], share: float, seed: int
) -> None:
    """Variability never speeds a synchronous step up: the mean is >= the ideal step within
    5 Monte Carlo standard errors; with only slow-downs (no mean-1 jitter, no mean-1 network
    tail) every sample is >= the ideal step."""
    parts, groups, cfg = case
    ideal = sum(parts.values())
    samples = 400
    r = sample_breakdown(parts, ideal, groups, cfg, samples, seed, expert_share=share)
    assert r.mean_step_s >= ideal * (1 - 1e-12) - 5 * r.std_step_s / math.sqrt(samples)
    if cfg.compute_cv == 0 and cfg.network_cv == 0 and cfg.network_p99_p50 is None:
        assert r.p50_step_s >= ideal * (1 - 1e-12) and r.mean_slowdown >= 1 - 1e-12


# --- the command line -------------------------------------------------------------------

JITTER = ["--set", "variability.compute_cv=0.1", "--set", "variability.straggler_probability=0.01"]


def test_run_samples_reports_the_distribution(capsys: pytest.CaptureFixture[str]) -> None:
    rec = run_json(capsys, "gpt2-1gpu", "--samples", "200", *JITTER)
    v = rec["variability"]
    assert v["ideal_step_s"] == rec["step_time_s"] and v["samples"] == 200 and v["seed"] == 0
    assert v["groups"] == {"tp": 1, "pp": 1, "dp": 1} and v["gpus"] == rec["gpus"]
    assert v["p50_step_s"] <= v["p90_step_s"] <= v["p99_step_s"] <= v["max_step_s"]
    assert v["p99_slowdown"] == pytest.approx(v["p99_step_s"] / v["ideal_step_s"])
    assert "not re-simulated" in v["note"]


def test_run_text_prints_the_block(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "gpt2-1gpu", "--samples", "20", *JITTER]) == 0
    out = capsys.readouterr().out
    assert (
        "variability: 20 sampled steps, seed 0" in out
        and "p99" in out
        and "note: Monte Carlo" in out
    )


def test_same_seed_same_bytes_other_seed_other_samples(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "gpt2-1gpu", "--samples", "100", "--json", *JITTER]
    outs = []
    for seed in ("3", "3", "4"):
        assert main([*argv, "--seed", seed]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1]
    a, b = (json.loads(o)["variability"] for o in outs[1:])
    assert a["seed"] == 3 and b["seed"] == 4 and a["mean_step_s"] != b["mean_step_s"]


def test_without_samples_nothing_changes(capsys: pytest.CaptureFixture[str]) -> None:
    plain = run_json(capsys, "gpt2-1gpu")
    with_section = run_json(capsys, "gpt2-1gpu", *JITTER)
    assert "variability" not in plain and plain == with_section


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--samples", "10", "--set", "variability.compute_cv=-0.1"], "variability.compute_cv"),
        (
            ["--samples", "10", "--set", "variability.straggler_probability=1.5"],
            "variability.straggler_probability",
        ),
        (
            ["--samples", "10", "--set", "variability.distribution=weibull"],
            "'normal', 'lognormal' or 'gamma'",
        ),
        (["--samples", "10", "--set", "variability.compute_cv=fast"], "variability.compute_cv"),
        (["--samples", "10", "--set", "variability.jitter=0.1"], "variability.jitter: unknown key"),
        (["--samples", "0", *JITTER], "--samples 0"),
        (["--samples", "10"], "add one"),
        (
            [
                "--samples",
                "10",
                "--set",
                "variability.network_cv=0.1",
                "--set",
                "variability.network_p99_p50=2",
            ],
            "not both",
        ),
        (
            ["--samples", "10", "--set", "parallel.dp=1", "--set", "variability.stage_imbalance=2"],
            None,
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str], named: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["run", "gpt2-1gpu", *argv])
    out, err = capsys.readouterr()
    if named is None:  # stage_imbalance on one stage is no error: it has no effect, and says so
        assert code == 0 and "stage_imbalance has no effect" in out
        return
    assert code == 2 and len(err.strip().splitlines()) == 1 and named in err, err
    assert "Traceback" not in err


def test_stage_imbalance_beyond_the_stages_is_refused() -> None:
    with pytest.raises(
        ConfigError, match=r"variability.stage_imbalance: 5.0 exceeds the 4 pipeline stages"
    ):
        sample_breakdown(COMPUTE, 1.0, Groups(pp=4), VariabilityConfig(stage_imbalance=5.0), 10, 0)


def test_section_rejects_bools_and_strings_for_numbers() -> None:
    for value in (True, "0.1"):
        with pytest.raises(ConfigError, match=r"variability\.compute_cv"):
            validate_section(VariabilityConfig, {"compute_cv": value}, "variability")


def test_gpu_count_follows_the_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    """A real multi-GPU plan (8 GPUs, ZeRO-3): the groups are the plan's."""
    argv = ["llama3-8b-dgx", "--network", "analytical", "--samples", "300",
            "--set", "variability.compute_cv=0.05"]  # fmt: skip
    rec = run_json(capsys, *argv)
    v, plan = rec["variability"], rec["plan"]
    assert v["groups"] == {k: plan[k] for k in ("tp", "pp", "dp")} and v["gpus"] == rec["gpus"]
    assert v["p99_slowdown"] > 1.0 and np.isfinite(v["mean_step_s"])


def test_readme_variability_command_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's command cannot rot: it runs and prints the block."""
    text = (REPO / "README.md").read_text()
    section = text.split("## Variability and stragglers", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    argv = shlex.split(block.replace("\\\n", " "))
    assert argv[:2] == ["clustersim", "run"] and "--samples" in argv
    assert main(argv[1:]) == 0
    assert "variability: 1000 sampled steps" in capsys.readouterr().out
