"""Published op-level measurements, and the compute model's predictions of them.

The compute model (:mod:`sim.training.compute`) is built from op-level measurements; this
module holds the published ones it is checked against, each with its source:

- **GEMMs**: mamf-finder's best achievable matmul per accelerator and dtype
  (``../shared/data/published/matmul-achievable-tflops-*.csv``: the GEMM ceilings the
  catalog is anchored at, so the model reproduces them) and :data:`GEMM_CHECKS`, GEMMs
  measured at other shapes that nothing was fitted to.
- **Attention**: the kernel tables themselves (``topologies/catalog/attention.yaml``),
  checked by leaving each published column out and interpolating it from its neighbours
  (:func:`attention_leave_one_out`), and :data:`ATTENTION_CHECKS`, independent
  measurements of the same kernels.
- **CNNs**: :data:`CNN_RUNS`, published single-GPU training throughput. One VGG-16 row
  per framework stack (``solves``) sets that stack's factor
  (``topologies/catalog/conv_stacks.yaml``: what the framework keeps of its tensor-core
  convolution kernels' rate, carried to every GPU; :func:`solve_stack_eff`); every other
  row is a prediction, on its own GPU and stack.

``python benchmarks/validate_compute.py`` prints all of them.
"""

from __future__ import annotations

import csv
import math
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from sim.catalog import gpu_spec
from sim.profile import load_profile
from sim.result import StepResult
from sim.scenario.layer_list import LayerScenario, any_scenario_from_dict
from sim.training.compute.attention import attention_fraction, attention_tables
from sim.training.compute.conv import CONV_PASSES, conv_gemm_s
from sim.training.compute.conv_stacks import conv_stack_eff
from sim.training.compute.kernels import gemm_time_s
from sim.training.compute.params import compute_params
from sim.training.layers.step import simulate_layer_step
from sim.workload.layer_model import ConvShape

__all__ = [
    "ATTENTION_CHECKS",
    "CNN_RUNS",
    "CONV_KERNEL_CHECKS",
    "GEMM_CHECKS",
    "AttentionCheck",
    "CnnRun",
    "ConvKernelCheck",
    "GemmCheck",
    "attention_leave_one_out",
    "cnn_result",
    "gemm_tflops",
    "mamf_rows",
    "predict_attention",
    "predict_cnn",
    "predict_conv_kernels",
    "solve_conv_eff",
    "solve_stack_eff",
]

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "published"

#: mamf-finder's accelerator names -> catalog GPU
MAMF_GPUS = {
    "NVIDIA H100 SXM": "H100-SXM", "NVIDIA A100 SXM": "A100-SXM-80GB",
    "NVIDIA A100 PCIe": "A100-PCIe", "NVIDIA B200 SXM": "B200", "NVIDIA GB200 SXM": "GB200",
    "NVIDIA H200 SXM": "H200", "AMD MI300X": "MI300X",
}  # fmt: skip


@dataclass(frozen=True)
class GemmCheck:
    """A GEMM measured at one shape: ``(m, n, k)`` in ``dtype`` at ``tflops`` on ``gpu``."""

    gpu: str
    dtype: str
    m: int
    n: int
    k: int
    tflops: float
    source: str


@dataclass(frozen=True)
class AttentionCheck:
    """A fused attention kernel measured outside the transcribed tables (forward, or
    ``backward``: the direction the tables derive for every family but FA2 on H100)."""

    gpu: str
    kernel: str
    batch: int
    heads: int
    seq: int
    head_dim: int
    causal: bool
    tflops: float
    source: str
    backward: bool = False


@dataclass(frozen=True)
class CnnRun:
    """A published single-GPU training throughput of a CNN preset.

    ``gpu`` is the catalog GPU modelled, ``hardware`` what the source ran on; ``fused``:
    the framework runs batch norm and ReLU as fused bandwidth-tuned kernels
    (TensorFlow's fused batch norm; PyTorch on channels-last tensors) rather than eager
    NCHW ones (PyTorch's default layout); ``solves``: the row that sets the factor of its
    ``stack`` (``training.conv_stack``: ``pytorch``, ``tensorflow`` or ``xla``), not a
    prediction; ``host_dispatch_s``: host seconds per kernel of an eager
    framework, where measured on the run's host (0: not measured, or a graph-mode
    framework whose host keeps ahead); ``card_gb``: the memory of the card it ran on (GB)
    where it is not the catalog GPU's (0: the catalog's).
    """

    gpu: str
    model: str
    precision: str
    batch: int
    images_per_s: float
    hardware: str
    source: str
    fused: bool = False
    solves: bool = False
    host_dispatch_s: float = 0.0
    card_gb: float = 0.0
    stack: str = "pytorch"


