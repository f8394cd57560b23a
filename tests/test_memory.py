"""Memory per GPU: Korthikanti activation formulas, ZeRO, recompute, TP, fits."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.training.memory.activations import activation_bytes_per_layer
from sim.training.memory.report import MemoryParams, memory_per_gpu, memory_per_stage
from sim.workload.models import megatron_gpt, model_preset, param_count
from sim.workload.plan import ParallelPlan

GIB = 2**30
GPT = megatron_gpt(8192, 8, heads=64)
S, B, H, A = 2048, 2, 8192, 64


def _act(**kw: object) -> float:
    return activation_bytes_per_layer(GPT, S, B, flash_attention=False, **kw)  # type: ignore[arg-type]


def test_korthikanti_no_parallelism() -> None:
    """Korthikanti et al. 2022 eq. 1: s b h (34 + 5 a s / h) bytes per layer."""
    assert _act() == S * B * H * (34 + 5 * A * S / H)


def test_korthikanti_tensor_parallel() -> None:
    """Eq. 2, TP without SP: s b h (10 + 24/t + 5 a s / (h t))."""
    t = 8
    assert _act(tp=t) == pytest.approx(S * B * H * (10 + 24 / t + 5 * A * S / (H * t)))


def test_korthikanti_sequence_parallel() -> None:
    """Eq. 4, TP with SP: s b h / t (34 + 5 a s / h)."""
    t = 8
    assert _act(tp=t, sp=True) == pytest.approx(S * B * H / t * (34 + 5 * A * S / H))


def test_korthikanti_selective_and_full_recompute() -> None:
    """Selective drops 5as/h (eq. 6: 34 s b h / t); full keeps the input 2 s b h / t."""
    t = 8
    assert _act(tp=t, sp=True, recompute="selective") == pytest.approx(34 * S * B * H / t)
    assert _act(tp=t, sp=True, recompute="full") == pytest.approx(2 * S * B * H / t)


def test_recompute_reduces_activation_memory() -> None:
    """none > selective > full, for the whole GPU as for one layer."""
    m = model_preset("llama2-70b")
    acts = [
        memory_per_gpu(
            m, ParallelPlan(tp=8, pp=4, sp=True, recompute=r, global_batch=32), 4096,
            80 * GIB, flash_attention=False,
        ).activations_bytes
        for r in ("none", "selective", "full")
    ]  # fmt: skip
    assert acts[0] > acts[1] > acts[2]


def test_more_zero_sharding_means_less_memory() -> None:
    """ZeRO 0 > 1 > 2 > 3 in total bytes per GPU (dp = 8)."""
    m = model_preset("llama2-13b")
    totals = [
        memory_per_gpu(m, ParallelPlan(dp=8, zero=z, global_batch=8), 4096, 80 * GIB).total_bytes
        for z in range(4)
    ]
    assert totals == sorted(totals, reverse=True) and len(set(totals)) == 4


def test_larger_tp_means_less_memory() -> None:
    """Doubling TP (with SP) lowers the per-GPU total."""
    m = model_preset("llama2-70b")
    totals = [
        memory_per_gpu(m, ParallelPlan(tp=t, sp=True, global_batch=4), 4096, 80 * GIB).total_bytes
        for t in (2, 4, 8)
    ]
    assert totals[0] > totals[1] > totals[2]


def test_mixed_precision_adam_bytes_per_parameter() -> None:
    """Megatron-LM docs/distrib_optimizer.md: bf16 params with fp32 main grads take 18
    bytes per parameter (2 + 4 + 12), 6 + 12/d with the distributed optimizer (ZeRO-1);
    bf16 gradients give the classic 16 (Rajbhandari et al. 2020)."""
    m = model_preset("llama2-7b")

    def states(**kw: object) -> float:
        r = memory_per_gpu(m, ParallelPlan(global_batch=8, **kw), 4096, 80 * GIB)  # type: ignore[arg-type]
        return r.weights_bytes + r.grads_bytes + r.optimizer_bytes

    n = param_count(m)
    assert states() == 18 * n
    assert states(grad_bytes=2) == 16 * n
    assert states(dp=8, zero=1) == pytest.approx((6 + 12 / 8) * n)


def test_over_hbm_is_an_answer_not_an_error() -> None:
    """Llama-2-70B on one GPU does not fit: fits is False with the breakdown."""
    r = memory_per_gpu(model_preset("llama2-70b"), ParallelPlan(global_batch=1), 4096, 80 * GIB)
    assert not r.fits
    assert r.breakdown["optimizer"] > 80 * GIB
    assert r.total_bytes == sum(r.breakdown.values())


def test_small_model_fits() -> None:
    """GPT-2 small fits an 80 GiB GPU with the default workspace margin."""
    r = memory_per_gpu(model_preset("gpt2-124m"), ParallelPlan(global_batch=8), 1024, 80 * GIB)
    assert r.fits and r.workspace_bytes == MemoryParams().workspace_bytes


def test_1f1b_holds_less_activation_memory_than_gpipe() -> None:
    """Same plan, same bubble: 1F1B's first stage keeps p micro-batches, GPipe's all m."""
    m = model_preset("llama2-70b")

    def acts(schedule: str) -> float:
        plan = ParallelPlan(tp=8, pp=4, sp=True, schedule=schedule, global_batch=32)
        return memory_per_stage(m, plan, 4096, 80 * GIB)[0].activations_bytes

    assert acts("1f1b") < acts("gpipe")
    assert acts("1f1b") == pytest.approx(acts("gpipe") * 4 / 32, rel=0.01)


def test_interleaving_holds_p_times_one_plus_p_minus_1_over_pv() -> None:
    """Megatron: the first stage of the interleaved schedule holds p (1 + (p-1)/(p v))."""
    m = megatron_gpt(4096, 32, heads=32)
    base = ParallelPlan(pp=4, global_batch=16, recompute="full")
    one = memory_per_stage(m, base, 2048, 80 * GIB)[0].activations_bytes
    inter = ParallelPlan(pp=4, global_batch=16, schedule="interleaved", virtual_stages=2,
                         recompute="full")  # fmt: skip
    two = memory_per_stage(m, inter, 2048, 80 * GIB)[0].activations_bytes
    per_layer = activation_bytes_per_layer(m, 2048, 1, recompute="full")
    layers = 8
    assert two - one == pytest.approx(per_layer * layers * (4 * (1 + 3 / 8) - 4))


def test_without_dropout_no_masks_are_kept() -> None:
    """Korthikanti's terms less the dropout masks and the attention-dropout output:
    s b h (32 + 2 a s / h) per layer (Llama, MPT: dropout 0)."""
    m = replace(GPT, dropout=0.0)
    assert activation_bytes_per_layer(m, S, B, flash_attention=False) == S * B * H * (
        32 + 2 * A * S / H
    )


def test_fragmentation_is_a_fraction_of_the_rest_and_workspace_is_fixed() -> None:
    m = model_preset("llama2-7b")
    plan = ParallelPlan(dp=8, zero=3, global_batch=8)
    none = memory_per_gpu(m, plan, 4096, 80e9, MemoryParams(fragmentation=0.0))
    some = memory_per_gpu(m, plan, 4096, 80e9, MemoryParams(fragmentation=0.1))
    rest = none.total_bytes - none.workspace_bytes
    assert some.fragmentation_bytes == pytest.approx(0.1 * rest)
    assert some.total_bytes == pytest.approx(none.total_bytes + 0.1 * rest)


def test_a_plan_that_does_not_fit_says_by_how_much_and_what_fits() -> None:
    """Llama-2-13B, DDP on 8 GPUs: over by its optimizer states; only ZeRO-3 fits."""
    from sim.training.memory.advice import memory_advice

    m, plan = model_preset("llama2-13b"), ParallelPlan(dp=8, global_batch=16)
    r = memory_per_gpu(m, plan, 4096, 80e9)
    notes = memory_advice(m, plan, 4096, r)
    assert f"{r.over_bytes / GIB:.1f} GiB more" in notes[0]
    assert "optimizer" in notes[0]
    assert "parallel.zero=3" in notes[1] and "parallel.zero=1" not in notes[1]
    fits = memory_per_gpu(m, replace(plan, zero=3), 4096, 80e9)
    assert fits.fits and not memory_advice(m, replace(plan, zero=3), 4096, fits)


def test_fused_cross_entropy_keeps_bf16_logits_only() -> None:
    """Eager fp32 cross-entropy keeps fp32 log-probabilities and bf16 logits (6 bytes per
    logit); a fused kernel keeps the bf16 logits and writes the gradient in place (2)."""
    m, plan = model_preset("gpt2-124m"), ParallelPlan(global_batch=8, micro_batch=4)
    fp32 = memory_per_gpu(m, plan, 1024, 80e9, cross_entropy="fp32").activations_bytes
    fused = memory_per_gpu(m, plan, 1024, 80e9, cross_entropy="fused").activations_bytes
    assert fp32 - fused == 4 * 1024 * m.vocab * (6 - 2)
