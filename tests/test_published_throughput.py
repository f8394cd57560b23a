"""Framework benchmark tables (NeMo, Megatron-Bridge, torchtitan on H100 and H200)
against the framework presets, out of sample: ``calibrate/published_throughput.yaml``.

Bounds: every run within 15% of its published tokens/s per GPU and each source's mean
within 8% (measured 2026-12-04: NeMo 24.07 5.6% mean / 9.4% max, NeMo 24.03's long
sequences with context parallelism up to 32 (8K-1M tokens) 3.2% / 7.6%, Megatron-Bridge
6.2% / 9.2%, torchtitan 2024 6.5% / 8.9%, torchtitan async TP 5.2% / 9.5%, torchtitan's
H200 runs 1.2% / 1.9%). torchtitan's rows before its FlashAttention-2, its per-op SAC and
early-stopping recompute and the 500 W card's measured power clock were modelled
(2026-12-02): 2024 6.5% / 13.1%, async TP 5.4% / 10.5%, H200 +19% / +20% (then a tracked
known miss); before the fp8 sequence-parallel gathers, NeMo's cuDNN attention default and
FSDP2's staggered gathers under PP, 13.0% / 23.6% on the NeMo rows and 21.4% on
torchtitan's 405B rows.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from calibrate.published_throughput import (
    ThroughputRow,
    predicted_tokens_per_gpu,
    throughput_rows,
)

ALL_ROWS = throughput_rows()
#: The rows the bounds hold; the others are known gaps, each a strict expected failure.
ROWS = [r for r in ALL_ROWS if not r.known_gap]
GAPS = [r for r in ALL_ROWS if r.known_gap]


@pytest.fixture(scope="module")
def errors() -> dict[str, float]:
    """Relative error of every run, by label and source."""
    return {f"{r.source}|{r.label}": predicted_tokens_per_gpu(r) / r.measured - 1 for r in ROWS}


def test_the_table_covers_three_frameworks_and_names_its_sources() -> None:
    frameworks = {r.scenario["training"]["framework"] for r in ALL_ROWS}
    assert frameworks == {"nemo", "torchtitan"} and len(ROWS) == 29 and not GAPS
    assert all(r.measured > 0 and r.gpus >= 8 for r in ALL_ROWS)


def test_every_run_is_within_15_percent(errors: dict[str, float]) -> None:
    worst = max(errors.items(), key=lambda kv: abs(kv[1]))
    assert abs(worst[1]) <= 0.15, worst


def test_each_source_is_within_8_percent_on_average(errors: dict[str, float]) -> None:
    by_source: dict[str, list[float]] = defaultdict(list)
    for key, e in errors.items():
        by_source[key.split("|")[0]].append(abs(e))
    means = {s: sum(v) / len(v) for s, v in by_source.items()}
    assert set(means) == {
        "nemo-24.07",
        "nemo-24.03-long",
        "bridge-26.04.01",
        "titan-2024",
        "titan-asynctp-2025",
        "titan-h200-2025",
    }
    assert max(means.values()) <= 0.08, means


def test_async_tp_and_fp8_move_the_right_way(errors: dict[str, float]) -> None:
    """Each published speed-up's sign is reproduced: async TP faster than vanilla TP, fp8
    faster than bf16, interleaving faster than 1F1B."""
    t = {r.label: predicted_tokens_per_gpu(r) for r in ROWS if r.source.startswith("titan")}
    assert t["70B FSDP32 async TP8 bf16"] > t["70B FSDP32 TP8 bf16"]
    assert t["70B FSDP32 TP8 fp8"] > t["70B FSDP32 TP8 bf16"]
    assert t["405B FSDP8 TP8 PP8 interleaved"] > t["405B FSDP8 TP8 PP8 1F1B"]


def test_long_sequences_slow_down_as_the_attention_grows() -> None:
    """NeMo's long-sequence rows fall from 13.9k to 318 tokens/s per GPU as the sequence
    grows from 8K to 1M (attention's s^2 work); the simulated ones fall in the same order."""
    long = [r for r in ROWS if r.source == "nemo-24.03-long"]
    predicted = [predicted_tokens_per_gpu(r) for r in long]
    assert [r.measured for r in long] == sorted((r.measured for r in long), reverse=True)
    assert predicted == sorted(predicted, reverse=True)


def test_gpus_multiply_the_parallel_degrees() -> None:
    row = ThroughputRow("x", "s", 1.0, {"parallel": {"tp": 2, "pp": 3, "cp": 2, "dp": 4}})
    assert row.gpus == 48


def test_the_h200_runs_agree_through_the_profile_and_the_catalog() -> None:
    """torchtitan's two H200 runs (Llama 3.1 8B, fp8, 32 and 64 GPUs) with the kernel
    torchtitan pins on Hopper (SDPA's flash backend, the preset's ``fa2``) come out within
    5% both through the profile a user gets on H200 (auto-selected h200-ops, op-level
    rates) and with the shipped defaults (profile none). With the parametric ``fitted``
    attention the two paths fall 25-35 points apart (+10% and -19%): the kernel, not a
    fitted value, is what reconciles them."""
    h200 = [r for r in ROWS if r.source == "titan-h200-2025"]
    assert len(h200) == 2
    for row in h200:
        for profile in (None, "none"):
            assert abs(predicted_tokens_per_gpu(row, profile=profile) / row.measured - 1) <= 0.05
        auto = predicted_tokens_per_gpu(row, attention_kernel="fitted")
        defaults = predicted_tokens_per_gpu(row, attention_kernel="fitted", profile="none")
        assert 0.25 <= (auto - defaults) / row.measured <= 0.35, (row.label, auto, defaults)