_AZURE = (
    "github.com/Azure/AI-benchmarking-guide results for ND H100 v5 "
    "(../shared/data/published/h100-reference-figures.csv)"
)
_THONK = (
    'H. He, \'Strangely, Matrix Multiplications on GPUs Run Faster When Given "Predictable" '
    "Data!' (thonking.ai, 2024): PyTorch/cuBLAS 8192^3 fp16 with torch.randn inputs on A100"
)

#: Measured here, 2026-11-26: one H100 80GB HBM3 (700 W) lent through the device tool,
#: PyTorch 2.11 (cuBLAS, cuDNN 9), 10 warm-up + 30 timed iterations, randn inputs; the
#: command is in docs/compute.md.
MEASURED_H100 = "measured 2026-11-26 on one H100 80GB HBM3 (700 W), PyTorch 2.11 (docs/compute.md)"

#: GEMMs measured at shapes other than the catalog anchors (nothing fitted to them).
GEMM_CHECKS: tuple[GemmCheck, ...] = (
    GemmCheck("H100-SXM", "fp8", 8192, 8192, 8192, 1290.1, f"cuBLASLt fp8 GEMM 8192^3, {_AZURE}"),
    GemmCheck("A100-SXM-80GB", "fp16", 8192, 8192, 8192, 258.0, _THONK),
    *(GemmCheck("H100-SXM", "bf16", m, n, k, tf, f"torch.matmul, {MEASURED_H100}")
      for m, n, k, tf in ((8192, 8192, 8192, 750.0), (4096, 14336, 4096, 727.3),
                          (8192, 10240, 8192, 760.9), (802816, 64, 576, 160.8),
                          (64, 576, 802816, 162.3))),
)  # fmt: skip

