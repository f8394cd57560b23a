"""The topology file schema: what a cluster description may say, validated on load.

A topology file (YAML) describes a cluster parametrically::

    name: h100-ib-ndr
    description: 32 DGX H100 on a rail-optimized NDR InfiniBand fat-tree
    gpu: H100-SXM             # catalog name (sim.catalog.gpu_names())
    nodes: 32                 # servers; for rack-scale NVLink systems, NVLink domains
    node:
      gpus: 8
      fabric: nvswitch        # nvswitch | mesh | pcie
      nvlink: nvlink4         # default: the GPU's catalog NVLink kind
      pcie: pcie-gen5         # default: the GPU's catalog PCIe kind
      pcie_switches: 4        # GPUs and NICs spread evenly over them; 0: on the host
      p2p: true               # false: GPUs on host root ports, GPU<->GPU crosses the host
      nvlink_bridges: null    # link kind joining GPU pairs (0,1),(2,3),... (fabric pcie)
      nics: 8
      nic: ib-ndr
    network:                  # omitted or kind none: a single server
      kind: rail-optimized    # rail-optimized | leaf-spine | fat-tree-3tier | none
      link: ib-ndr            # switch-to-switch link kind
      oversubscription: 1.0   # leaf downlink : uplink bandwidth, >= 1
      nodes_per_leaf: 32      # servers under one leaf (per rail when rail-optimized)
      spines: null            # 2-tier: spine count (default: leaf downlink ports)
      routing: null           # ecmp | adaptive (default: adaptive on InfiniBand, else ecmp)
      qps_per_connection: 1   # NCCL_IB_QPS_PER_CONNECTION: flows per connection, each hashed
      pxn: true               # NCCL PXN: reach a rail's NIC over NVLink through its own GPU
      congestion_loss: null   # Ethernet incast loss (sim.network.congestion); null: default

Three-tier fat-trees add ``nodes_per_pod``, ``spines_per_pod``, ``cores_per_plane``,
``core_oversubscription`` and ``rails``. Unknown keys are rejected, naming the key.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sim.errors import TopologyError

__all__ = ["NetworkSpec", "NodeSpec", "TopologySpec", "parse_spec"]

_STRICT = ConfigDict(extra="forbid", strict=False, frozen=True)


class NodeSpec(BaseModel):
    """One server (or one NVLink domain for rack-scale systems such as GB200 NVL72)."""

    model_config = _STRICT
    gpus: int = Field(ge=1)
    fabric: Literal["nvswitch", "mesh", "pcie"] = "pcie"
    nvlink: str | None = None
    pcie: str | None = None
    pcie_switches: int = Field(default=0, ge=0)
    p2p: bool = True
    nvlink_bridges: str | None = None
    nics: int = Field(default=0, ge=0)
    nic: str | None = None
    nic_bandwidth: str | float | None = None


class NetworkSpec(BaseModel):
    """The scale-out fabric between servers."""

    model_config = _STRICT
    kind: Literal["rail-optimized", "leaf-spine", "fat-tree-3tier", "none"] = "none"
    link: str | None = None
    oversubscription: float = Field(default=1.0, ge=1.0)
    nodes_per_leaf: int = Field(default=32, ge=1)
    spines: int | None = Field(default=None, ge=1)
    rails: bool | None = None
    nodes_per_pod: int | None = Field(default=None, ge=1)
    spines_per_pod: int | None = Field(default=None, ge=1)
    cores_per_plane: int = Field(default=2, ge=1)
    core_oversubscription: float = Field(default=1.0, ge=1.0)
    routing: Literal["ecmp", "adaptive"] | None = None
    qps_per_connection: int = Field(default=1, ge=1, le=128)
    pxn: bool = True
    congestion_loss: float | None = Field(default=None, ge=0.0, lt=1.0)


class TopologySpec(BaseModel):
    """A whole cluster description (one topology YAML file)."""

    model_config = _STRICT
    name: str
    description: str = ""
    gpu: str
    nodes: int = Field(default=1, ge=1)
    node: NodeSpec
    network: NetworkSpec = NetworkSpec()

    @property
    def multi_node(self) -> bool:
        """True when the file describes a scale-out fabric (``nodes`` may be overridden)."""
        return self.network.kind != "none"


def _where(loc: tuple[int | str, ...]) -> str:
    # pydantic appends the literal/union branch to the location; keep only field names.
    return ".".join(str(p) for p in loc if not str(p).startswith(("literal[", "function-")))


def _one_line(err: ValidationError, source: str) -> TopologyError:
    e = err.errors()[0]
    key = _where(tuple(e["loc"])) or "(top level)"
    if e["type"] == "extra_forbidden":
        allowed = _allowed_keys(tuple(e["loc"])[:-1])
        return TopologyError(f"{source}: unknown key {key!r}; allowed: {allowed}")
    if e["type"] == "missing":
        return TopologyError(f"{source}: missing required key {key!r}")
    got = e.get("input")
    return TopologyError(f"{source}: {key}: {e['msg']} (got {got!r})")


def _allowed_keys(parent: tuple[int | str, ...]) -> str:
    model: type[BaseModel] = TopologySpec
    if parent and parent[0] == "node":
        model = NodeSpec
    elif parent and parent[0] == "network":
        model = NetworkSpec
    return ", ".join(model.model_fields)


def _check_network(spec: TopologySpec, source: str) -> None:
    net = spec.network
    if net.kind == "none":
        return
    if net.link is None:
        raise TopologyError(f"{source}: network.link: required for network.kind {net.kind!r}")
    if spec.node.nics < 1 or spec.node.nic is None:
        raise TopologyError(
            f"{source}: network.kind {net.kind!r} needs node.nics >= 1 and node.nic (a link kind)"
        )
    three = net.kind == "fat-tree-3tier"
    only3 = ("rails", "nodes_per_pod", "spines_per_pod")
    wrong = [k for k in only3 if not three and getattr(net, k) is not None]
    wrong += ["spines"] if three and net.spines is not None else []
    if wrong:
        where = "other kinds" if three else "kind fat-tree-3tier"
        raise TopologyError(
            f"{source}: network.{wrong[0]}: only for {where} (network.kind is {net.kind!r})"
        )


def _check_node(spec: TopologySpec, source: str) -> None:
    node = spec.node
    if node.fabric == "nvswitch" and node.gpus < 2:
        raise TopologyError(
            f"{source}: node.fabric: nvswitch needs node.gpus >= 2 (got {node.gpus})"
        )
    if node.nvlink_bridges is not None and (node.fabric != "pcie" or node.gpus % 2):
        raise TopologyError(
            f"{source}: node.nvlink_bridges: needs node.fabric pcie and an even node.gpus "
            f"(got fabric {node.fabric!r}, gpus {node.gpus})"
        )
    if node.nics and node.nic is None:
        raise TopologyError(f"{source}: node.nic: required when node.nics > 0 (a link kind)")


def parse_spec(data: Any, source: str = "topology") -> TopologySpec:
    """Validate a topology mapping (parsed YAML) into a :class:`TopologySpec`.

    Parameters
    ----------
    data : Any
        The parsed YAML document.
    source : str
        Where it came from, for messages (preset name or file path).

    Returns
    -------
    TopologySpec

    Raises
    ------
    TopologyError
        One line naming the bad key or value and what is allowed.

    Examples
    --------
    >>> parse_spec({"name": "x", "gpu": "H100-SXM", "node": {"gpus": 8}}).node.fabric
    'pcie'
    """
    if not isinstance(data, dict):
        raise TopologyError(
            f"{source}: expected a mapping of keys (name, gpu, nodes, node, network)"
        )
    try:
        spec = TopologySpec.model_validate(data)
    except ValidationError as e:
        raise _one_line(e, source) from None
    _check_node(spec, source)
    _check_network(spec, source)
    return spec
