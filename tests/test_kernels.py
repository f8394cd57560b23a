"""The per-operation compute model: GEMMs by shape, attention, memory-bound kernels, fp8."""

from __future__ import annotations

import csv
import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.catalog import gpu_spec
from sim.errors import ConfigError
from sim.training.compute.kernels import (
    attention_executed_flops,
    attention_time_s,
    gemm_shape_eff,
    gemm_time_s,
    memory_time_s,
    op_time_s,
)
from sim.training.compute.params import compute_params
from sim.workload.models import model_preset
from sim.workload.ops import OpContext, layer_ops
from sim.workload.primitives import Op
from tests.helpers import SHARED_DATA

H100 = gpu_spec("H100-SXM")


def _mamf_rows() -> list[dict[str, str]]:
    path = SHARED_DATA / "published" / "matmul-achievable-tflops-bf16.csv"
    if not path.exists():
        pytest.skip(f"published table absent: {path}")
    return list(csv.DictReader(path.read_text().splitlines()[1:]))


@pytest.mark.parametrize(
    ("gpu", "accelerator"),
    [("H100-SXM", "NVIDIA H100 SXM"), ("A100-SXM-80GB", "NVIDIA A100 SXM"),
     ("B200", "NVIDIA B200 SXM"), ("GB200", "NVIDIA GB200 SXM")],
)  # fmt: skip
def test_gemm_reproduces_the_published_achievable_matmul_at_its_shape(
    gpu: str, accelerator: str
) -> None:
    """At mamf-finder's best shape the GEMM model gives its measured TFLOP/s (within 0.1%).

    Source: stas00/ml-engineering "Maximum Achievable Matmul FLOPS" bf16 table
    (../shared/data/published/matmul-achievable-tflops-bf16.csv), with the sustained clock
    and the training factor set to 1 (a micro-benchmark, not a training step) and no launch
    gap.
    """
    row = next(r for r in _mamf_rows() if r["Accelerator"] == accelerator)
    m, n, k = (int(x) for x in row["Best Shape MxNxK"].split("x"))
    p = replace(compute_params(gpu), matmul_training_factor=1.0, sustained_clock=1.0,
                launch_overhead_s=0.0)  # fmt: skip
    t = gemm_time_s(m, n, k, 1, "bf16", gpu_spec(gpu), p)
    achieved = 2 * m * n * k / t / 1e12
    peak = gpu_spec(gpu).peak_flops["bf16"] / 1e12
    published = float(row["MAMF"]) / float(row["Theory"]) * peak
    assert achieved == pytest.approx(published, rel=1e-3)


def test_wave_quantization_one_tile_more_than_the_sms_costs_a_wave() -> None:
    """132 output tiles of 128 x 256 fill H100's 132 SMs exactly; one row more needs a
    second wave in either orientation (133 or 134 tiles in 2 x 132 slots; the better
    orientation counts, as cuBLAS may transpose)."""
    p = compute_params("H100-SXM")
    tm, tn = p.gemm_tile
    full = gemm_shape_eff(tm * 132, tn, 4096, 1, p)
    spill = gemm_shape_eff(tm * 132 + 1, tn, 4096, 1, p)
    assert spill / full == pytest.approx(134 / 264, rel=1e-5)  # one row: fixed cost ~1e-6


@settings(max_examples=40, deadline=None)
@given(k=st.integers(16, 1 << 15), m=st.integers(1, 1 << 14), n=st.integers(1, 1 << 14))
def test_gemm_efficiency_grows_with_the_inner_dimension(k: int, m: int, n: int) -> None:
    """Doubling K at fixed M, N never lowers the achieved rate, and it stays below peak."""
    p = compute_params("H100-SXM")
    rate = [2 * m * n * kk / gemm_time_s(m, n, kk, 1, "bf16", H100, p) for kk in (k, 2 * k)]
    assert rate[1] >= rate[0] * (1 - 1e-12)
    assert max(rate) < H100.peak_flops["bf16"]


def test_causal_attention_executes_the_lower_triangle_and_its_diagonal_blocks() -> None:
    """Causal: (s + 128) / 2s of the square; backward 2.5x the forward (recomputed scores);
    head size 112 runs as 128 (FlashAttention-2 kernels come in multiples of 32)."""
    s, d = 4096, 128
    full = 4 * s * s * d
    assert attention_executed_flops(1, 1, s, d, True, False) == full * (s + 128) / (2 * s)
    assert attention_executed_flops(2, 3, s, d, False, True) == 2 * 3 * full * 2.5
    assert attention_executed_flops(1, 1, s, 112, False, False) == 4 * s * s * 128


def test_attention_is_slower_at_short_sequences_and_in_backward() -> None:
    """Per executed FLOP: longer sequences run faster, backward slower than forward."""
    p = compute_params("H100-SXM")

    def rate(s: int, bwd: bool) -> float:
        t = attention_time_s(8, 16, s, 128, True, bwd, "bf16", H100, p) - p.launch_overhead_s
        return attention_executed_flops(8, 16, s, 128, True, bwd) / t

    assert rate(512, False) < rate(4096, False) < rate(32768, False)
    assert rate(4096, True) == pytest.approx(rate(4096, False) * p.attn_bwd_ratio)


