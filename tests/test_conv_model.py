"""Convolutions as cuDNN runs them, and the GEMM model's split-K and memory bound."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from sim.catalog import gpu_spec
from sim.training.compute.conv import (
    CONV_PASSES,
    NORM_ACCESSES,
    WINOGRAD_SAVING,
    channel_padding,
    conv_gemm_s,
    conv_layer_s,
)
from sim.training.compute.kernels import (
    SPLIT_K_MIN,
    gemm_compute_s,
    gemm_io_bytes,
    gemm_shape_eff,
    gemm_time_s,
)
from sim.training.compute.params import compute_params
from sim.workload.cnn import cnn_preset
from sim.workload.layer_model import ConvShape

A100 = gpu_spec("A100-SXM-80GB")
P = replace(compute_params("A100-SXM-80GB"), launch_overhead_s=0.0)


def test_few_tiles_and_a_long_k_split_k_across_idle_sms() -> None:
    """A 128 x 128 output (1 tile of 108 SMs) over K = 108 * 512: cuBLAS-style split-K
    runs 108 slices of 512, so the waves fill every SM (vs 1/108 without splitting)."""
    k = 108 * SPLIT_K_MIN
    eff = gemm_shape_eff(128, 128, k, 1, P)
    flops = 2 * 128 * 128 * k
    ramp = SPLIT_K_MIN / (SPLIT_K_MIN + P.matmul_k_half)
    assert eff == pytest.approx(ramp * flops / (flops + P.matmul_half_flops))


def test_a_thin_gemm_is_bound_by_its_hbm_traffic() -> None:
    """K = 16 on H100: reading A and writing C dominate; the time is the bytes at
    stream_eff."""
    h100, p = gpu_spec("H100-SXM"), replace(compute_params("H100-SXM"), launch_overhead_s=0.0)
    m, n, k = 1 << 20, 256, 16
    io = gemm_io_bytes(m, n, k, 1, "bf16") / (h100.hbm_Bps * p.stream_eff)
    assert io > gemm_compute_s(m, n, k, 1, "bf16", h100, p)
    assert gemm_time_s(m, n, k, 1, "bf16", h100, p) == pytest.approx(io)


def test_fully_connected_layer_is_its_gemm_plus_bias_and_relu() -> None:
    """A 1x1 map: forward = the (b, cout, cin) GEMM (no conv_eff) + 4 accesses/element."""
    fc = ConvShape(4096, 1000, 1, 1, 1, 1, 1, 1, norm="bias")
    b = 512
    gemm = gemm_time_s(b, 1000, 4096, 1, "bf16", A100, P)
    bias = b * 1000 * NORM_ACCESSES["bias"][0] * 2 / (A100.hbm_Bps * P.mem_eff)
    got = conv_layer_s(fc, b, "bf16", A100, P, backward=False, first=False)
    assert got == pytest.approx(max(gemm, 0) + bias)


def test_winograd_cuts_fp32_3x3_compute_by_two_and_a_quarter() -> None:
    """fp32 3x3 stride-1 convolutions run as Winograd F(2x2, 3x3) (Lavin & Gray 2016);
    a stride-2 one does not."""
    big = replace(P, stream_eff=1.0, mem_eff=1.0)
    s1 = ConvShape(256, 256, 3, 3, 56, 56, 56, 56, 1, norm="none")
    s2 = ConvShape(256, 256, 3, 3, 56, 56, 28, 28, 2, norm="none")
    c1 = gemm_compute_s(64 * 56 * 56, 256, 256 * 9, 1, "fp32", A100, replace(big, conv_eff=1.0))
    t1 = conv_layer_s(s1, 64, "fp32", A100, replace(big, conv_eff=1.0), False, False)
    assert t1 == pytest.approx(c1 / WINOGRAD_SAVING, rel=1e-9)
    c2 = gemm_compute_s(64 * 28 * 28, 256, 256 * 9, 1, "fp32", A100, replace(big, conv_eff=1.0))
    t2 = conv_layer_s(s2, 64, "fp32", A100, replace(big, conv_eff=1.0), False, False)
    assert t2 == pytest.approx(c2, rel=1e-9)


def test_conv_eff_is_a_tensor_core_cost_that_fp32_does_not_pay() -> None:
    """A 3x3 convolution's tensor-core (bf16) time scales as 1 / conv_eff; on the CUDA
    cores (fp32) it runs at the GEMM rate whatever conv_eff says (V100's fp32 VGG-16 within
    9% of Lambda's 249 images/s at the GEMM rate, 45% short at the tensorflow stack's 0.5543)."""
    big = replace(P, stream_eff=1.0, mem_eff=1.0, conv_tile=None)
    c = ConvShape(256, 256, 3, 3, 56, 56, 28, 28, 2, norm="none")  # stride 2: no Winograd
    half, full = replace(big, conv_eff=0.5), replace(big, conv_eff=1.0)
    for dtype, ratio in (("bf16", 2.0), ("fp32", 1.0)):
        gemm = gemm_compute_s(64 * 28 * 28, 256, 256 * 9, 1, dtype, A100, full)
        t_half = conv_layer_s(c, 64, dtype, A100, half, False, False)
        assert t_half == pytest.approx(gemm * ratio, rel=1e-9)
        assert conv_layer_s(c, 64, dtype, A100, full, False, False) == pytest.approx(gemm)


def test_the_stack_factor_scales_only_tensor_core_multi_tap_convolutions() -> None:
    """training.conv_stack's factor multiplies conv_eff: a 3x3 bf16 convolution's GEMMs
    take 1/0.5 as long at factor 0.5; a 1x1 one (a plain GEMM) and an fp32 one (CUDA
    cores) do not change."""
    big = replace(P, stream_eff=1.0, mem_eff=1.0, conv_tile=None, conv_eff=1.0)
    tap3 = ConvShape(256, 256, 3, 3, 56, 56, 28, 28, 2, norm="none")
    tap1 = ConvShape(256, 256, 1, 1, 56, 56, 56, 56, norm="none")
    for kind in CONV_PASSES:
        full = conv_gemm_s(tap3, 64, "bf16", A100, big, kind)
        assert conv_gemm_s(tap3, 64, "bf16", A100, big, kind, 0.5) == pytest.approx(
            2 * (full - big.launch_overhead_s) + big.launch_overhead_s
        )
        for c, dtype in ((tap1, "bf16"), (tap3, "fp32")):
            assert conv_gemm_s(c, 64, dtype, A100, big, kind, 0.5) == conv_gemm_s(
                c, 64, dtype, A100, big, kind
            )


@pytest.mark.parametrize(
    ("kh", "kw", "stride", "pad", "work"),
    [
        (3, 3, 1, (1, 1), 1.0),
        (3, 3, 1, (0, 0), (56 / 54) ** 2),  # stride 1, no padding: every input pixel
        (1, 7, 1, (0, 0), 56 / 50),
        (3, 3, 2, (1, 1), 16 / 9),
        (5, 5, 2, (2, 2), 36 / 25),
        (1, 1, 2, (0, 0), 1.0),
        (7, 7, 2, (3, 3), 64 / 49),
        (5, 10, 2, (2, 4), 6 / 5),  # 5: 2 phases x 3 taps; 10: 2 x 5, nothing padded
    ],
)
def test_a_strided_data_gradient_does_its_forward_work_over_padded_phases(
    kh: int, kw: int, stride: int, pad: tuple[int, int], work: float
) -> None:
    """A stride-s convolution's data gradient is s^2 sub-convolutions, one per input
    phase, each padded to ceil(k/s) taps a side (CUTLASS's strided dgrad): per axis, the
    forward's multiply-adds times min(k,s) ceil(k/s) / k (a 1x1 one: only the phase a tap
    reaches), not s^2 times them over every input pixel; at stride 1 it covers every input
    pixel, so an unpadded convolution does h w / (oh ow) its forward's work. Compute-bound:
    the GEMM times are the multiply-adds' ratio (DeepBench V100: 1.1-1.9x the forward for
    5x5 stride 2)."""
    huge = replace(gpu_spec("A100-SXM-80GB"), hbm_Bps=1e18)
    # one SM: every tile its own wave, so time is multiply-adds over the rate exactly
    flat = replace(P, conv_tile=None, conv_eff=1.0, launch_overhead_s=0.0, matmul_k_half=0.0,
                   matmul_half_flops=0.0, sm_count=1)  # fmt: skip
    oh, ow = ((56 + 2 * q - k) // stride + 1 for q, k in zip(pad, (kh, kw), strict=True))
    c = ConvShape(256, 256, kh, kw, 56, 56, oh, ow, stride, norm="none")
    fwd = conv_gemm_s(c, 64, "bf16", huge, flat, "fwd")
    assert conv_gemm_s(c, 64, "bf16", huge, flat, "dgrad") / fwd == pytest.approx(work, rel=1e-9)


def test_a_gpu_without_tensor_cores_pays_neither_factor() -> None:
    """P100 runs fp16 on its CUDA cores (21.2 TFLOP/s, twice fp32): a 3x3 convolution's
    GEMMs there ignore conv_eff and the stack's factor, as fp32 does everywhere."""
    p100 = gpu_spec("P100-SXM2-16GB")
    p = replace(compute_params("P100-SXM2-16GB"), conv_eff=0.5)
    c = ConvShape(256, 256, 3, 3, 56, 56, 56, 56, norm="none")
    assert conv_gemm_s(c, 64, "fp16", p100, p, "fwd", 0.5) == conv_gemm_s(
        c, 64, "fp16", p100, replace(p, conv_eff=1.0), "fwd"
    )


