"""What hardware measurements ran on, whether a topology contradicts it, and the record
a fitted profile keeps (:class:`sim.profile.Hardware`).

Measurement files name their device as the driver prints it (``NVIDIA H100 80GB HBM3``,
``NVIDIA GeForce RTX 4090``) or ran on a CPU (gloo collectives, ``--device cpu`` compute
and step jobs). :func:`catalog_gpu` maps a device name to the catalog accelerator it is
(``H100-SXM``), or None when it cannot tell; :func:`contradictions` lists the ways a
topology disagrees with the measurements (CPU runs fitted to a GPU cluster, an L40S log
fitted to H100s), which ``calibrate fit`` refuses unless ``--force``.

>>> catalog_gpu("NVIDIA H100 80GB HBM3"), catalog_gpu("NVIDIA H100 PCIe")
('H100-SXM', 'H100-PCIe')
>>> catalog_gpu("a mystery accelerator") is None
True
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from calibrate.measurements import Measurements
from calibrate.model import Point, step_scopes
from sim.catalog import gpu_names
from sim.topology.model import Topology

__all__ = [
    "CPU_ACCELERATORS",
    "catalog_gpu",
    "contradictions",
    "hardware_record",
    "measured_device",
]

#: Catalog accelerators that stand for a CPU host (gloo and ``--device cpu`` runs).
CPU_ACCELERATORS = ("CPU-HOST",)

# Driver device names -> catalog names; first match wins (more specific patterns first).
# Names as torch.cuda.get_device_name / nvidia-smi print them.
_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"GB200", "GB200"),
    (r"\bB200\b", "B200"),
    (r"H200", "H200"),
    (r"H100.*PCIe", "H100-PCIe"),
    (r"H100", "H100-SXM"),
    (r"A100.*PCIE", "A100-PCIe"),
    (r"A100.*40GB", "A100-SXM-40GB"),
    (r"A100", "A100-SXM-80GB"),
    (r"L40S", "L40S"),
    (r"RTX 4090", "RTX-4090"),
    (r"MI300X", "MI300X"),
    (r"V100", "V100"),
    (r"P100", "P100"),
)


def catalog_gpu(device: str) -> str | None:
    """The catalog accelerator a driver's device name denotes, or None if unknown."""
    known = set(gpu_names())
    for pattern, name in _PATTERNS:
        if re.search(pattern, device, flags=re.IGNORECASE):
            return name if name in known else None
    return None


def measured_device(m: Measurements) -> str | None:
    """``"cpu"``, a catalog GPU name, or None (a GPU run whose device is not recognised)."""
    device = m.meta.details.get("device")
    if device == "cpu" or (
        m.kind == "collectives" and m.meta.backend == "gloo" and device != "cuda"
    ):
        return "cpu"
    names = [n.strip() for n in (m.meta.gpu_model or "").split(",") if n.strip()]
    found = {catalog_gpu(n) for n in names} - {None}
    return found.pop() if len(found) == 1 else None


def contradictions(measurements: Sequence[Measurements], topology: Topology) -> list[str]:
    """Ways ``topology`` contradicts the hardware the measurements ran on (empty: none)."""
    out = []
    accel = topology.gpu.name
    for m in measurements:
        device = measured_device(m)
        what = f"{m.meta.source} ({m.kind}"
        what += f", {m.meta.backend})" if m.meta.backend else ")"
        if device == "cpu" and accel not in CPU_ACCELERATORS:
            out.append(f"{what} ran on a CPU, but topology {topology.name!r} has {accel} GPUs "
                       f"(fit CPU runs to {', '.join(CPU_ACCELERATORS)} topologies: cpu-host, cpu-single)")  # fmt: skip
        elif device not in (None, "cpu") and device != accel:
            out.append(f"{what} ran on {device} ({m.meta.gpu_model}), but topology "
                       f"{topology.name!r} has {accel}")  # fmt: skip
        elif m.meta.backend == "nccl" and accel in CPU_ACCELERATORS:
            out.append(f"{what} ran NCCL on GPUs, but topology {topology.name!r} is a CPU host")
    return out


def _links(points: Sequence[Point]) -> dict[str, str]:
    """Link kind per scope whose efficiency the points fit: the kinds of that scope on the
    measured routes (joined with '+' where several)."""
    kinds: dict[str, set[str]] = {}
    for setup in {id(p.setup): p.setup for p in points}.values():
        topo = setup.topology
        scopes = step_scopes(setup)
        for a in setup.group:
            for b in setup.group:
                if a == b:
                    continue
                for i in setup.routes.links(a, b):
                    if topo.link_scope[i] in scopes:
                        kinds.setdefault(topo.link_scope[i], set()).add(topo.link_kind[i])
    return {s: "+".join(sorted(k)) for s, k in sorted(kinds.items())}


def hardware_record(measurements: Sequence[Measurements], topology: Topology,
                    points: Sequence[Point]) -> dict[str, Any]:  # fmt: skip
    """The profile's ``hardware:`` mapping (see :class:`sim.profile.Hardware`)."""
    groups = {id(p.setup): p.setup for p in points}.values()
    gpus = max(
        (s.n for s in groups), default=max((m.meta.world_size for m in measurements), default=1)
    )
    nodes = max((len(set(s.layout.node_of)) for s in groups), default=1)
    backends = sorted({m.meta.backend for m in measurements if m.meta.backend})
    devices = sorted({m.meta.gpu_model for m in measurements if m.meta.gpu_model})
    if not devices:
        devices = sorted({str(m.meta.details["cpu_model"]) for m in measurements
                          if m.meta.details.get("cpu_model")})  # fmt: skip
    record: dict[str, Any] = {"gpu": topology.gpu.name, "links": _links(points), "gpus": gpus,
                              "nodes": nodes}  # fmt: skip
    if backends:
        record["backend"] = "+".join(backends)
    if devices:
        record["device"] = ", ".join(devices)
    return record