def test_memory_bound_kernels_move_bytes_at_the_fitted_or_stream_bandwidth() -> None:
    """Framework elementwise kernels at mem_eff * mem_training_factor (kernel level times
    what a training step keeps of it), fused kernels at stream_eff, + launch."""
    p = compute_params("H100-SXM")
    t = memory_time_s(2.9e9, 1e6, H100, p)
    eager = p.mem_eff * p.mem_training_factor
    assert t == pytest.approx(2.9e9 / (H100.hbm_Bps * eager) + p.launch_overhead_s)
    fused = op_time_s(Op("cast", bytes=2.9e9, cls="stream"), H100, p)
    assert fused == pytest.approx(2.9e9 / (H100.hbm_Bps * p.stream_eff) + p.launch_overhead_s)


def test_fp8_casts_make_fp8_layers_faster_than_bf16_but_short_of_the_peak_ratio() -> None:
    """A Llama-2-7B layer at 8k tokens: fp8 GEMMs at ~2x, their casts and the bf16
    attention and elementwise kernels keep the whole layer well under 2x (MosaicML's
    H100 fp8 table shows 1.0-1.35x end to end)."""
    p, m = compute_params("H100-SXM"), model_preset("llama2-7b")

    def layer_s(precision: str) -> float:
        ops = layer_ops(OpContext(m, 2, 4096, precision=precision))
        return sum(op_time_s(o, H100, p) for o in ops.fwd + ops.bwd if o.kind == "compute")

    ratio = layer_s("bf16") / layer_s("fp8")
    assert 1.1 < ratio < 1.7
    names = [o.name for o in layer_ops(OpContext(m, 1, 4096, precision="fp8")).fwd]
    assert {"qkv_cast_x", "qkv_cast_w"} <= set(names) and "logits" not in names


def test_fp8_on_a_gpu_without_fp8_is_a_config_error() -> None:
    """training.precision fp8 on an A100 names the precision key."""
    a100 = gpu_spec("A100-SXM-80GB")
    op = Op("mm", flops=1e9, matmul=True, dtype="fp8", cls="gemm", shape=(1024, 1024, 512, 1))
    with pytest.raises(ConfigError, match=r"training\.precision"):
        op_time_s(op, a100, compute_params("A100-SXM-80GB"))


def test_communication_ops_are_timed_by_the_engine() -> None:
    op = Op("ar", kind="tp_comm", comm_op="all_reduce", comm_bytes=1e6, group="tp")
    with pytest.raises(ValueError, match="communication"):
        op_time_s(op, H100, compute_params("H100-SXM"))


def test_launch_overhead_is_paid_per_kernel() -> None:
    """An empty GEMM costs exactly one launch gap."""
    p = compute_params("H100-SXM")
    assert gemm_time_s(0, 10, 10, 1, "bf16", H100, p) == p.launch_overhead_s
    assert math.isfinite(gemm_time_s(1, 1, 1, 1, "bf16", H100, p))


def test_unfused_attention_is_slower_than_flash_at_long_sequences() -> None:
    """Without a fused kernel the s x s scores go through HBM (softmax, dropout)."""
    p, m = compute_params("H100-SXM"), model_preset("gpt3-175b")

    def layer_s(flash: bool) -> float:
        ops = layer_ops(OpContext(m, 1, 8192, tp=8, flash_attention=flash))
        return sum(op_time_s(o, H100, p) for o in ops.fwd + ops.bwd if o.kind == "compute")

    assert layer_s(False) > layer_s(True)


def test_fused_kernels_move_elementwise_bytes_at_stream_bandwidth() -> None:
    """Megatron-style fused norms, activations and residual adds: same bytes, class
    ``stream``; the layer's memory-bound time shrinks by the eager bandwidth
    (mem_eff * mem_training_factor) over stream_eff."""
    p, m = compute_params("H100-SXM"), model_preset("gpt3-175b")

    def elementwise(fused: bool) -> tuple[float, float]:
        ops = layer_ops(OpContext(m, 1, 2048, tp=8, fused_kernels=fused))
        mem = [o for o in ops.fwd + ops.bwd if o.kind == "compute" and o.cls != "gemm"
               and not o.cls.startswith("attn")]  # fmt: skip
        t = sum(op_time_s(o, H100, p) - p.launch_overhead_s for o in mem)
        return sum(o.bytes for o in mem), t

    (eager_b, eager_t), (fused_b, fused_t) = elementwise(False), elementwise(True)
    assert eager_b == fused_b
    eager = p.mem_eff * p.mem_training_factor
    assert fused_t == pytest.approx(eager_t * eager / p.stream_eff, rel=1e-9)
