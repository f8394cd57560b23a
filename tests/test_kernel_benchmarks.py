"""The compute model against published op-level measurements (calibrate.kernel_benchmarks):
each check names its source in the table it comes from; the tolerance is here."""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from calibrate.kernel_benchmarks import (
    ATTENTION_CHECKS,
    CNN_RUNS,
    CONV_KERNEL_CHECKS,
    DATA,
    GEMM_CHECKS,
    AttentionCheck,
    CnnRun,
    GemmCheck,
    attention_leave_one_out,
    gemm_tflops,
    mamf_rows,
    predict_attention,
    predict_cnn,
    predict_conv_kernels,
    solve_stack_eff,
)
from sim.training.compute.conv_stacks import CONV_STACKS, conv_stack_eff


def _label(x: object) -> str:
    if isinstance(x, CnnRun):
        return f"{x.gpu}-{x.model}-{x.precision}-b{x.batch}-{x.images_per_s:g}"
    if isinstance(x, GemmCheck):
        return f"{x.gpu}-{x.dtype}-{x.m}x{x.n}x{x.k}"
    assert isinstance(x, AttentionCheck)
    return f"{x.gpu}-{x.kernel}-s{x.seq}"


def test_the_gemm_model_reproduces_every_published_ceiling_at_its_shape() -> None:
    """mamf-finder's bf16 and fp8 tables (../shared/data/published): the catalog anchors
    each dtype's ceiling at its best shape, so the model gives the measurement there."""
    if not DATA.exists():
        pytest.skip(f"published tables absent: {DATA}")
    rows = mamf_rows()
    assert {(r.gpu, r.dtype) for r in rows} >= {("H100-SXM", "bf16"), ("H100-SXM", "fp8")}
    for r in rows:
        assert gemm_tflops(r) == pytest.approx(r.tflops, rel=0.01), r


@pytest.mark.parametrize("check", GEMM_CHECKS, ids=_label)
def test_gemms_at_other_shapes_within_ten_percent(check: GemmCheck) -> None:
    """Shapes nothing was fitted to (sources in GEMM_CHECKS): within 10%."""
    assert gemm_tflops(check) == pytest.approx(check.tflops, rel=0.10)


def test_attention_tables_interpolate_their_own_columns() -> None:
    """Each interior published column, interpolated from its neighbours in log2(length):
    median error under 3%, none over 20% (the interpolation the model uses between them)."""
    errs = [abs(g / p - 1) for *_, p, g in attention_leave_one_out()]
    assert len(errs) > 100
    assert statistics.median(errs) < 0.03 and max(errs) < 0.20


@pytest.mark.parametrize("check", ATTENTION_CHECKS, ids=_label)
def test_independent_attention_measurements(check: AttentionCheck) -> None:
    """pytorch/benchmark's H100 runs of FlashAttention-3 (within 12%) and of Triton's
    fused-attention tutorial kernel (within 20%: a newer Triton than the FA3 paper's);
    PyTorch 2.11's SDPA flash and cuDNN backends measured on an H100: forward within 20%
    (cuDNN has got 4-19% faster since the FA3 paper), backward, which the tables derive
    from FA2's backward/forward ratio, within 35% (short sequences' backward is slower
    than that ratio says)."""
    if check.kernel == "fa3":
        tol = 0.12
    elif check.backward:
        tol = 0.35
    else:
        tol = 0.20
    assert predict_attention(check) == pytest.approx(check.tflops, rel=tol)


def test_convolution_kernels_run_near_the_gemm_rate_at_kernel_level() -> None:
    """DeepBench's V100 training convolutions (cuDNN 7.6.2, fp16, NHWC) of more than 5
    GFLOP, against the GEMM model at the catalog's kernel-level conv_eff (1, no framework
    stack): stride 1, the median error of each pass within 10% and every kernel within
    40%; the strided ones' data gradients within 35% (-30% to +25%; they were +80% to
    +241% when a strided data gradient cost stride^2 times its forward)."""
    errs: dict[str, list[float]] = {kind: [] for kind in ("fwd", "dgrad", "wgrad")}
    for check in CONV_KERNEL_CHECKS:
        for kind, measured, model in zip(errs, check.ms, predict_conv_kernels(check), strict=True):
            err = model / measured - 1
            if check.conv.stride == 1:
                errs[kind].append(err)
                assert abs(err) < 0.40, (check, kind, err)
            elif kind == "dgrad":
                assert abs(err) < 0.35, (check, err)
    for kind, e in errs.items():
        assert len(e) == 12 and abs(statistics.median(e)) < 0.10, (kind, statistics.median(e))


