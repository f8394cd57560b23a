"""Whether the CNN training runs that ran fit, by the layer-list memory model.

Two kinds of evidence, neither a peak-memory reading (no CNN source states one):

- every published single-GPU run of :data:`calibrate.kernel_benchmarks.CNN_RUNS` ran, so
  the model must say it fits on its card;
- NVIDIA's Deep Learning Examples train ResNet-50 v1.5 at the batch sizes of
  ``PyTorch/Classification/ConvNets/configs.yml`` (commit 097c7ff9, ``models.resnet50``):
  256 per GPU with AMP on the 16 GB V100s of a DGX-1, 112 in FP32 there, 256 in FP32 on a
  DGX-2's 32 GB V100s, 256 with AMP and TF32 on an 80 GB A100. The FP32 batch is halved
  on the 16 GB card only, so FP32 at 256 is taken not to fit 16 GB.

A card's memory is its nominal size in 10^9 bytes (16 GB: 16e9, below the 16 GiB the
card has), so a run said to fit does with room to spare.

Run: ``python benchmarks/validate_memory.py`` (its CNN table).
"""

from __future__ import annotations

from dataclasses import dataclass

from calibrate.kernel_benchmarks import CNN_RUNS, CnnRun, cnn_result
from sim.catalog import gpu_spec

__all__ = ["DLE_CONFIGS", "DLE_FITS", "BatchFit", "cnn_fit_rows"]

DLE_CONFIGS = (
    "github.com/NVIDIA/DeepLearningExamples PyTorch/Classification/ConvNets/configs.yml "
    "(commit 097c7ff9), models.resnet50"
)


@dataclass(frozen=True)
class BatchFit:
    """A configuration, the card's memory (GB, 10^9 bytes) and whether it fits there.

    ``gpu`` is the catalog GPU the step is simulated on (the memory model does not depend
    on it beyond the card's size, given here)."""

    label: str
    gpu: str
    model: str
    precision: str
    batch: int
    card_gb: float
    fits: bool
    source: str


#: DLE's ResNet-50 v1.5 batch sizes per platform (TF32 keeps fp32 activations: "fp32").
DLE_FITS: tuple[BatchFit, ...] = (
    BatchFit("DGX-1V 16GB, AMP", "V100-SXM2-32GB", "resnet50-v1.5", "fp16", 256, 16, True,
             f"{DLE_CONFIGS}.DGX1V.AMP: batch_size 256"),
    BatchFit("DGX-1V 16GB, FP32", "V100-SXM2-32GB", "resnet50-v1.5", "fp32", 112, 16, True,
             f"{DLE_CONFIGS}.DGX1V.FP32: batch_size 112"),
    BatchFit("DGX-1V 16GB, FP32 at 256", "V100-SXM2-32GB", "resnet50-v1.5", "fp32", 256, 16,
             False, f"{DLE_CONFIGS}: FP32 256 on DGX2V's 32 GB, halved to 112 on DGX1V's 16 GB"),
    BatchFit("DGX-2V 32GB, FP32", "V100-SXM2-32GB", "resnet50-v1.5", "fp32", 256, 32, True,
             f"{DLE_CONFIGS}.DGX2V.FP32: batch_size 256"),
    BatchFit("DGX A100 80GB, AMP", "A100-SXM-80GB", "resnet50-v1.5", "fp16", 256, 80, True,
             f"{DLE_CONFIGS}.DGXA100.AMP: batch_size 256"),
    BatchFit("DGX A100 80GB, TF32", "A100-SXM-80GB", "resnet50-v1.5", "fp32", 256, 80, True,
             f"{DLE_CONFIGS}.DGXA100.TF32: batch_size 256"),
)  # fmt: skip


def _published(run: CnnRun) -> BatchFit:
    """A published run as a configuration that fits the card it ran on."""
    card = run.card_gb or gpu_spec(run.gpu).hbm_bytes / 1e9
    return BatchFit(run.hardware, run.gpu, run.model, run.precision, run.batch, card, True,
                    run.source)  # fmt: skip


def _run(fit: BatchFit) -> CnnRun:
    """A DLE configuration as a run to simulate (no throughput to compare)."""
    return CnnRun(fit.gpu, fit.model, fit.precision, fit.batch, 0.0, fit.label, fit.source)


def cnn_fit_rows() -> list[tuple[BatchFit, float]]:
    """Every published CNN run and DLE configuration with the bytes per GPU the model
    gives it."""
    pairs = [(_published(r), r) for r in CNN_RUNS] + [(f, _run(f)) for f in DLE_FITS]
    return [(fit, cnn_result(run).memory_per_gpu_bytes) for fit, run in pairs]
