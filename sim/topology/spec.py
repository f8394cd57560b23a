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
      nic_affinity: null      # where each NIC sits: pcie<j> | gpu<i> | host (one per NIC)
    network:                  # omitted or kind none: a single server
      kind: rail-optimized    # rail-optimized | leaf-spine | fat-tree-3tier | none
      link: ib-ndr            # switch-to-switch link kind
      oversubscription: 1.0   # leaf downlink : uplink bandwidth, >= 1 (2.0, 2 or "2:1")
      nodes_per_leaf: 32      # servers under one leaf (per rail when rail-optimized)
      spines: null            # 2-tier: spine count (default: one per leaf uplink)
      switch: null            # parts-catalog switch (default: the link kind's)
      radix: null             # ports per switch (default: the switch's)
      routing: null           # ecmp | adaptive (default: adaptive on InfiniBand, else ecmp)
      qps_per_connection: 1   # NCCL_IB_QPS_PER_CONNECTION: flows per connection, each hashed
      pxn: true               # NCCL PXN: reach a rail's NIC over NVLink through its own GPU
      congestion_loss: null   # Ethernet incast loss (sim.topology.congestion); null: default
      sharp: false            # switches reduce in-network (InfiniBand SHARP: NCCL CollNet)

Three-tier fat-trees add ``nodes_per_pod``, ``spines_per_pod``, ``cores_per_plane``,
``core_oversubscription`` and ``rails``. Unknown keys are rejected, naming the key; so
are bandwidths and times without a unit. How the fabric is cabled from these (cables at
the link's line rate, spines and ports checked): :mod:`sim.topology.cabling`.

Every link field takes a catalog name or an inline link (:mod:`sim.topology.links`).
Servers that differ are ``servers: [{count: 16, node: {...}}, ...]`` in place of
``nodes``/``node`` (same GPU count in each; the fabric's switch ports are sized for the
fastest NIC); a group's ``gpu`` gives its servers another GPU model (a heterogeneous
cluster, :attr:`sim.topology.model.Topology.gpu_models`). ``graph`` writes nodes and
edges out (:mod:`sim.topology.graph`) and ``overrides`` change chosen links after the
build (:mod:`sim.topology.overrides`).
docs/topology-format.md describes every form with examples.
"""

from __future__ import annotations

import re
import types
import typing
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from sim.errors import TopologyError
from sim.topology.graph import GraphSpec, check_nodes
from sim.topology.links import UNION_TAGS
from sim.topology.overrides import Override, check_overrides
from sim.topology.sections import SPEC_CONFIG, NetworkSpec, NodeSpec, ServerGroup

__all__ = ["MAX_GPUS", "NetworkSpec", "NodeSpec", "ServerGroup", "TopologySpec", "parse_spec"]

#: Most GPUs of one topology (servers x GPUs per server): above the 16,384 to 65,536-GPU
#: clusters the simulator targets, low enough to refuse a typo (``nodes: 1000000``) before
#: building a graph for hours.
MAX_GPUS = 131_072


class TopologySpec(BaseModel):
    """A whole cluster description (one topology YAML file).

    After :func:`parse_spec`, ``nodes`` is the server count of every form.
    """

    model_config = SPEC_CONFIG
    name: str
    description: str = ""
    gpu: str
    nodes: int = Field(default=1, ge=1)
    node: NodeSpec | None = None
    servers: list[ServerGroup] | None = Field(default=None, min_length=1)
    network: NetworkSpec = NetworkSpec()
    graph: GraphSpec | None = None
    overrides: list[Override] = []

    @property
    def multi_node(self) -> bool:
        """True when the file describes a scale-out fabric (``nodes`` may be overridden)."""
        return self.network.kind != "none" and self.servers is None and self.graph is None

    @property
    def gpus_per_node(self) -> int:
        """GPUs in each server (the same in every one), whichever form the file uses."""
        if self.node is not None:
            return self.node.gpus
        if self.servers is not None:
            return self.servers[0].node.gpus
        assert self.graph is not None  # parse_spec checked one form is given
        return sum(n.kind == "gpu" for n in self.graph.nodes) // self.nodes

    def server_nodes(self) -> list[tuple[str, NodeSpec]]:
        """(file key, description) of each server built from ``node`` or ``servers``."""
        if self.servers is not None:
            return [(f"servers[{i}].node", s.node) for i, s in enumerate(self.servers)
                    for _ in range(s.count)]  # fmt: skip
        return [("node", self.node)] * self.nodes if self.node is not None else []

    def server_gpus(self) -> list[str]:
        """Catalog GPU name of each server built from ``node`` or ``servers`` (a group's
        ``gpu``, else the file's)."""
        if self.servers is not None:
            return [s.gpu or self.gpu for s in self.servers for _ in range(s.count)]
        return [self.gpu] * len(self.server_nodes())


def _where(loc: tuple[int | str, ...]) -> str:
    # pydantic appends the literal/union branch to the location; keep only field names.
    parts = [p for p in loc if not str(p).startswith(("literal[", "function-"))]
    parts = [p for p in parts if p not in UNION_TAGS]
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out.lstrip(".")


def _one_line(err: ValidationError, source: str) -> TopologyError:
    e = err.errors()[0]
    key = _where(tuple(e["loc"])) or "(top level)"
    if e["type"] == "extra_forbidden":
        allowed = ", ".join(_model_at(tuple(e["loc"])[:-1]).model_fields)
        return TopologyError(f"{source}: unknown key {key!r}; allowed: {allowed}")
    if e["type"] == "missing":
        return TopologyError(f"{source}: missing required key {key!r}")
    got = e.get("input")
    msg = e["msg"].removeprefix("Value error, ")
    return TopologyError(f"{source}: {key}: {msg} (got {got!r})")


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside a field annotation (through Optional, list, union)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _model_in(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, list):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None


def _model_at(parent: tuple[int | str, ...]) -> type[BaseModel]:
    """The model holding the key at ``parent + (key,)``."""
    model: type[BaseModel] = TopologySpec
    for p in parent:
        field = model.model_fields.get(str(p))
        inner = _model_in(field.annotation) if field is not None else None
        model = inner or model
    return model


def _check_network(spec: TopologySpec, source: str) -> None:
    net = spec.network
    if net.kind == "none":
        return
    if net.link is None:
        raise TopologyError(f"{source}: network.link: required for network.kind {net.kind!r}")
    for key, node in dict(spec.server_nodes()).items():
        if node.nics < 1 or node.nic is None:
            raise TopologyError(
                f"{source}: network.kind {net.kind!r} needs {key}.nics >= 1 and {key}.nic "
                "(a link kind)"
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


def _check_node(node: NodeSpec, key: str, source: str) -> None:
    if node.fabric == "nvswitch" and node.gpus < 2:
        raise TopologyError(
            f"{source}: {key}.fabric: nvswitch needs {key}.gpus >= 2 (got {node.gpus})"
        )
    if node.nvlink_bridges is not None and (node.fabric != "pcie" or node.gpus % 2):
        raise TopologyError(
            f"{source}: {key}.nvlink_bridges: needs fabric pcie and an even gpus "
            f"(got fabric {node.fabric!r}, gpus {node.gpus})"
        )
    if node.nics and node.nic is None:
        raise TopologyError(f"{source}: {key}.nic: required when nics > 0 (a link kind)")
    if node.nic_bandwidth is not None and getattr(node.nic, "bandwidth", None) is not None:
        raise TopologyError(
            f"{source}: {key}.nic_bandwidth: {key}.nic gives a bandwidth already; give one"
        )
    if node.nic_affinity is not None:
        _check_affinity(node, key, source)


def _check_affinity(node: NodeSpec, key: str, source: str) -> None:
    assert node.nic_affinity is not None
    if len(node.nic_affinity) != node.nics:
        raise TopologyError(
            f"{source}: {key}.nic_affinity: one entry per NIC ({node.nics}), "
            f"got {len(node.nic_affinity)}"
        )
    allowed = ["host", f"gpu0..gpu{node.gpus - 1}"]
    if node.pcie_switches:
        allowed.append(f"pcie0..pcie{node.pcie_switches - 1}")
    for j, place in enumerate(node.nic_affinity):
        m = re.fullmatch(r"host|pcie(\d+)|gpu(\d+)", place)
        ok = m is not None and (
            (m.group(1) is None or int(m.group(1)) < node.pcie_switches)
            and (m.group(2) is None or int(m.group(2)) < node.gpus)
        )
        if not ok:
            raise TopologyError(
                f"{source}: {key}.nic_affinity[{j}]: {place!r} not allowed; "
                f"allowed: {', '.join(allowed)}"
            )


def _check_servers(data: dict[str, Any], spec: TopologySpec, source: str) -> TopologySpec:
    """Check which of node / servers / graph are given; return ``spec`` with ``nodes`` set."""
    if spec.node is not None and spec.servers is not None:
        raise TopologyError(f"{source}: servers: give node (with nodes) or servers, not both")
    built = spec.node is not None or spec.servers is not None
    in_graph = check_nodes(spec.graph, built, source) if spec.graph is not None else 0
    if spec.node is not None:
        return spec
    if spec.servers is not None:
        gpus = [s.node.gpus for s in spec.servers]
        odd = next((i for i, n in enumerate(gpus) if n != gpus[0]), None)
        if odd is not None:
            raise TopologyError(
                f"{source}: servers[{odd}].node.gpus: every server needs the same GPU count "
                f"(servers[0] has {gpus[0]}, got {gpus[odd]})"
            )
        count = sum(s.count for s in spec.servers)
    elif spec.graph is None:
        raise TopologyError(f"{source}: missing required key 'node' (or servers, or graph)")
    elif in_graph == 0:
        raise TopologyError(f"{source}: graph.nodes: no GPU (give GPUs with a server index)")
    else:
        count = in_graph
    if "nodes" in data and data["nodes"] != count:
        raise TopologyError(
            f"{source}: nodes: {data['nodes']!r} but the file describes {count} servers; "
            "leave nodes out"
        )
    return spec.model_copy(update={"nodes": count})


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
        With ``nodes`` the server count, whichever form the file uses.

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
    spec = _check_servers(data, spec, source)
    for key, node in dict(spec.server_nodes()).items():
        _check_node(node, key, source)
    _check_network(spec, source)
    check_overrides(spec.overrides, source)
    return spec