def test_each_stack_factor_is_what_its_vgg_row_solves() -> None:
    """conv_stacks.yaml's three factors are the ones the solving VGG-16 rows give back
    (pytorch on the H100, tensorflow on the V100, xla on the A100 PCIe), and every other
    row carries its stack's factor to its own GPU."""
    solving = {r.stack: r for r in CNN_RUNS if r.solves}
    assert set(solving) == set(CONV_STACKS) and all(r.model == "vgg16" for r in solving.values())
    for stack, run in solving.items():
        assert predict_cnn(run) == pytest.approx(run.images_per_s, rel=1e-3)  # either way
        assert solve_stack_eff(run) == pytest.approx(conv_stack_eff(stack), abs=2e-4)


def test_the_tensorflow_stack_from_a_v100_predicts_the_a100_sxm4_within_ten_percent() -> None:
    """The cross-GPU prediction the stack factor stands for: solved on the V100's
    TensorFlow 2.2 VGG-16, it puts the A100 SXM4's TensorFlow 2.3 ResNet-50 and Inception
    V3 (no VGG-16 of that card is usable) within 10% (-2.1% and +6.3%, 2026-12-04)."""
    rows = [r for r in CNN_RUNS if r.gpu == "A100-SXM-40GB"]
    assert {r.model for r in rows} == {"resnet50", "inception-v3"}
    for r in rows:
        assert r.stack == "tensorflow"
        assert predict_cnn(r) == pytest.approx(r.images_per_s, rel=0.10)


#: Runs the model misses by more than 25%, and why (strict xfail: fixing the model turns
#: them into passes that must be promoted).
KNOWN_MISSES = {
    ("H100-SXM", "resnet50-v1.5", 3975.1):
        "+25.9% (measured here, not published): the model's step for it is GPU-bound and two "
        "thirds memory-bound kernels (33 of 51 ms: batch norm, ReLU, residual adds at "
        "stream_eff, as channels-last cuDNN batch norm runs), and the fused flag times eager "
        "PyTorch's ReLU and adds at that bandwidth too. Timing them at the eager kernels' "
        "measured mem_eff (0.65) gives +14%, but takes the DLE channels-last ResNet-50 rows "
        "on V100 and A100, whose mem_eff is a transformer fit, to -20% and -23%. It was "
        "+23.0% until strided convolutions' data gradients stopped costing stride^2 times "
        "their forward (DeepBench: 1.1-1.9x; 2026-12-04)",
}  # fmt: skip


def _cnn_cases() -> list[object]:
    out: list[object] = []
    for r in CNN_RUNS:
        why = KNOWN_MISSES.get((r.gpu, r.model, round(r.images_per_s, 1)))
        marks = [pytest.mark.xfail(reason=why, strict=True)] if why else []
        out.append(pytest.param(r, marks=marks, id=_label(r)))
    return out


@pytest.mark.parametrize("run", _cnn_cases())
def test_cnn_single_gpu_throughput_within_25_percent(run: CnnRun) -> None:
    """Published single-GPU training throughput (source, batch, precision and framework in
    CNN_RUNS): predictions within 25%; the rows that solve conv_eff within 5% (P100's
    VGG-16 needs the GEMM ceiling, conv_eff's bound, and stays 3% short)."""
    tol = 0.05 if run.solves else 0.25
    assert predict_cnn(run) == pytest.approx(run.images_per_s, rel=tol)


def test_the_time_split_gives_vgg_unit_weights_on_its_two_solving_gpus() -> None:
    """``validate_compute.py --split``: VGG-16 solves conv_eff on both the V100 and the A100
    PCIe, so the published times are the model's on both and the weights are 1 and 1."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "validate_compute.py"
    out = subprocess.run([sys.executable, str(script), "--split"], capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    weights = {}
    model = ""
    for line in out.splitlines():
        if line.startswith("tf_cnn_benchmarks"):
            model = line.split()[1]
        elif "a = " in line:
            a, b = (float(x.split("=")[1]) for x in line.strip().split(", "))
            weights[model] = (a, b)
    assert weights["vgg16"] == pytest.approx((1.0, 1.0), abs=0.02)
    assert set(weights) == {"vgg16", "resnet50", "inception-v3"}  # GPUs with a solving row
