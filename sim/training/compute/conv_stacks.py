"""Convolution stacks: what a framework keeps of its tensor-core convolution kernels' rate.

A CNN scenario names the stack that runs its convolutions (``training.conv_stack``):
``pytorch`` (eager PyTorch on cuDNN, the default), ``tensorflow`` (TensorFlow graph mode,
NCHW, no XLA) or ``xla`` (TensorFlow with XLA auto-clustering). Its factor
(``topologies/catalog/conv_stacks.yaml``, each solved on one published or measured VGG-16
run) multiplies the GPU's kernel-level ``conv_eff`` on every tensor-core convolution with
several filter taps (:func:`sim.training.compute.conv.conv_layer_s`). The kernels alone
reach about the GEMM rate (DeepBench's V100 cuDNN training convolutions, the catalog's
comment); the stack's factor is the rest of what a framework loses on them (layouts,
compilation, the kernels it picks), measured on one GPU and carried to the others.

>>> conv_stack_eff("tensorflow") < conv_stack_eff("pytorch") < conv_stack_eff("xla") <= 1
True
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from sim.errors import ConfigError, TopologyError
from sim.files import load_shipped_yaml
from sim.workload.primitives import CONV_STACKS

__all__ = ["CONV_STACKS", "conv_stack_eff"]


@cache
def _stacks() -> dict[str, float]:
    """Each stack's factor, from the catalog (each entry must also name its source)."""
    text = resources.files("topologies.catalog").joinpath("conv_stacks.yaml").read_text("utf-8")
    raw = load_shipped_yaml(text, "catalog conv_stacks.yaml")
    if not isinstance(raw, dict) or set(raw) != set(CONV_STACKS):
        raise TopologyError(
            f"catalog conv_stacks.yaml: expected the stacks {', '.join(CONV_STACKS)}"
        )
    out: dict[str, float] = {}
    for name, body in raw.items():
        eff = body.get("eff") if isinstance(body, dict) else None
        if not isinstance(eff, (int, float)) or not 0 < eff <= 1 or not body.get("source"):
            raise TopologyError(
                f"catalog conv_stacks.yaml: {name}: needs eff in (0, 1] and a source"
            )
        out[str(name)] = float(eff)
    return out


def conv_stack_eff(stack: str) -> float:
    """Fraction of the GEMM rate ``stack`` keeps on tensor-core convolutions with several
    filter taps, beside the kernels' own ``conv_eff`` (no units).

    Raises ConfigError naming the stacks for an unknown one.
    """
    if stack not in CONV_STACKS:
        raise ConfigError(f"training.conv_stack: {stack!r} is not one of {', '.join(CONV_STACKS)}")
    return _stacks()[stack]