_PTBENCH = "github.com/pytorch/benchmark pull request 2391 test plan (H100, fp16, no mask)"
#: Fused attention measured outside the FlashAttention papers' figures (forward).
ATTENTION_CHECKS: tuple[AttentionCheck, ...] = tuple(
    AttentionCheck("H100-SXM", kernel, 16384 // s, 16, s, 128, False, tf, f"{_PTBENCH}: {name}")
    for kernel, name, row in (
        ("fa3", "flash_v3", (430.32, 517.099, 565.544, 590.233, 614.234, 620.73)),
        ("triton", "triton_tutorial_flash_v2", (328.882, 389.723, 433.721, 458.359, 470.732, 476.753)),
    )
    for s, tf in zip((512, 1024, 2048, 4096, 8192, 16384), row, strict=True)
) + tuple(
    AttentionCheck("H100-SXM", kernel, 16384 // s, 2048 // d, s, d, causal, tf,
                   f"torch SDPA ({'flash' if kernel == 'fa2' else 'cuDNN'} backend), {MEASURED_H100}",
                   bwd)
    for kernel, d, s, causal, bwd, tf in (
    ("fa2", 64, 1024, True, False, 216.2),
    ("fa2", 64, 1024, True, True, 145.2),
    ("cudnn", 64, 1024, True, False, 328.2),
    ("cudnn", 64, 1024, True, True, 224.8),
    ("fa2", 64, 1024, False, False, 284.8),
    ("fa2", 64, 1024, False, True, 206.0),
    ("cudnn", 64, 1024, False, False, 418.1),
    ("cudnn", 64, 1024, False, True, 333.9),
    ("fa2", 64, 4096, True, False, 280.1),
    ("fa2", 64, 4096, True, True, 225.4),
    ("cudnn", 64, 4096, True, False, 437.0),
    ("cudnn", 64, 4096, True, True, 378.5),
    ("fa2", 64, 4096, False, False, 304.8),
    ("fa2", 64, 4096, False, True, 267.2),
    ("cudnn", 64, 4096, False, False, 470.9),
    ("cudnn", 64, 4096, False, True, 453.1),
    ("fa2", 64, 16384, True, False, 292.1),
    ("fa2", 64, 16384, True, True, 272.6),
    ("cudnn", 64, 16384, True, False, 476.5),
    ("cudnn", 64, 16384, True, True, 445.9),
    ("fa2", 64, 16384, False, False, 303.7),
    ("fa2", 64, 16384, False, True, 292.0),
    ("cudnn", 64, 16384, False, False, 494.7),
    ("cudnn", 64, 16384, False, True, 463.4),
    ("fa2", 128, 1024, True, False, 226.4),
    ("fa2", 128, 1024, True, True, 155.0),
    ("cudnn", 128, 1024, True, False, 437.9),
    ("cudnn", 128, 1024, True, True, 269.1),
    ("fa2", 128, 1024, False, False, 327.8),
    ("fa2", 128, 1024, False, True, 217.2),
    ("cudnn", 128, 1024, False, False, 596.4),
    ("cudnn", 128, 1024, False, True, 412.0),
    ("fa2", 128, 4096, True, False, 308.8),
    ("fa2", 128, 4096, True, True, 251.4),
    ("cudnn", 128, 4096, True, False, 578.2),
    ("cudnn", 128, 4096, True, True, 455.7),
    ("fa2", 128, 4096, False, False, 352.1),
    ("fa2", 128, 4096, False, True, 274.9),
    ("cudnn", 128, 4096, False, False, 663.5),
    ("cudnn", 128, 4096, False, True, 551.8),
    ("fa2", 128, 16384, True, False, 327.7),
    ("fa2", 128, 16384, True, True, 302.4),
    ("cudnn", 128, 16384, True, False, 630.7),
    ("cudnn", 128, 16384, True, True, 561.7),
    ("fa2", 128, 16384, False, False, 333.1),
    ("fa2", 128, 16384, False, True, 311.1),
    ("cudnn", 128, 16384, False, False, 671.0),
    ("cudnn", 128, 16384, False, True, 550.0),
    )
)  # fmt: skip


@dataclass(frozen=True)
class ConvKernelCheck:
    """One convolution's three training kernels timed alone (ms): forward, data gradient,
    weight gradient, for ``batch`` images through ``conv`` (no norm after it)."""

    gpu: str
    app: str
    batch: int
    conv: ConvShape
    ms: tuple[float, float, float]
    source: str


_DEEPBENCH = (
    "github.com/baidu-research/DeepBench results/train/DeepBench_NV_V100.xlsx, 'Results - "
    "FP16 ip, Mixed math' sheet, Convolution (cuDNN 7.6.2, CUDA 10.1, NHWC, tensor-op math; "
    "code/nvidia/conv_bench.cu)"
)
#: DeepBench's V100 training convolutions of more than 5 GFLOP forward (all its others are
#: a few microseconds of work, where the GEMM model's fixed 128x128 tile is too coarse:
#: cuDNN picks smaller tiles): (app, N, C, K, R, S, H, W, pad_h, pad_w, stride, fwd,
#: data gradient, weight gradient ms).
CONV_KERNEL_CHECKS: tuple[ConvKernelCheck, ...] = tuple(
    ConvKernelCheck("V100-SXM2-32GB", app, n,
                    ConvShape.padded(c, k, (r, s_), (h, w), (ph, pw), st, "none"), (f, d, g),
                    _DEEPBENCH)
    for app, n, c, k, r, s_, h, w, ph, pw, st, f, d, g in (
        ("Vision", 8, 64, 128, 3, 3, 112, 112, 1, 1, 1, 0.185, 0.3, 0.258),
        ("Vision", 8, 128, 256, 3, 3, 56, 56, 1, 1, 1, 0.169, 0.197, 0.185),
        ("Vision", 8, 256, 512, 3, 3, 28, 28, 1, 1, 1, 0.186, 0.232, 0.17),
        ("Vision", 8, 512, 512, 3, 3, 14, 14, 1, 1, 1, 0.12, 0.139, 0.086),
        ("Vision", 16, 64, 128, 3, 3, 112, 112, 1, 1, 1, 0.355, 0.374, 0.423),
        ("Vision", 16, 128, 256, 3, 3, 56, 56, 1, 1, 1, 0.318, 0.352, 0.353),
        ("Vision", 16, 256, 512, 3, 3, 28, 28, 1, 1, 1, 0.31, 0.378, 0.33),
        ("Vision", 16, 512, 512, 3, 3, 14, 14, 1, 1, 1, 0.199, 0.23, 0.162),
        ("Speaker ID", 16, 64, 64, 3, 3, 80, 350, 1, 1, 1, 0.448, 0.439, 0.512),
        ("Speaker ID", 16, 128, 128, 3, 3, 40, 175, 1, 1, 1, 0.379, 0.369, 0.396),
        ("Speaker ID", 16, 256, 256, 3, 3, 20, 84, 1, 1, 1, 0.354, 0.357, 0.347),
        ("Speaker ID", 16, 512, 512, 3, 3, 10, 42, 1, 1, 1, 0.356, 0.449, 0.337),
        ("Speaker ID", 16, 64, 128, 5, 5, 80, 350, 1, 1, 2, 0.559, 1.074, 0.759),
        ("Speaker ID", 16, 128, 256, 5, 5, 40, 175, 1, 1, 2, 0.524, 0.906, 0.452),
        ("Speaker ID", 16, 256, 512, 5, 5, 20, 84, 1, 1, 2, 0.727, 0.808, 0.675),
        ("DeepSpeech", 8, 32, 32, 5, 10, 79, 341, 0, 0, 2, 0.205, 0.17, 0.276),
        ("DeepSpeech", 16, 32, 32, 5, 10, 79, 341, 0, 0, 2, 0.31, 0.299, 0.541),
        ("DeepSpeech", 32, 32, 32, 5, 10, 79, 341, 0, 0, 2, 0.523, 0.572, 0.985),
    )
)  # fmt: skip


def predict_conv_kernels(check: ConvKernelCheck) -> tuple[float, float, float]:
    """The compute model's (forward, data gradient, weight gradient) ms for ``check``: its
    implicit GEMMs alone (kernel level: the catalog's ``conv_eff``, no framework stack, no
    sustained-clock or training derate; launch included)."""
    p = replace(compute_params(check.gpu), sustained_clock=1.0, matmul_training_factor=1.0)
    gpu = gpu_spec(check.gpu)
    return tuple(  # type: ignore[return-value]
        conv_gemm_s(check.conv, check.batch, "fp16", gpu, p, kind) * 1e3 for kind in CONV_PASSES
    )


_LAMBDA_TF = (
    "github.com/lambdal/lambda-tensorflow-benchmark commit c17619db, logs/{log}/"
    "syn-replicated-{prec}-1gpus/{model}-{batch}/throughput/1 (tf_cnn_benchmarks, synthetic data)"
)
_V100_LOG = "Platinum-Tesla_V100-SXM3-32GB_HP16_TF2_2.logs"
#: TensorFlow 1.15 with XLA auto-clustering (the commit's run_all.sh sets
#: TF_XLA_FLAGS=--tf_xla_auto_jit=2; each of this card's fp16 logs says 'Compiled cluster
#: using XLA!'): the ``xla`` stack, whose factor this card's VGG-16 row solves.
_A100P_LOG = "7502-A100-PCIE-40GB.logs"
#: The same benchmark on an A100 SXM4 40GB (400 W) under TensorFlow 2.3 without XLA (no
#: 'Compiled cluster' line; V100's logs: TensorFlow 2.2, no XLA): the ``tensorflow`` stack,
#: whose factor V100's VGG-16 row solves, so this card's rows are cross-GPU predictions.
#: Its own VGG-16 run is not used: 70.3 images/s, 6% of the 250 W PCIe card's, a broken
#: run. The same machine's TensorFlow 2.3 runs with XLA
#: (logs/7742-A100-SXM4-40GB_TF2_3_XLA.logs) are no better: VGG-16 68.4, ResNet-50 1888,
#: Inception V3 1154 images/s.
_A100S_LOG = "7742-1xA100-SXM4-40GB_TF2_3.logs"
_TF_DOCS = (
    "github.com/tensorflow/docs site/en/r1/guide/performance/benchmarks.md, 'Training "
    "synthetic data', NVIDIA DGX-1 (P100), 1 GPU, tf_cnn_benchmarks, fp32, batch 64"
)
_DLE = (
    "github.com/NVIDIA/DeepLearningExamples PyTorch/Classification/ConvNets/resnet50v1.5/"
    "README.md, 'Training performance', 1 GPU, mixed precision, batch 256 per GPU "
    "(launch.py --mode benchmark_training); channels-last: ConvNets/configs.yml gives the "
    "AMP runs of resnet50 on DGX1V and DGXA100 'memory_format: nhwc'"
)
_LAMBDA_PT = (
    "github.com/lambdal/deeplearning-benchmark pytorch/pytorch-train-throughput-fp16.csv "
    "(NGC PyTorch ResNet-50, fp16), row '{row}'; NCHW: its pytorch/scripts/config_v1 "
    "runs DeepLearningExamples' main.py without --memory-format (default nchw)"
)
#: Host seconds per simulated kernel of eager PyTorch 2.11 on the lent device machine (a
#: 16-thread Intel Xeon VM): the median of ``calibrate compute``'s dispatch records
#: (tiny autograd forwards and backwards), measured 2026-11-26 beside an H200
#: (calibrate/measurements/h200-2026-11-26/compute.json, fitted into the shipped
#: h200-ops profile's ``host_dispatch_s``). The H100 rows were measured the same day
#: through the same device tool: the same kind of host is assumed.
LENT_HOST_DISPATCH_S = float(load_profile("h200-ops").compute["host_dispatch_s"])


def _tf(gpu: str, log: str, hw: str, model: str, tf_model: str, prec: str, batch: int,
        ips: float, solves: bool = False) -> CnnRun:  # fmt: skip
    src = _LAMBDA_TF.format(log=log, prec=prec, model=tf_model, batch=batch)
    stack = "xla" if log == _A100P_LOG else "tensorflow"
    return CnnRun(gpu, model, prec, batch, ips, hw, src, True, solves, stack=stack)


#: Published single-GPU CNN training throughput (images/s).
CNN_RUNS: tuple[CnnRun, ...] = (
    _tf("V100-SXM2-32GB", _V100_LOG, "V100 SXM3 32GB", "vgg16", "vgg16", "fp16", 384, 455.93, True),
    _tf("V100-SXM2-32GB", _V100_LOG, "V100 SXM3 32GB", "resnet50", "resnet50", "fp16", 384, 1276.24),
    _tf("V100-SXM2-32GB", _V100_LOG, "V100 SXM3 32GB", "inception-v3", "inception3", "fp16", 384, 771.37),
    # the same machine and TensorFlow 2.2 in fp32 (CUDA cores: Volta has no TF32), batch 192
    _tf("V100-SXM2-32GB", _V100_LOG, "V100 SXM3 32GB", "vgg16", "vgg16", "fp32", 192, 249.19),
    _tf("V100-SXM2-32GB", _V100_LOG, "V100 SXM3 32GB", "resnet50", "resnet50", "fp32", 192, 432.16),
    _tf("V100-SXM2-32GB", _V100_LOG, "V100 SXM3 32GB", "inception-v3", "inception3", "fp32", 192, 273.17),
    CnnRun("V100-SXM2-32GB", "resnet50-v1.5", "fp16", 256, 1200.0, "V100 SXM2 16GB (DGX-1)",
           _DLE, True, card_gb=16),
    _tf("A100-PCIe-40GB", _A100P_LOG, "A100 PCIe 40GB", "vgg16", "vgg16", "fp16", 448, 1189.76, True),
    _tf("A100-PCIe-40GB", _A100P_LOG, "A100 PCIe 40GB", "resnet50", "resnet50", "fp16", 448, 2075.05),
    _tf("A100-PCIe-40GB", _A100P_LOG, "A100 PCIe 40GB", "inception-v3", "inception3", "fp16", 360, 1222.30),
    _tf("A100-SXM-40GB", _A100S_LOG, "A100 SXM4 40GB", "resnet50", "resnet50", "fp16", 448, 1990.02),
    _tf("A100-SXM-40GB", _A100S_LOG, "A100 SXM4 40GB", "inception-v3", "inception3", "fp16", 448, 1175.15),
    CnnRun("A100-SXM-80GB", "resnet50-v1.5", "fp16", 256, 2470.0, "A100 SXM4 80GB (DGX A100)",
           _DLE, True),
    CnnRun("V100-SXM2-32GB", "resnet50-v1.5", "fp16", 256, 833.0, "V100 16GB (Lambda Cloud)",
           _LAMBDA_PT.format(row="LambdaCloud V100 16GB") + "; batch 256 (pytorch-train-bs-fp16.csv)",
           card_gb=16),
    CnnRun("A100-SXM-80GB", "resnet50-v1.5", "fp16", 1280, 1582.0, "A100 80GB SXM4 (Lambda)",
           _LAMBDA_PT.format(row="A100 80GB SXM4") + "; batch 1280 (pytorch-train-bs-fp16.csv)"),
    CnnRun("H100-SXM", "resnet50-v1.5", "fp16", 1280, 2616.0, "H100 80GB SXM5 (Lambda)",
           _LAMBDA_PT.format(row="H100 80GB SXM5") + "; batch not listed for this row (1280, "
           "the A100 80GB and H100 PCIe rows' value, assumed)"),
    *(CnnRun("H100-SXM", model, "bf16", bs, ips, "H100 80GB HBM3 (700 W)",
             f"torchvision, channels_last, bf16 autocast, SGD, eager, synthetic data: {MEASURED_H100}",
             True, model == "vgg16", LENT_HOST_DISPATCH_S)
      for model, bs, ips in (("vgg16", 128, 3146.2), ("resnet50-v1.5", 256, 3975.1),
                             ("inception-v3", 128, 2115.8))),
    *(CnnRun("P100-SXM2-16GB", model, "fp32", 64, ips, "P100 SXM2 (DGX-1)", _TF_DOCS, True,
             stack="tensorflow")
      for model, ips in (("vgg16", 154.0), ("resnet50", 219.0), ("inception-v3", 142.0))),
)  # fmt: skip


def mamf_rows(data: Path = DATA) -> list[GemmCheck]:
    """mamf-finder's best GEMM per catalog GPU and dtype (bf16, fp8), where published."""
    out = []
    for dtype in ("bf16", "fp8"):
        path = data / f"matmul-achievable-tflops-{dtype}.csv"
        source = f"mamf-finder ({path.name})"
        for r in csv.DictReader(path.read_text().splitlines()[1:]):
            gpu, shape = MAMF_GPUS.get(r["Accelerator"]), r["Best Shape MxNxK"]
            if gpu is None or not shape or not r["MAMF"]:
                continue
            m, n, k = (int(x) for x in shape.split("x"))
            out.append(GemmCheck(gpu, dtype, m, n, k, float(r["MAMF"]), source))
    return out


def gemm_tflops(check: GemmCheck, sustained: bool = False) -> float:
    """The GEMM model's TFLOP/s at ``check``'s shape: a micro-benchmark (sustained clock
    and training factor 1, no launch gap) unless ``sustained``."""
    p = compute_params(check.gpu)
    if not sustained:
        p = replace(p, sustained_clock=1.0, matmul_training_factor=1.0)
    p = replace(p, launch_overhead_s=0.0)
    t = gemm_time_s(check.m, check.n, check.k, 1, check.dtype, gpu_spec(check.gpu), p)
    return 2.0 * check.m * check.n * check.k / t / 1e12


def predict_attention(check: AttentionCheck) -> float:
    """TFLOP/s the attention tables give at ``check``'s shape (a benchmark: no derate)."""
    table = compute_params(check.gpu).attention_table
    assert table is not None
    frac = attention_fraction(table, check.kernel, check.head_dim, check.seq, check.causal,
                              check.backward)  # fmt: skip
    assert frac is not None
    return frac * gpu_spec(check.gpu).peak_flops["bf16"] / 1e12


def attention_leave_one_out() -> list[tuple[str, str, str, int, float, float]]:
    """Every interior published forward column predicted from its neighbours:
    (GPU, family, mask/head dim, sequence, published, interpolated TFLOP/s)."""
    out = []
    for gpu, fams in attention_tables().items():
        for fam, t in fams.items():
            if t is None:
                continue
            for (causal, dim), row in sorted(t.fwd.items()):
                seq = t.seq_lens
                for i in range(1, len(seq) - 1):
                    x0, x1, x = (math.log2(v) for v in (seq[i - 1], seq[i + 1], seq[i]))
                    guess = row[i - 1] + (row[i + 1] - row[i - 1]) * (x - x0) / (x1 - x0)
                    mask = f"{'causal' if causal else 'full'} d{dim}"
                    out.append((gpu, fam, mask, seq[i], row[i], guess))
    return out


def _one_gpu_topology(gpu: str, folder: Path) -> Path:
    path = folder / f"one-{gpu}.yaml"
    if not path.exists():
        spec = gpu_spec(gpu)
        path.write_text(
            f"name: one-{gpu}\ndescription: one {gpu} on its host\ngpu: {gpu}\nnodes: 1\n"
            f"node:\n  gpus: 1\n  fabric: pcie\n  pcie: {spec.pcie}\n"
        )
    return path


_TOPOLOGIES = Path(tempfile.mkdtemp(prefix="clustersim-kernels-"))


def predict_cnn(run: CnnRun, compute: Mapping[str, float] | None = None) -> float:
    """Images/s the simulator gives for ``run`` on one GPU (``compute`` laid over the
    catalog values, and the run's ``host_dispatch_s`` where measured: a profile)."""
    return float(cnn_result(run, compute).tokens_per_s)


def cnn_result(run: CnnRun, compute: Mapping[str, float] | None = None) -> StepResult:
    """The simulated step of ``run`` on one GPU (see :func:`predict_cnn`): its throughput
    and its memory per GPU."""
    raw = {
        "model": {"preset": run.model},
        "cluster": {"topology": str(_one_gpu_topology(run.gpu, _TOPOLOGIES))},
        "parallel": {"micro_batch": run.batch},
        "training": {
            "global_batch": run.batch,
            "precision": run.precision,
            "fused_kernels": run.fused,
            "conv_stack": run.stack,
        },
        "network": "analytical",
    }
    if run.host_dispatch_s:
        compute = {"host_dispatch_s": run.host_dispatch_s, **(compute or {})}
    if compute:
        folder = Path(tempfile.mkdtemp(prefix="clustersim-profile-", dir=_TOPOLOGIES))
        lines = ["schema: clustersim.profile/1", "name: conv-eff-probe", "compute:"] + [
            f"  {k}: {v!r}" for k, v in compute.items()
        ]
        (folder / "profile.yaml").write_text("\n".join(lines) + "\n")
        raw["profile"] = str(folder / "profile.yaml")
    sc = any_scenario_from_dict(raw)
    assert isinstance(sc, LayerScenario)
    return simulate_layer_step(sc, "analytical")


def solve_stack_eff(run: CnnRun, tol: float = 1e-4) -> float:
    """The factor of ``run``'s convolution stack under which the simulator reproduces it:
    the catalog's factor times the kernel ``conv_eff`` :func:`solve_conv_eff` finds under
    it. At most the catalog's (``conv_eff`` is at most 1): a row that needs more gives the
    catalog's back and is predicted slow, which ``predict_cnn`` shows."""
    return round(solve_conv_eff(run, tol) * conv_stack_eff(run.stack), 4)


def solve_conv_eff(run: CnnRun, tol: float = 1e-4) -> float:
    """The kernel ``conv_eff`` under which the simulator reproduces ``run`` with its
    stack's factor (bisection; 1.0 when even that is too slow)."""
    lo, hi = 0.02, 1.0
    if predict_cnn(run, {"conv_eff": hi}) < run.images_per_s:
        return hi
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if predict_cnn(run, {"conv_eff": mid}) < run.images_per_s:
            lo = mid
        else:
            hi = mid
    return round(0.5 * (lo + hi), 4)
