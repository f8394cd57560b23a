"""Hardware catalog: GPUs and link kinds, loaded from YAML under ``topologies/catalog/``.

Every value in the catalog names its source (a datasheet or a measurement). Values are
converted to SI at load time: FLOP/s, bytes, bytes/s, seconds, watts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from sim.errors import ConfigError, TopologyError
from sim.files import load_shipped_yaml
from sim.units import parse_bandwidth, parse_bytes, parse_flops, parse_time

__all__ = [
    "TRANSPORTS",
    "GpuSpec",
    "LinkSpec",
    "gpu_names",
    "gpu_spec",
    "link_names",
    "link_spec",
]


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
        How bytes cross it: ``"nvlink"``, ``"pcie"``, ``"ib"`` (InfiniBand verbs),
        ``"roce"`` (RoCEv2), ``"efa"`` (AWS EFA, SRD), ``"tcp"`` (NCCL's socket
        transport), ``"tcpx"`` / ``"tcpxo"`` (Google's GPUDirect-TCPX/TCPXO). Transport
        parameters (efficiency, socket limits) are in the collective parameters.
    overhead_s : float
        Per-message software and NIC overhead of a network link kind, seconds, charged
        once per transfer on the sending NIC's hop (0 for NVLink and PCIe).
    sources : dict[str, str]
        Field name -> where the value comes from.
    """

    name: str
    bandwidth_Bps: float
    latency_s: float
    scope: str
    transport: str
    sources: dict[str, str] = field(default_factory=dict)
    overhead_s: float = 0.0


_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")
_SCOPES = ("nvlink", "pcie", "net")
TRANSPORTS = ("nvlink", "pcie", "ib", "roce", "efa", "tcp", "tcpx", "tcpxo")
# Classifications, not measured values: no source needed.
_UNSOURCED = frozenset({"sources", "scope", "transport"})


class _GpuEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    peak_flops: dict[str, str]
    hbm: str
    hbm_bandwidth: str
    tdp: str
    nvlink: str | None
    pcie: str
    sources: dict[str, str]


class _LinkEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    bandwidth: str
    latency: str
    scope: str
    transport: str
    overhead: str | None = None
    sources: dict[str, str]


def _read_yaml(filename: str) -> dict[str, Any]:
    """Read ``topologies/catalog/<filename>`` as a mapping (works from an installed wheel)."""
    text = resources.files("topologies.catalog").joinpath(filename).read_text(encoding="utf-8")
    data = load_shipped_yaml(text, f"catalog {filename}")
    if not isinstance(data, dict):
        raise TopologyError(f"catalog {filename}: expected a mapping of names to entries")
    return data


def _entry(
    model: type[BaseModel], name: str, raw: object, filename: str,
    unsourced: frozenset[str] = _UNSOURCED,
) -> Any:  # fmt: skip
    """Validate one catalog entry; errors become one-line TopologyError naming the key.

    Every field except ``unsourced`` ones must have an entry in its ``sources``.
    """
    try:
        entry = model.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        raise TopologyError(f"catalog {filename}: {name}.{key}: {err['msg']}") from None
    fields = {k for k in type(entry).model_fields if getattr(entry, k) is not None} - unsourced
    missing = sorted(fields - set(getattr(entry, "sources", {})))
    if missing:
        raise TopologyError(f"catalog {filename}: {name}.sources lacks {', '.join(missing)}")
    return entry


def _parse_watts(text: str, what: str) -> float:
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)\s*W", text.strip())
    if not m or float(m.group(1)) <= 0:
        raise TopologyError(f"{what}: cannot read {text!r} as power; write e.g. 700W")
    return float(m.group(1))


def _gpu_from(name: str, e: _GpuEntry) -> GpuSpec:
    bad = sorted(set(e.peak_flops) - set(_DTYPES))
    if bad:
        raise TopologyError(
            f"catalog gpus.yaml: {name}.peak_flops.{bad[0]}: unknown dtype; "
            f"allowed: {', '.join(_DTYPES)}"
        )
    flops = {k: parse_flops(v, f"{name}.peak_flops.{k}") for k, v in e.peak_flops.items()}
    return GpuSpec(
        name=name,
        peak_flops=flops,
        hbm_bytes=parse_bytes(e.hbm, f"{name}.hbm"),
        hbm_Bps=parse_bandwidth(e.hbm_bandwidth, f"{name}.hbm_bandwidth"),
        tdp_w=_parse_watts(e.tdp, f"{name}.tdp"),
        nvlink=e.nvlink,
        pcie=e.pcie,
        sources=dict(e.sources),
    )


