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
)


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


#: Published runs the model misses by more than 25%, and why (strict xfail: fixing the
#: model turns them into passes that must be promoted).
KNOWN_MISSES = {
    ("A100-SXM-40GB", "inception-v3", 1175.2):
        "+32.6%. A100's conv_eff (0.885) is solved on the PCIe card's VGG-16, an XLA-compiled "
        "run, and XLA speeds VGG-16 up far more than the other nets: in Lambda's paired runs "
        "of the same benchmark on the same machines (RTX 2080 Ti and Quadro RTX 8000, "
        "TensorFlow 1.15 and 2.2, with and without XLA) VGG-16 gained x1.56-1.77, ResNet-50 "
        "x1.20-1.40, Inception V3 x1.11-1.25. This card's rows ran without XLA (TensorFlow "
        "2.3). With XLA's VGG-16 gain taken out of the PCIe run, conv_eff solves to "
        "0.43-0.50 (V100's, from a run without XLA: 0.554) and this row comes out at -1.1% "
        "to -9.7% (its ResNet-50 -7.3% to -10.7%). Not adopted: the gains were measured on "
        "Turing, not on an A100, and the PCIe card's own rows would then need XLA modelled "
        "(docs/compute.md). The card itself adds a few percent: under TensorFlow 2.3 it ran "
        "ResNet-50 4% below the 250 W PCIe card (1990 against 2075 images/s), where the "
        "model puts it 3% above, and its VGG-16 (70.3 images/s) is a broken run "
        "(lambda-tensorflow-benchmark c17619db, logs/7742-1xA100-SXM4-40GB_TF2_3.logs). "
        "Probed too (2026-12-04): cuDNN's NCHW batch norm spread one thread block per "
        "channel (+13.5% here, but Lambda's H100 PyTorch NCHW ResNet-50 goes from -22.5% to "
        "-31.6%)",
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