def test_the_first_layer_computes_no_data_gradient() -> None:
    c = cnn_preset("resnet50").layers[0].conv
    assert c is not None
    assert conv_layer_s(c, 64, "bf16", A100, P, True, True) < conv_layer_s(
        c, 64, "bf16", A100, P, True, False
    )


def test_fused_kernels_move_norm_bytes_at_stream_bandwidth() -> None:
    c = ConvShape(64, 64, 3, 3, 56, 56, 56, 56)
    eager = conv_layer_s(c, 128, "bf16", A100, P, False, False, fused=False)
    fused = conv_layer_s(c, 128, "bf16", A100, P, False, False, fused=True)
    moved = 128 * c.out_elements * NORM_ACCESSES["bn"][0] * 2 / A100.hbm_Bps
    assert eager - fused == pytest.approx(moved * (1 / P.mem_eff - 1 / P.stream_eff))


@pytest.mark.parametrize(
    "name", ["resnet50", "resnet50-v1.5", "vgg16", "inception-v3", "resnet101"]
)
def test_every_cnn_layer_carries_a_shape_matching_its_flops(name: str) -> None:
    """The shapes the compute model times are the ones the FLOP count came from."""
    for lay in cnn_preset(name).layers:
        c = lay.conv
        assert c is not None
        assert lay.flops == 2.0 * c.cin * c.kh * c.kw * c.cout * c.oh * c.ow
        assert c.after_bwd >= c.after_fwd >= 0 and math.isfinite(c.after_fwd)