def _link_from(name: str, e: _LinkEntry) -> LinkSpec:
    for key, value, allowed in (
        ("scope", e.scope, _SCOPES),
        ("transport", e.transport, TRANSPORTS),
    ):
        if value not in allowed:
            raise TopologyError(
                f"catalog links.yaml: {name}.{key}: {value!r} not allowed; "
                f"allowed: {', '.join(allowed)}"
            )
    return LinkSpec(
        name=name,
        bandwidth_Bps=parse_bandwidth(e.bandwidth, f"{name}.bandwidth"),
        latency_s=parse_time(e.latency, f"{name}.latency"),
        scope=e.scope,
        transport=e.transport,
        sources=dict(e.sources),
        overhead_s=parse_time(e.overhead, f"{name}.overhead") if e.overhead else 0.0,
    )


@cache
def _links() -> dict[str, LinkSpec]:
    raw = _read_yaml("links.yaml")
    try:
        return {
            str(n): _link_from(str(n), _entry(_LinkEntry, str(n), v, "links.yaml"))
            for n, v in raw.items()
        }
    except ConfigError as e:
        raise TopologyError(f"catalog links.yaml: {e}") from None


@cache
def _gpus() -> dict[str, GpuSpec]:
    raw = _read_yaml("gpus.yaml")
    try:
        gpus = {
            str(n): _gpu_from(str(n), _entry(_GpuEntry, str(n), v, "gpus.yaml"))
            for n, v in raw.items()
        }
    except ConfigError as e:
        raise TopologyError(f"catalog gpus.yaml: {e}") from None
    links = _links()
    for g in gpus.values():
        for key, kind in (("nvlink", g.nvlink), ("pcie", g.pcie)):
            if kind is not None and kind not in links:
                raise TopologyError(
                    f"catalog gpus.yaml: {g.name}.{key}: unknown link kind {kind!r}"
                )
    return gpus


def gpu_spec(name: str) -> GpuSpec:
    """Return the catalog entry for GPU ``name``.

    Parameters
    ----------
    name : str
        Catalog name, e.g. ``"H100-SXM"`` (see :func:`gpu_names`).

    Returns
    -------
    GpuSpec
        Values in SI units: FLOP/s, bytes, bytes/s, watts.

    Raises
    ------
    TopologyError
        Unknown name; the message lists the known ones.

    Examples
    --------
    >>> gpu_spec("H100-SXM").peak_flops["bf16"]
    989400000000000.0
    >>> gpu_spec("H100-SXM").hbm_Bps
    3350000000000.0
    """
    gpus = _gpus()
    if name not in gpus:
        raise TopologyError(f"unknown GPU {name!r}; known: {', '.join(sorted(gpus))}")
    return gpus[name]


def gpu_names() -> list[str]:
    """Sorted catalog GPU names.

    >>> "H100-SXM" in gpu_names()
    True
    """
    return sorted(_gpus())


def link_spec(name: str) -> LinkSpec:
    """Return the catalog entry for link kind ``name`` (per-direction values, SI units).

    Parameters
    ----------
    name : str
        Catalog name, e.g. ``"ib-ndr"`` (see :func:`link_names`).

    Returns
    -------
    LinkSpec
        ``bandwidth_Bps`` in bytes/s per direction, ``latency_s`` in seconds per hop.

    Raises
    ------
    TopologyError
        Unknown name; the message lists the known ones.

    Examples
    --------
    >>> link_spec("ib-ndr").bandwidth_Bps  # 400Gb/s
    50000000000.0
    """
    links = _links()
    if name not in links:
        raise TopologyError(f"unknown link kind {name!r}; known: {', '.join(sorted(links))}")
    return links[name]


def link_names() -> list[str]:
    """Sorted catalog link-kind names.

    >>> "nvlink4" in link_names()
    True
    """
    return sorted(_links())
