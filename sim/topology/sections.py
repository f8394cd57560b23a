"""The sections of a topology file as pydantic models: a server (:class:`NodeSpec`), a
group of identical servers (:class:`ServerGroup`) and the scale-out fabric
(:class:`NetworkSpec`); :mod:`sim.topology.spec` assembles them into a topology.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from sim.topology.links import LinkRef
from sim.topology.quantities import Bandwidth, Ratio

__all__ = ["SPEC_CONFIG", "NetworkSpec", "NodeSpec", "ServerGroup"]

#: Topology models: unknown keys refused, frozen once read, strict types: a boolean is
#: never a number (``nodes: true`` was 1 node, ``nic_bandwidth: true`` 1 byte/s) and a
#: number never text.
SPEC_CONFIG = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)


class NodeSpec(BaseModel):
    """One server (or one NVLink domain for rack-scale systems such as GB200 NVL72)."""

    model_config = SPEC_CONFIG
    gpus: int = Field(ge=1)
    fabric: Literal["nvswitch", "mesh", "pcie"] = "pcie"
    nvlink: LinkRef | None = None
    pcie: LinkRef | None = None
    pcie_switches: int = Field(default=0, ge=0)
    p2p: bool = True
    nvlink_bridges: LinkRef | None = None
    nics: int = Field(default=0, ge=0)
    nic: LinkRef | None = None
    nic_bandwidth: Bandwidth | None = None
    nic_affinity: list[str] | None = None


class ServerGroup(BaseModel):
    """``count`` identical servers, one entry of ``servers``; ``gpu`` (a catalog name)
    replaces the file's ``gpu`` for these servers (a heterogeneous cluster)."""

    model_config = SPEC_CONFIG
    count: int = Field(ge=1)
    gpu: str | None = None
    node: NodeSpec


class NetworkSpec(BaseModel):
    """The scale-out fabric between servers."""

    model_config = SPEC_CONFIG
    kind: Literal["rail-optimized", "leaf-spine", "fat-tree-3tier", "none"] = "none"
    link: LinkRef | None = None
    oversubscription: Ratio = Field(default=1.0, ge=1.0)
    nodes_per_leaf: int = Field(default=32, ge=1)
    spines: int | None = Field(default=None, ge=1)
    switch: str | None = None
    radix: int | None = Field(default=None, ge=2)
    rails: bool | None = None
    nodes_per_pod: int | None = Field(default=None, ge=1)
    spines_per_pod: int | None = Field(default=None, ge=1)
    cores_per_plane: int = Field(default=2, ge=1)
    core_oversubscription: Ratio = Field(default=1.0, ge=1.0)
    routing: Literal["ecmp", "adaptive"] | None = None
    qps_per_connection: int = Field(default=1, ge=1, le=128)
    pxn: bool = True
    congestion_loss: float | None = Field(default=None, ge=0.0, lt=1.0)
    sharp: bool = False