def test_channels_are_padded_to_whole_kernel_tiles() -> None:
    """CUTLASS's implicit GEMM (conv2d_problem_size.h ``implicit_gemm_k_iterations``)
    walks R * S * ceil(C / threadblock_K) slabs: a 160-channel 1x7 convolution of
    Inception V3 on 64 x 64 tiles issues 192/160 of its channels on each side (1.44x its
    multiply-adds), the weight gradient pads only its 160 rows (1.2x); ResNet-50's
    power-of-two channels waste nothing, and an image's 3 channels are one slab across
    the 7x7 taps (147 -> 192)."""
    c = ConvShape(160, 160, 1, 7, 17, 17, 17, 17)
    assert channel_padding(c, (64, 64)) == pytest.approx((1.44, 1.44, 1.2))
    assert channel_padding(c, None) == (1.0, 1.0, 1.0)
    assert channel_padding(ConvShape(256, 64, 1, 1, 56, 56, 56, 56), (64, 64)) == (1, 1, 1)
    stem = ConvShape(3, 64, 7, 7, 224, 224, 112, 112, 2)
    assert channel_padding(stem, (64, 64))[0] == pytest.approx(192 / 147)


def test_padding_slows_only_tensor_core_convolutions_of_odd_widths() -> None:
    """The padded multiply-adds cost compute time in bf16 (tensor cores), none in fp32
    (CUDA cores) and none for power-of-two channel counts."""
    big = replace(P, stream_eff=1.0, mem_eff=1.0, conv_tile=(64, 64))
    odd, even = ConvShape(160, 160, 1, 7, 17, 17, 17, 17), ConvShape(128, 128, 1, 7, 17, 17, 17, 17)
    flat = replace(big, conv_tile=None)
    for c, slower in ((odd, True), (even, False)):
        padded = conv_layer_s(c, 256, "bf16", A100, big, False, False)
        assert (padded > conv_layer_s(c, 256, "bf16", A100, flat, False, False)) is slower
    assert conv_layer_s(odd, 256, "fp32", A100, big, False, False) == conv_layer_s(
        odd, 256, "fp32", A100, flat, False, False
    )


def test_inception_sums_the_gradients_of_its_branches() -> None:
    """Each Inception block's input feeds its branches; backward adds their gradients (k
    reads, one write: TensorFlow's AddN). The first 35x35 block: 4 branches of a
    192-channel map, on top of its pooling and concatenation accesses."""
    layers = cnn_preset("inception-v3").layers
    last = next(i for i, lay in enumerate(layers) if lay.conv and lay.conv.cout == 32 and i > 4)
    c = layers[last].conv
    assert c is not None
    pooled = 2 * 192 * 35 * 35
    concat = 2 * 256 * 35 * 35
    assert c.after_fwd == pytest.approx(pooled + concat)
    assert c.after_bwd == pytest.approx(2 * pooled + concat + 5 * 192 * 35 * 35)
