"""CNN presets as layer lists, built from the architecture tables of their papers.

- ResNet-50 and ResNet-101: He et al., "Deep Residual Learning for Image Recognition"
  (CVPR 2016), Table 1: bottleneck blocks [1x1, 3x3, 1x1] x (3, 4, 6, 3) and
  x (3, 4, 23, 3), projection shortcuts where the shape changes, stride 2 in the first
  1x1 of stages 3-5 (the paper's original placement; 3.8 and 7.6 GFLOPs multiply-adds).
- ResNet-50 v1.5: the same with the stride 2 in the 3x3 convolution of stages 3-5 (4.1
  GFLOPs multiply-adds), what torchvision's ``resnet50`` and NVIDIA's Deep Learning
  Examples train (github.com/NVIDIA/DeepLearningExamples PyTorch/Classification/ConvNets/
  resnet50v1.5/README.md: "v1.5 has stride = 2 in the 3x3 convolution", "~5% imgs/sec"
  slower than v1).
- VGG-16: Simonyan & Zisserman, "Very Deep Convolutional Networks for Large-Scale Image
  Recognition" (ICLR 2015), Table 1 configuration D: 13 3x3 convolutions with biases, three
  fully connected layers (4096, 4096, 1000).
- Inception V3: Szegedy et al., "Rethinking the Inception Architecture for Computer Vision"
  (CVPR 2016), Table 1 and Figures 5-7, 299x299 input, as implemented in torchvision's
  ``Inception3`` (branch widths), without the auxiliary classifier.

Every convolution carries batch normalisation (2 parameters per channel) except in VGG-16,
which has biases. A layer is one convolution (with its norm and ReLU) or one fully
connected layer; pooling is folded into the next layer's input. FLOPs count a multiply-add
as 2. ``activation_bytes`` is what a layer keeps for backward per sample, counted at 4
bytes an element (:attr:`~sim.workload.layer_model.LayerModel.activation_element_bytes`;
the step scales it to the precision the activations are stored in), as PyTorch's autograd
and TensorFlow's gradient ops hold it:

- a convolution with batch norm and ReLU: the convolution's output (batch norm's backward
  reads its input) and the ReLU's output (its backward reads it, and it is the next
  convolution's input, which that convolution's weight gradient reads): 2 tensors; batch
  norm's output is the ReLU's input, overwritten in place (PyTorch's ``inplace=True``) or
  freed once the ReLU has run (TensorFlow's ``ReluGrad`` reads the ReLU's output);
- a convolution with a bias and ReLU (VGG-16): the ReLU's output, 1 tensor;
- a projection shortcut (convolution and batch norm, no ReLU): the convolution's output;
  batch norm's output is added into the residual in place, 1 tensor;
- a pooling's output and an Inception block's concatenation: a new tensor the next
  convolutions read (and TensorFlow's ``MaxPoolGrad`` reads the pooled output), kept with
  the layer before. Not counted: PyTorch's max-pooling indices (8 bytes per pooled element,
  one pooling in ResNet), dropout masks and the loss's logits.

Each layer also carries its shape (:class:`~sim.workload.layer_model.ConvShape`) for the
op-level compute model, with the memory-bound kernels that follow it as element accesses
per sample: a pooling reads its input and writes its output (backward: reads the output
gradient, input and output, writes the input gradient); ResNet's residual add reads two
tensors and writes one (backward: the two branch gradients summed); Inception's
concatenation copies its branches' outputs (forward and backward), and backward sums the
gradients of a tensor several branches read (k reads, one write: TensorFlow's ``AddN``);
the global average pool reads the last feature map.

>>> m = cnn_preset("resnet50")
>>> round(m.params / 1e6, 1), round(m.flops_per_sample / 2e9, 2)
(25.6, 3.86)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from sim.errors import ConfigError
from sim.workload.layer_model import ConvShape, Layer, LayerModel

__all__ = ["CNN_PRESETS", "cnn_preset"]

ELEM = 4  # fp32 activations


class _Net:
    """Accumulates layers while tracking the feature map (channels, height, width)."""

    def __init__(self, c: int, hw: int) -> None:
        self.c, self.h, self.w = c, hw, hw
        self.layers: list[Layer] = []

    def conv(self, cout: int, k: int | tuple[int, int], stride: int = 1, pad: int | tuple[int, int] = 0,
             name: str = "conv", bias: bool = False, cin: int | None = None,
             hw: tuple[int, int] | None = None, relu: bool = True) -> tuple[int, int]:  # fmt: skip
        """Add a convolution of the current (or given) input; return its output size.
        ``relu`` False: batch norm only (a projection shortcut), one tensor kept."""
        kh, kw = (k, k) if isinstance(k, int) else k
        ph, pw = (pad, pad) if isinstance(pad, int) else pad
        cin = self.c if cin is None else cin
        h, w = (self.h, self.w) if hw is None else hw
        shape = ConvShape.padded(cin, cout, (kh, kw), (h, w), (ph, pw), stride,
                                 "bias" if bias else "bn")  # fmt: skip
        oh, ow = shape.oh, shape.ow
        params = kh * kw * cin * cout + (cout if bias else 2 * cout)
        macs = kh * kw * cin * cout * oh * ow
        kept = (1 if bias or not relu else 2) * cout * oh * ow * ELEM
        self.layers.append(Layer(f"{name}_{len(self.layers)}", params, 2.0 * macs, float(kept),
                                 shape))  # fmt: skip
        return oh, ow

    def set(self, c: int, h: int, w: int | None = None) -> None:
        self.c, self.h, self.w = c, h, h if w is None else w

    def after(self, fwd: float, bwd: float) -> None:
        """Attach memory-bound kernels (element accesses per sample) to the last layer."""
        last = self.layers[-1]
        shape = last.conv
        assert shape is not None
        shape = replace(shape, after_fwd=shape.after_fwd + fwd, after_bwd=shape.after_bwd + bwd)
        self.layers[-1] = replace(last, conv=shape)

    def keep(self, elements: float) -> None:
        """Count a tensor of ``elements`` per sample (a pooling's or concatenation's output)
        as kept for backward by the last layer."""
        last = self.layers[-1]
        self.layers[-1] = replace(last, activation_bytes=last.activation_bytes + elements * ELEM)

    def pool(self, k: int, stride: int, pad: int = 0) -> None:
        inp = self.c * self.h * self.w
        self.h = (self.h + 2 * pad - k) // stride + 1
        self.w = (self.w + 2 * pad - k) // stride + 1
        out = self.c * self.h * self.w
        self.after(inp + out, 2 * (inp + out))
        self.keep(out)

    def fc(self, cout: int, name: str = "fc", logits: bool = False) -> None:
        cin = self.c * self.h * self.w
        shape = ConvShape(cin, cout, 1, 1, 1, 1, 1, 1, 1, "none" if logits else "bias")
        self.layers.append(Layer(f"{name}_{len(self.layers)}", cin * cout + cout, 2.0 * cin * cout,
                                 float(cout * ELEM), shape))  # fmt: skip
        self.set(cout, 1)

    def global_pool(self) -> None:
        """Global average pooling: read the last feature map (its gradient: written)."""
        elements = self.c * self.h * self.w
        self.after(elements, elements)
        self.keep(self.c)
        self.set(self.c, 1)


def _resnet(blocks: tuple[int, int, int, int], name: str, v15: bool = False) -> LayerModel:
    """ResNet with bottleneck ``blocks`` per stage; ``v15``: stride in the 3x3 (v1.5)."""
    n = _Net(3, 224)
    n.set(64, *n.conv(64, 7, 2, 3, "conv1"))
    n.pool(3, 2, 1)
    for stage, (count, width) in enumerate(zip(blocks, (64, 128, 256, 512), strict=True)):
        for b in range(count):
            stride = 2 if b == 0 and stage > 0 else 1
            cin, hw = n.c, (n.h, n.w)
            if b == 0:  # projection shortcut (1x1, stride) to 4 x width channels
                n.conv(4 * width, 1, stride, 0, "shortcut", cin=cin, hw=hw, relu=False)
            first, middle = (1, stride) if v15 else (stride, 1)
            n.set(width, *n.conv(width, 1, first, 0, "reduce", cin=cin, hw=hw))
            n.set(width, *n.conv(width, 3, middle, 1, "conv3x3"))
            n.set(4 * width, *n.conv(4 * width, 1, 1, 0, "expand"))
            block = n.c * n.h * n.w
            n.after(3 * block, 3 * block)  # residual add; backward: branch gradients summed
    n.global_pool()
    n.fc(1000, logits=True)
    source = "He et al. 2016, Table 1" + (" (v1.5: stride in the 3x3, torchvision)" if v15 else "")
    return LayerModel(name, tuple(n.layers), 3 * 224 * 224 * ELEM, source, ELEM)


def _vgg16() -> LayerModel:
    n = _Net(3, 224)
    for widths in ((64, 64), (128, 128), (256, 256, 256), (512, 512, 512), (512, 512, 512)):
        for c in widths:
            n.set(c, *n.conv(c, 3, 1, 1, "conv", bias=True))
        n.pool(2, 2)
    n.fc(4096)
    n.fc(4096)
    n.fc(1000, logits=True)
    return LayerModel("vgg16", tuple(n.layers), 3 * 224 * 224 * ELEM,
                      "Simonyan & Zisserman 2015, Table 1 (D)", ELEM)  # fmt: skip


def _fan_in_grad(consumers: int, elements: int) -> float:
    """Backward accesses per sample that sum the gradients of a tensor ``consumers``
    branches read: each read, the sum written (one ``AddN``, as TensorFlow aggregates)."""
    return float((consumers + 1) * elements) if consumers > 1 else 0.0


def _branches(n: _Net, cin: int, hw: tuple[int, int], paths: list[list[tuple]]) -> int:
    """Parallel branches on one input; each path is a list of (cout, k, stride, pad);
    ``("pool", k, s, p)`` pools first (no layer; its accesses go to the block's last
    layer). Returns the concatenated channels; the concatenation copies them, and the
    input's gradient sums the branches' (:func:`_fan_in_grad`)."""
    total, pooled, kept = 0, 0.0, 0.0
    for path in paths:
        c, size = cin, hw
        for step in path:
            if step[0] == "pool":
                _, k, s, p = step
                pooled += cin * size[0] * size[1]
                size = ((size[0] + 2 * p - k) // s + 1, (size[1] + 2 * p - k) // s + 1)
                pooled += cin * size[0] * size[1]
                kept += cin * size[0] * size[1]
                continue
            cout, k, s, p = step
            size = n.conv(cout, k, s, p, "mixed", cin=c, hw=size)
            c = cout
        total += c
        out = size
    n.set(total, *out)
    concat = 2.0 * total * out[0] * out[1]
    summed = _fan_in_grad(len(paths), cin * hw[0] * hw[1])
    n.after(pooled + concat, 2 * pooled + concat + summed)
    n.keep(kept + total * out[0] * out[1])
    return total


_SPLIT_3X3: tuple[tuple[tuple[int, int], tuple[int, int]], ...] = (
    ((1, 3), (0, 1)),
    ((3, 1), (1, 0)),
)


def _inception_v3() -> LayerModel:
    n = _Net(3, 299)
    for cout, k, s, p in ((32, 3, 2, 0), (32, 3, 1, 0), (64, 3, 1, 1)):
        n.set(cout, *n.conv(cout, k, s, p, "stem"))
    n.pool(3, 2)
    n.set(80, *n.conv(80, 1, 1, 0, "stem"))
    n.set(192, *n.conv(192, 3, 1, 0, "stem"))
    n.pool(3, 2)
    for pool_c in (32, 64, 64):  # Inception A (Figure 5), 35x35
        hw = (n.h, n.w)
        _branches(n, n.c, hw, [[(64, 1, 1, 0)], [(48, 1, 1, 0), (64, 5, 1, 2)],
                               [(64, 1, 1, 0), (96, 3, 1, 1), (96, 3, 1, 1)],
                               [("pool", 3, 1, 1), (pool_c, 1, 1, 0)]])  # fmt: skip
    _branches(n, n.c, (n.h, n.w), [[(384, 3, 2, 0)], [(64, 1, 1, 0), (96, 3, 1, 1), (96, 3, 2, 0)],
                                    [("pool", 3, 2, 0)]])  # fmt: skip
    for c7 in (128, 160, 160, 192):  # Inception C (Figure 6), 17x17, factorised 7x7
        _branches(n, n.c, (n.h, n.w), [
            [(192, 1, 1, 0)],
            [(c7, 1, 1, 0), (c7, (1, 7), 1, (0, 3)), (192, (7, 1), 1, (3, 0))],
            [(c7, 1, 1, 0), (c7, (7, 1), 1, (3, 0)), (c7, (1, 7), 1, (0, 3)), (c7, (7, 1), 1, (3, 0)),
             (192, (1, 7), 1, (0, 3))],
            [("pool", 3, 1, 1), (192, 1, 1, 0)],
        ])  # fmt: skip
    _branches(n, n.c, (n.h, n.w), [
        [(192, 1, 1, 0), (320, 3, 2, 0)],
        [(192, 1, 1, 0), (192, (1, 7), 1, (0, 3)), (192, (7, 1), 1, (3, 0)), (192, 3, 2, 0)],
        [("pool", 3, 2, 0)],
    ])  # fmt: skip
    for _ in range(2):  # Inception E (Figure 7), 8x8, expanded filter banks
        cin, hw = n.c, (n.h, n.w)
        n.conv(320, 1, 1, 0, "mixed", cin=cin, hw=hw)
        n.conv(384, 1, 1, 0, "mixed", cin=cin, hw=hw)
        for kern, pad in _SPLIT_3X3:
            n.conv(384, kern, 1, pad, "mixed", cin=384, hw=hw)
        n.conv(448, 1, 1, 0, "mixed", cin=cin, hw=hw)
        n.conv(384, 3, 1, 1, "mixed", cin=448, hw=hw)
        for kern, pad in _SPLIT_3X3:
            n.conv(384, kern, 1, pad, "mixed", cin=384, hw=hw)
        n.conv(192, 1, 1, 0, "mixed", cin=cin, hw=hw)  # after a 3x3 average pool
        n.set(320 + 768 + 768 + 192, *hw)
        pooled, concat = 2.0 * cin * hw[0] * hw[1], 2.0 * n.c * hw[0] * hw[1]
        # the input feeds four branches; each 384-channel split feeds a 1x3 and a 3x1
        summed = _fan_in_grad(4, cin * hw[0] * hw[1]) + 2 * _fan_in_grad(2, 384 * hw[0] * hw[1])
        n.after(pooled + concat, 2 * pooled + concat + summed)
        n.keep((cin + n.c) * hw[0] * hw[1])  # the pooled input of the 192 branch, the concatenation
    n.global_pool()
    n.fc(1000, logits=True)
    return LayerModel("inception-v3", tuple(n.layers), 3 * 299 * 299 * ELEM,
                      "Szegedy et al. 2016, Table 1 (torchvision Inception3 widths)", ELEM)  # fmt: skip


CNN_PRESETS: dict[str, Callable[[], LayerModel]] = {
    "resnet50": lambda: _resnet((3, 4, 6, 3), "resnet50"),
    "resnet50-v1.5": lambda: _resnet((3, 4, 6, 3), "resnet50-v1.5", v15=True),
    "resnet101": lambda: _resnet((3, 4, 23, 3), "resnet101"),
    "vgg16": _vgg16,
    "inception-v3": _inception_v3,
}


def cnn_preset(name: str) -> LayerModel:
    """The layer list of CNN preset ``name`` (ConfigError listing the known ones)."""
    try:
        return CNN_PRESETS[name]()
    except KeyError:
        raise ConfigError(
            f"model.preset: unknown CNN {name!r}; known: {', '.join(CNN_PRESETS)}"
        ) from None
