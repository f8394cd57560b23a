"""Checkpoint size and the time to write it to a storage tier.

A training checkpoint holds the model's weights and the optimizer's state. With
mixed-precision Adam that is 2 bytes per parameter of bf16/fp16 weights plus 12 bytes of
fp32 master weights, momentum and variance (the ``K = 12`` of Rajbhandari et al., "ZeRO:
Memory Optimizations Toward Training Trillion Parameter Models", SC20, Sec. 3.1);
gradients are not saved. Writing it to a tier whose nodes each write ``b_node`` bytes/s,
under an aggregate limit ``B_agg``, takes

    delta = size / min(nodes * b_node, B_agg)

>>> checkpoint_bytes(405e9) / 1e12   # Llama 3 405B: 14 bytes per parameter
5.67
>>> round(storage_tier("parallel-fs").write_s(5.67e12, nodes=2048), 3)   # at 2 TB/s
2.835
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.errors import ConfigError
from sim.packaged import lookup, read_table
from sim.units import parse_bandwidth

__all__ = ["StorageTier", "checkpoint_bytes", "storage_tier", "storage_tier_names"]


def checkpoint_bytes(
    params: float, model_bytes_per_param: float = 2.0, optimizer_bytes_per_param: float = 12.0
) -> float:
    """Bytes of one checkpoint: ``params * (model_bytes_per_param + optimizer_bytes_per_param)``.

    Parameters
    ----------
    params : float
        Parameter count of the whole model.
    model_bytes_per_param : float
        Bytes per parameter of saved weights (2 for bf16).
    optimizer_bytes_per_param : float
        Bytes per parameter of saved optimizer state (12 for mixed-precision Adam; 0 to save
        weights only).

    Raises
    ------
    ConfigError
        Negative, NaN or infinite inputs, or a zero-byte checkpoint.
    """
    values = {
        "params": params,
        "model_bytes_per_param": model_bytes_per_param,
        "optimizer_bytes_per_param": optimizer_bytes_per_param,
    }
    for name, value in values.items():
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
            raise ConfigError(
                f"checkpoint size: {name} must be a finite number >= 0 (got {value!r})"
            )
    size = float(params) * (model_bytes_per_param + optimizer_bytes_per_param)
    if size <= 0:
        raise ConfigError("checkpoint size: params and bytes per parameter give 0 bytes")
    return size


@dataclass(frozen=True)
class StorageTier:
    """Where checkpoints go and how fast they can be written.

    Attributes
    ----------
    name : str
        Preset name (or ``"custom"``).
    per_node_write_Bps : float
        Write bandwidth one node can sustain (bytes/s); inf = no per-node limit.
    aggregate_write_Bps : float
        Write bandwidth of the whole tier (bytes/s); inf = no shared limit.
    survives_node_loss : bool
        Whether a checkpoint outlives the node that wrote it.
    source : str
        Where the figures come from.
    """

    name: str
    per_node_write_Bps: float
    aggregate_write_Bps: float
    survives_node_loss: bool
    source: str

    def bandwidth_Bps(self, nodes: int) -> float:
        """Effective write bandwidth of a job on ``nodes`` nodes: ``min(nodes*b_node, B_agg)``."""
        return min(nodes * self.per_node_write_Bps, self.aggregate_write_Bps)

    def write_s(self, size_bytes: float, nodes: int) -> float:
        """Seconds to write ``size_bytes`` from ``nodes`` nodes (a blocking checkpoint)."""
        return size_bytes / self.bandwidth_Bps(nodes)


def _bandwidth(value: object, what: str) -> float:
    return math.inf if value is None else parse_bandwidth(value, what)


def storage_tier_names() -> list[str]:
    """Names of the shipped storage tiers.

    >>> storage_tier_names()
    ['local-nvme', 'object-store', 'parallel-fs']
    """
    return sorted(read_table("sim.reliability", "storage.yaml"))


def storage_tier(name: str, aggregate_write: object = None) -> StorageTier:
    """A storage tier preset from ``storage.yaml``, optionally with its aggregate limit replaced.

    Parameters
    ----------
    name : str
        Preset name (see :func:`storage_tier_names`).
    aggregate_write : str or float, optional
        Replace the tier's aggregate write bandwidth (e.g. ``"500GB/s"``; bytes/s if a number).

    Raises
    ------
    ConfigError
        Unknown preset or a bad bandwidth.
    """
    entry = lookup(read_table("sim.reliability", "storage.yaml"), name, "reliability.storage")
    aggregate = entry["aggregate_write"] if aggregate_write is None else aggregate_write
    tier = StorageTier(
        name=name,
        per_node_write_Bps=_bandwidth(entry["per_node_write"], f"storage {name}.per_node_write"),
        aggregate_write_Bps=_bandwidth(aggregate, f"reliability.checkpoint_bandwidth ({name})"),
        survives_node_loss=bool(entry["survives_node_loss"]),
        source=" ".join(str(entry["source"]).split()),
    )
    if math.isinf(tier.bandwidth_Bps(1)):
        raise ConfigError(f"storage {name}: needs a per-node or an aggregate write bandwidth")
    return tier
