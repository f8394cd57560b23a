"""Convolution layers of the CNN presets, timed as the kernels cuDNN and the framework run.

A convolution with its batch norm (or bias) and ReLU, for ``b`` samples per micro-batch,
runs as (per pass; every kernel adds ``launch_overhead_s``):

- **forward**: one implicit GEMM ``(M, N, K) = (b oh ow, cout, cin kh kw)``; then batch
  norm (statistics: read the output; normalise: read, write) and ReLU (read, write): 5
  element accesses per output element, or bias and ReLU: 4;
- **backward**: the data-gradient GEMM (not for the first layer: the images need no
  gradient; see below for its shape) and the weight-gradient GEMM
  ``(cout, cin kh kw, b oh ow)``; ReLU backward (read the gradient and the output, write)
  and batch-norm backward (reduce: read the gradient and the input; apply: read both,
  write): 8 accesses per output element, or ReLU and bias gradient: 4;
- the memory-bound kernels that follow the layer (pooling, residual adds,
  concatenation: :class:`~sim.workload.layer_model.ConvShape`'s ``after_*`` accesses).

Batch norm, ReLU, pooling, residual adds and concatenation are the framework's
elementwise kernels: as for a transformer (``training.fused_kernels``), eager framework
kernels (PyTorch's NCHW batch norm and separate ReLU, its autograd copies) move their
bytes at ``mem_eff * mem_training_factor``, fused bandwidth-tuned ones (TensorFlow's
fused batch norm, cuDNN's fused kernels) at ``stream_eff``.

An implicit GEMM runs at the GEMM model's compute rate
(:func:`sim.training.compute.kernels.gemm_compute_s`: the GEMM ceiling, waves and
split-K, the sustained clock), and never faster than its real operands move through HBM
(the input feature map, not its im2col expansion; the weights; the output). On a GPU
with tensor cores (:func:`tensor_cores`), a filter with several taps runs at that rate
times two factors: ``conv_eff``, the kernels' own cost of forming each tile of the
convolution matrix on the fly, tap by tap, with its own address and padding (halo)
predicates (CUTLASS docs, "Implicit GEMM Convolution"), which DeepBench's V100 training
kernels put at about 1 (``calibrate/kernel_benchmarks.py`` CONV_KERNEL_CHECKS); and the
framework stack's factor (``training.conv_stack``, :mod:`sim.training.compute.conv_stacks`:
what a framework keeps of that rate in a training step), solved on VGG-16 runs, whose
convolutions are all 3x3, so it measures exactly the multi-tap kernels it is applied to. A
1x1 filter (stride 1 or 2) has one tap and no halo: its convolution matrix is the NHWC
activation tensor itself (rows strided by the stride), so the kernel is a plain GEMM and
runs at the GEMM rate, as fully connected layers do (cuBLAS). CUDA-core kernels (fp32,
and every dtype on a GPU without tensor cores) leave their multiply-adds time to form the
tiles and reach the GEMM rate too (P100's fp32 VGG-16 needs the GEMM rate to reach
TensorFlow's published figure; V100's fp32 VGG-16 comes within 9% of Lambda's at it and
45% short at the tensorflow stack's 0.5543: ``calibrate/kernel_benchmarks.py`` CNN_RUNS).
In fp32 3x3 stride-1 convolutions run as Winograd F(2x2, 3x3): 2.25x fewer multiplies
(Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", CVPR 2016; cuDNN 5's
WINOGRAD algorithms). fp32 is timed at the fp32 peak: PyTorch's cuDNN convolutions default
to TF32 on Ampere and later (``torch.backends.cudnn.allow_tf32``), which is not modelled.

The data gradient of a stride-``s`` convolution runs as ``s^2`` sub-convolutions, one per
phase of the input pixels (those that no filter tap reaches skipped: a 1x1 stride-2
convolution's gradient reaches one pixel in four, the others are zeros), each with its
filter taps padded to ``ceil(k/s)`` a side (CUTLASS's strided dgrad): the GEMM
``(b ceil(h/s) ceil(w/s) min(kh,s) min(kw,s), cin, cout ceil(kh/s) ceil(kw/s))``, at stride 1
``(b h w, cin, cout kh kw)``. That is the forward's multiply-adds times
``min(k,s)^2 ceil(k/s)^2 / k^2`` (1.78 for 3x3, 1.44 for 5x5, 1 for 1x1 at stride 2);
DeepBench's V100 strided data gradients (5x5 and 5x10, stride 2) are 1.1-1.9x their
forward. On tensor cores, an implicit GEMM works in whole
channel tiles (``conv_tile``): it issues the multiply-adds of its output channels padded to
whole tiles and, for each filter tap, of its input channels padded to whole K slabs
(:func:`channel_padding`). Memory-bound kernels move their element accesses
(2 bytes each in fp16/bf16, 4 in fp32) at ``hbm_Bps * mem_eff * mem_training_factor``
(or ``stream_eff``).

Not modelled: NCHW/NHWC layout transposes, kernel fusion beyond cuDNN's (a framework
that fuses batch norm, ReLU and the residual add moves fewer bytes), data loading.

>>> from sim.catalog import gpu_spec
>>> from sim.training.compute.params import compute_params
>>> from sim.workload.layer_model import ConvShape
>>> c = ConvShape(64, 64, 3, 3, 56, 56, 56, 56)
>>> gpu, p = gpu_spec("A100-SXM-80GB"), compute_params("A100-SXM-80GB")
>>> conv_layer_s(c, 256, "bf16", gpu, p, True, False) > conv_layer_s(c, 256, "bf16", gpu, p, False, False)
True
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.catalog import GpuSpec
from sim.training.compute.kernels import eager_mem_eff, gemm_compute_s
from sim.training.compute.params import ComputeParams

if TYPE_CHECKING:  # the layer-list package imports this module (no import loop at run time)
    from sim.workload.layer_model import ConvShape

__all__ = [
    "CONV_PASSES",
    "NORM_ACCESSES",
    "WINOGRAD_SAVING",
    "channel_padding",
    "conv_gemm_s",
    "conv_kernels",
    "conv_layer_s",
    "tensor_cores",
]

#: Element accesses per output element of what follows a layer: (forward, backward).
NORM_ACCESSES = {"bn": (5, 8), "bias": (4, 4), "none": (0, 1)}
#: Multiplies saved by Winograd F(2x2, 3x3) over direct 3x3 convolution (36 / 16).
WINOGRAD_SAVING = 2.25
#: Input channels up to which a convolution reads an image (few-channels kernels).
IMAGE_CHANNELS_MAX = 4
#: Kernels launched per pass beyond the GEMMs: (forward, backward).
_NORM_KERNELS = {"bn": (3, 3), "bias": (2, 2), "none": (0, 1)}


def tensor_cores(gpu: GpuSpec, dtype: str) -> bool:
    """Whether ``gpu`` runs ``dtype`` convolutions on matrix units (tensor cores): a
    16-bit dtype at more than twice the fp32 peak (CUDA cores run fp16 at most at 2x, as
    P100's paired half2 does; V100 and later: 8x and more). fp32 runs on the CUDA cores.

    >>> from sim.catalog import gpu_spec
    >>> tensor_cores(gpu_spec("V100-SXM2-32GB"), "fp16"), tensor_cores(gpu_spec("P100-SXM2-16GB"), "fp16")
    (True, False)
    """
    if dtype == "fp32":
        return False
    peak = gpu.peak_flops
    return peak.get(dtype, 0.0) > 2.0 * peak.get("fp32", float("inf"))


def _gemm_s(m: float, n: float, k: float, nbytes: float, dtype: str, gpu: GpuSpec,
            p: ComputeParams, eff: float) -> float:  # fmt: skip
    compute = gemm_compute_s(m, n, k, 1, dtype, gpu, p, eff)
    return max(compute, nbytes / (gpu.hbm_Bps * p.stream_eff)) + p.launch_overhead_s


def _up(n: int, tile: int) -> float:
    """``n`` padded to whole ``tile``s, relative to ``n``."""
    return -(-n // tile) * tile / n


def channel_padding(c: ConvShape, tile: tuple[int, int] | None) -> tuple[float, float, float]:
    """Multiply-adds issued per useful one by the (forward, data-gradient, weight-gradient)
    implicit GEMMs of ``c`` on kernels that work in ``tile`` = (output channels, input
    channels per filter tap); ``None``: (1, 1, 1).

    A threadblock's output tile spans whole multiples of ``tile[0]`` GEMM columns (forward:
    the output channels; data gradient: the input channels; weight gradient: its rows,
    the output channels). Its main loop walks the filter taps and, within each, the
    reduced channels in slabs of ``tile[1]`` (CUTLASS ``implicit_gemm_k_iterations``:
    ``R * S * ceil(C / threadblock_K)`` forward, ``R * S * ceil(K / threadblock_K)`` for the
    data gradient, no padding of the weight gradient's ``N * P * Q``); an image's 3
    channels are read as one slab across the taps (CUTLASS's few-channels iterator:
    ``ceil(R * S * C / threadblock_K)``).

    >>> from sim.workload.layer_model import ConvShape
    >>> [round(x, 2) for x in channel_padding(ConvShape(160, 160, 1, 7, 17, 17, 17, 17), (64, 64))]
    [1.44, 1.44, 1.2]
    >>> channel_padding(ConvShape(256, 64, 1, 1, 56, 56, 56, 56), (64, 64))
    (1.0, 1.0, 1.0)
    """
    if tile is None:
        return 1.0, 1.0, 1.0
    n, k = tile
    taps = c.kh * c.kw
    k_in = _up(taps * c.cin, k) if c.cin < IMAGE_CHANNELS_MAX else _up(c.cin, k)
    return _up(c.cout, n) * k_in, _up(c.cin, n) * _up(c.cout, k), _up(c.cout, n)


def _gemm_count(backward: bool, first: bool) -> int:
    """GEMMs of a pass: forward 1; backward the weight and (unless ``first``) data gradient."""
    return (1 if first else 2) if backward else 1


def conv_kernels(c: ConvShape, backward: bool, first: bool) -> int:
    """Kernels one pass of the layer launches: its GEMMs (forward 1; backward the weight
    gradient, and the data gradient unless ``first``), its norm and activation kernels,
    and one for the memory-bound kernels that follow it, if any.

    >>> from sim.workload.layer_model import ConvShape
    >>> c = ConvShape(64, 64, 3, 3, 56, 56, 56, 56)
    >>> conv_kernels(c, False, False), conv_kernels(c, True, False), conv_kernels(c, True, True)
    (4, 5, 4)
    """
    after = c.after_bwd if backward else c.after_fwd
    return _gemm_count(backward, first) + _NORM_KERNELS[c.norm][int(backward)] + (1 if after else 0)


#: The implicit GEMMs of a convolution: forward, data gradient, weight gradient.
CONV_PASSES = ("fwd", "dgrad", "wgrad")


def conv_gemm_s(c: ConvShape, b: int, dtype: str, gpu: GpuSpec, p: ComputeParams, kind: str,
                stack_eff: float = 1.0) -> float:  # fmt: skip
    """Seconds of one implicit GEMM of ``c`` for ``b`` samples (launch included): ``kind``
    ``fwd`` ``(b oh ow, cout, cin kh kw)``, ``dgrad`` (the data gradient over its stride
    phases, the module docstring) or ``wgrad`` ``(cout, cin kh kw, b oh ow)``, at the GEMM
    rate times ``conv_eff`` and ``stack_eff`` (tensor cores, several taps), over the channel
    padding, and no faster than the input, weights and output move through HBM.

    >>> from sim.catalog import gpu_spec
    >>> from sim.training.compute.params import compute_params
    >>> from sim.workload.layer_model import ConvShape
    >>> c = ConvShape(64, 64, 3, 3, 56, 56, 56, 56)
    >>> gpu, p = gpu_spec("V100-SXM2-32GB"), compute_params("V100-SXM2-32GB")
    >>> conv_gemm_s(c, 64, "fp16", gpu, p, "fwd", 0.5) > conv_gemm_s(c, 64, "fp16", gpu, p, "fwd")
    True
    """
    if kind not in CONV_PASSES:
        raise ValueError(f"kind: {kind!r} is not one of {', '.join(CONV_PASSES)}")
    el = 4 if dtype == "fp32" else 2
    spatial = c.kh * c.kw * c.h * c.w > 1
    matrix = tensor_cores(gpu, dtype)
    # a 1x1 filter reads a plain GEMM operand; CUDA-core kernels reach the GEMM rate
    eff = p.conv_eff * stack_eff if c.kh * c.kw > 1 and matrix else 1.0
    if dtype == "fp32" and c.kh == c.kw == 3 and c.stride == 1:
        eff *= WINOGRAD_SAVING
    pad = channel_padding(c, p.conv_tile if spatial and matrix else None)
    nbytes = b * (c.in_elements + c.out_elements) * el + c.cin * c.cout * c.kh * c.kw * el
    taps = c.kh * c.kw
    if kind == "fwd":
        return _gemm_s(b * c.oh * c.ow, c.cout, c.cin * taps, nbytes, dtype, gpu, p, eff / pad[0])
    if kind == "wgrad":
        return _gemm_s(c.cout, c.cin * taps, b * c.oh * c.ow, nbytes, dtype, gpu, p, eff / pad[2])
    s = c.stride
    phases = min(c.kh, s) * min(c.kw, s)  # input phases some filter tap reaches
    taps = -(-c.kh // s) * -(-c.kw // s)  # taps per phase, padded to the most
    m = b * -(-c.h // s) * -(-c.w // s) * phases
    return _gemm_s(m, c.cin, c.cout * taps, nbytes, dtype, gpu, p, eff / pad[1])


def conv_layer_s(c: ConvShape, b: int, dtype: str, gpu: GpuSpec, p: ComputeParams,
                 backward: bool, first: bool, fused: bool = False,
                 stack_eff: float = 1.0) -> float:  # fmt: skip
    """Seconds of one convolution (or fully connected) layer's forward or backward pass
    for a micro-batch of ``b`` samples in ``dtype`` (see the module docstring).

    ``first``: the network's first layer (no data gradient); ``fused``: its elementwise
    kernels are fused, bandwidth-tuned ones (``stream_eff``), not eager
    (``mem_eff * mem_training_factor``); ``stack_eff``: the framework stack's factor on
    tensor-core convolutions with several taps, beside the kernels' ``conv_eff``
    (:func:`sim.training.compute.conv_stacks.conv_stack_eff`; 1: the kernels alone).
    """
    el = 4 if dtype == "fp32" else 2
    kinds = ("fwd",) if not backward else (("wgrad",) if first else ("wgrad", "dgrad"))
    t = sum(conv_gemm_s(c, b, dtype, gpu, p, kind, stack_eff) for kind in kinds)
    side = 1 if backward else 0
    accesses = NORM_ACCESSES[c.norm][side] * c.out_elements + (
        c.after_bwd if backward else c.after_fwd
    )
    memory = b * accesses * el / (gpu.hbm_Bps * (p.stream_eff if fused else eager_mem_eff(p)))
    others = conv_kernels(c, backward, first) - _gemm_count(backward, first)  # GEMMs' are in t
    return t + memory + others * p.launch_overhead_s
