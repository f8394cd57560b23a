"""Models given as explicit layer lists: parameters, FLOPs and activation bytes per layer.

For networks that are not decoder-only transformers (the CNN presets in :mod:`.cnn`, or
a user's own model), a model is the list of its layers in forward order, each with

- ``params``: trainable parameters;
- ``flops``: forward FLOPs for one sample (a multiply-add counts 2);
- ``activation_bytes``: bytes the layer keeps for its backward pass, for one sample.

Backward costs twice the forward FLOPs (input and weight gradients), as for matmuls.
A scenario gives one as ``model: {layer_list: [...]}`` (inline, or a path to a YAML file
holding the list) or by preset name (``model: {preset: resnet50}``).

>>> m = layer_model_from_list([{"name": "fc", "params": 10, "flops": 20, "activation_bytes": 8}])
>>> m.params, m.flops_per_sample
(10, 20.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.errors import ConfigError
from sim.files import load_yaml, read_text

__all__ = [
    "LAYER_KEYS",
    "ConvShape",
    "Layer",
    "LayerModel",
    "layer_model_from_list",
    "read_layer_list",
]

LAYER_KEYS = ("name", "params", "flops", "activation_bytes")


@dataclass(frozen=True)
class ConvShape:
    """Shape of a convolution (a fully connected layer is a 1x1 one on a 1x1 map), for
    the op-level compute model (:mod:`sim.training.compute.conv`).

    Attributes
    ----------
    cin, cout : int
        Input and output channels.
    kh, kw : int
        Kernel height and width.
    h, w, oh, ow : int
        Input and output feature-map height and width.
    stride : int
        Stride (1: a 3x3 convolution may run as Winograd in fp32).
    norm : str
        What follows it: ``"bn"`` (batch norm and ReLU), ``"bias"`` (bias and ReLU) or
        ``"none"`` (the logits).
    after_fwd, after_bwd : float
        Element accesses per sample of the memory-bound kernels that follow the layer in
        forward and backward (residual adds, pooling, concatenation), beyond its own norm
        and activation.
    """

    cin: int
    cout: int
    kh: int
    kw: int
    h: int
    w: int
    oh: int
    ow: int
    stride: int = 1
    norm: str = "bn"
    after_fwd: float = 0.0
    after_bwd: float = 0.0

    @property
    def out_elements(self) -> int:
        """Output elements per sample, ``cout * oh * ow``."""
        return self.cout * self.oh * self.ow

    @property
    def in_elements(self) -> int:
        """Input elements per sample, ``cin * h * w``."""
        return self.cin * self.h * self.w

    @classmethod
    def padded(cls, cin: int, cout: int, kernel: tuple[int, int], hw: tuple[int, int],
               pad: tuple[int, int], stride: int = 1, norm: str = "bn") -> ConvShape:  # fmt: skip
        """``cin`` channels of ``hw`` through ``cout`` filters of ``kernel`` (rows,
        columns) with ``pad`` zeros a side and ``stride``: the output size follows.

        >>> s = ConvShape.padded(64, 128, (3, 3), (56, 56), (1, 1), 2)
        >>> s.oh, s.ow
        (28, 28)
        """
        oh, ow = ((n + 2 * p - k) // stride + 1 for n, p, k in zip(hw, pad, kernel, strict=True))
        return cls(cin, cout, kernel[0], kernel[1], hw[0], hw[1], oh, ow, stride, norm)


@dataclass(frozen=True)
class Layer:
    """One layer: parameters, forward FLOPs per sample, activation bytes kept per sample,
    and (CNN presets) the convolution's shape, which the op-level compute model times."""

    name: str
    params: int
    flops: float
    activation_bytes: float
    conv: ConvShape | None = None


@dataclass(frozen=True)
class LayerModel:
    """A model as its layers in forward order.

    Attributes
    ----------
    name : str
        Label (the preset name, or ``"custom"``).
    layers : tuple of Layer
        Forward order.
    input_bytes : float
        Bytes of one input sample as the first layer reads it.
    source : str
        Where the layer list comes from (paper, or the user's file).
    activation_element_bytes : int
        Bytes per element the layers' ``activation_bytes`` are counted at (the CNN presets:
        4), so that a step stores them at its precision's element size instead; 0 (a
        user's list): the bytes are taken as given, whatever the precision.
    """

    name: str
    layers: tuple[Layer, ...]
    input_bytes: float = 0.0
    source: str = ""
    activation_element_bytes: int = 0

    @property
    def params(self) -> int:
        """All trainable parameters."""
        return sum(lay.params for lay in self.layers)

    @property
    def flops_per_sample(self) -> float:
        """Forward FLOPs of one sample."""
        return float(sum(lay.flops for lay in self.layers))

    @property
    def activation_bytes_per_sample(self) -> float:
        """Activation bytes kept for the backward pass of one sample."""
        return float(sum(lay.activation_bytes for lay in self.layers))


def _number(value: object, where: str, integer: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ConfigError(f"{where}: expected a number >= 0, got {value!r}")
    if integer and value != int(value):
        raise ConfigError(f"{where}: expected a whole number of parameters, got {value!r}")
    return float(value)


def layer_model_from_list(
    items: Sequence[Any], name: str = "custom", source: str = ""
) -> LayerModel:
    """Validate a list of ``{name, params, flops, activation_bytes}`` mappings."""
    if not isinstance(items, (list, tuple)) or not items:
        raise ConfigError("model.layer_list: expected a non-empty list of layers")
    layers = []
    for i, item in enumerate(items):
        where = f"model.layer_list[{i}]"
        if not isinstance(item, dict):
            raise ConfigError(f"{where}: expected a mapping with {', '.join(LAYER_KEYS)}")
        unknown = sorted(set(item) - set(LAYER_KEYS))
        if unknown:
            raise ConfigError(
                f"{where}.{unknown[0]}: unknown key; allowed: {', '.join(LAYER_KEYS)}"
            )
        for key in LAYER_KEYS[1:]:
            if key not in item:
                raise ConfigError(f"{where}.{key}: missing")
        layers.append(
            Layer(
                name=str(item.get("name", f"layer{i}")),
                params=int(_number(item["params"], f"{where}.params", integer=True)),
                flops=_number(item["flops"], f"{where}.flops"),
                activation_bytes=_number(item["activation_bytes"], f"{where}.activation_bytes"),
            )
        )
    return LayerModel(name, tuple(layers), source=source)


def read_layer_list(value: object, folder: Path | None = None) -> LayerModel:
    """``model.layer_list`` as given: an inline list, or a YAML file path holding one."""
    if isinstance(value, str):
        path = Path(value)
        if not path.is_absolute() and folder is not None and (folder / path).is_file():
            path = folder / path
        if not path.is_file():
            raise ConfigError(f"model.layer_list: file not found: {value}")
        items = load_yaml(read_text(path, "model.layer_list file"), str(value))
        return layer_model_from_list(items, path.stem, source=str(value))
    return layer_model_from_list(value)  # type: ignore[arg-type]
