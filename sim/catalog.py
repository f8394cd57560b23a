"""Hardware catalog: GPUs and link kinds, loaded from YAML under ``topologies/catalog/``.

Every value in the catalog names its source (a datasheet or a measurement). Values are
converted to SI at load time: FLOP/s, bytes, bytes/s, seconds, watts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["GpuSpec", "LinkSpec", "gpu_spec", "gpu_names", "link_spec", "link_names"]


@dataclass(frozen=True)
class GpuSpec:
    """One accelerator model.

    Attributes
    ----------
    name : str
        Catalog name, e.g. ``"H100-SXM"``.
    peak_flops : dict[str, float]
        Dense peak FLOP/s per dtype: keys among ``fp32``, ``tf32``, ``bf16``, ``fp16``,
        ``fp8`` (``fp8`` absent where the hardware has none).
    hbm_bytes : float
        Device memory capacity in bytes.
    hbm_Bps : float
        Device memory bandwidth in bytes/s.
    tdp_w : float
        Board power in watts.
    nvlink : str | None
        Link kind of the GPU's NVLink/xGMI attachment (per GPU, aggregate), or None.
    pcie : str
        Link kind of the host attachment, e.g. ``"pcie-gen5"``.
    sources : dict[str, str]
        Field name -> where the value comes from.
    """

    name: str
    peak_flops: dict[str, float]
    hbm_bytes: float
    hbm_Bps: float
    tdp_w: float
    nvlink: str | None
    pcie: str
    sources: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LinkSpec:
    """One link kind (per direction).

    Attributes
    ----------
    name : str
        Catalog name, e.g. ``"nvlink4"``, ``"pcie-gen5"``, ``"ib-ndr"``, ``"roce-400g"``.
    bandwidth_Bps : float
        Line rate per direction in bytes/s.
    latency_s : float
        One-way latency of one hop over this link, seconds.
    scope : str
        Class for parameters and statistics: ``"nvlink"``, ``"pcie"`` or ``"net"``.
    transport : str
        ``"nvlink"``, ``"pcie"``, ``"ib"``, ``"roce"`` or ``"tcp"``.
    sources : dict[str, str]
        Field name -> where the value comes from.
    """

    name: str
    bandwidth_Bps: float
    latency_s: float
    scope: str
    transport: str
    sources: dict[str, str] = field(default_factory=dict)


def gpu_spec(name: str) -> GpuSpec:
    """Return the catalog entry for GPU ``name``; unknown names raise TopologyError listing known ones."""
    raise NotImplementedError  # implemented with the catalog YAML


def gpu_names() -> list[str]:
    """Sorted catalog GPU names."""
    raise NotImplementedError


def link_spec(name: str) -> LinkSpec:
    """Return the catalog entry for link kind ``name``; unknown names raise TopologyError."""
    raise NotImplementedError


def link_names() -> list[str]:
    """Sorted catalog link-kind names."""
    raise NotImplementedError
