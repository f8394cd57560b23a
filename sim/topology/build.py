"""Build a validated :class:`TopologySpec` into a :class:`Topology` graph.

Servers
    Server ``k``'s parts are named ``n<k>.gpu<i>``, ``n<k>.nvswitch``, ``n<k>.pcie<j>``,
    ``n<k>.host``, ``n<k>.nic<j>`` (indices zero-padded, so names sort in rank order)
    and carry ``node=k``. A ``nvswitch`` fabric is one logical non-blocking switch per
    NVLink domain; each GPU links to it at its aggregate NVLink rate. A ``mesh`` fabric
    links every GPU pair directly (e.g. MI300X xGMI). GPUs and NICs spread evenly over
    ``pcie_switches`` PCIe switches under the host (DGX H100: 4 switches, 2 GPUs + 2
    NICs each); with ``p2p: false`` GPUs sit on host root ports so that GPU<->GPU PCIe
    traffic crosses the host. For rack-scale systems (GB200 NVL72) a "server" is the
    whole NVLink domain: ``gpus_per_node = 72``.

Scale-out fabric (see :mod:`sim.topology.fabric`)
    ``rail-optimized``: NIC ``r`` of every server in a unit of ``nodes_per_leaf`` servers
    goes to that unit's rail-``r`` leaf; leaves to spines. ``leaf-spine``: all NICs of a
    server go to its unit's (top-of-rack) leaf. ``fat-tree-3tier``: leaves and spines in
    pods, spines to cores by plane.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import networkx as nx
import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from sim.catalog import LinkSpec, gpu_spec, link_spec
from sim.errors import TopologyError
from sim.topology.fabric import add_fabric, add_link
from sim.topology.model import Topology
from sim.topology.spec import TopologySpec
from sim.units import parse_bandwidth

__all__ = ["build_topology", "check_connected"]


@dataclass(frozen=True)
class _Links:
    """The catalog link kinds one server uses (None where unused)."""

    nvlink: LinkSpec | None
    pcie: LinkSpec
    bridge: LinkSpec | None
    nic: LinkSpec | None


def _kind(name: str, key: str, source: str) -> LinkSpec:
    try:
        spec = link_spec(name)
    except TopologyError as e:
        raise TopologyError(f"{source}: {key}: {e}") from None
    if spec.bandwidth_Bps <= 0:
        raise TopologyError(f"{source}: {key}: link {name!r} has bandwidth <= 0")
    return spec


def _server_links(spec: TopologySpec, source: str) -> _Links:
    gpu = gpu_spec(spec.gpu)
    node = spec.node
    nvlink = None
    if node.fabric in ("nvswitch", "mesh"):
        name = node.nvlink or gpu.nvlink
        if name is None:
            raise TopologyError(
                f"{source}: node.nvlink: GPU {gpu.name!r} has no NVLink; set node.nvlink or "
                "use node.fabric pcie"
            )
        nvlink = _kind(name, "node.nvlink", source)
    return _Links(
        nvlink=nvlink,
        pcie=_kind(node.pcie or gpu.pcie, "node.pcie", source),
        bridge=_kind(node.nvlink_bridges, "node.nvlink_bridges", source)
        if node.nvlink_bridges
        else None,
        nic=_nic(node.nic, node.nic_bandwidth, source) if node.nic else None,
    )


def _nic(name: str, bandwidth: str | float | None, source: str) -> LinkSpec:
    """The NIC link kind, with its line rate overridden by ``node.nic_bandwidth``."""
    kind = _kind(name, "node.nic", source)
    if bandwidth is None:
        return kind
    rate = parse_bandwidth(bandwidth, f"{source}: node.nic_bandwidth")
    sources = {**kind.sources, "bandwidth_Bps": f"node.nic_bandwidth in {source}"}
    return dataclasses.replace(kind, bandwidth_Bps=rate, sources=sources)


def _pad(n: int) -> int:
    return len(str(max(n - 1, 0)))


def _add_server(
    g: nx.DiGraph, k: int, spec: TopologySpec, links: _Links, width: int
) -> tuple[list[str], list[str]]:
    """Add server ``k``; return its GPU names (rank order) and NIC names (rail order)."""
    node = spec.node
    p = f"n{k:0{width}d}"
    host = f"{p}.host"
    g.add_node(host, kind="host", node=k)
    switches = [f"{p}.pcie{j:0{_pad(node.pcie_switches)}d}" for j in range(node.pcie_switches)]
    for sw in switches:
        g.add_node(sw, kind="pcie_switch", node=k)
        add_link(g, sw, host, links.pcie)
    gpus = [f"{p}.gpu{i:0{_pad(node.gpus)}d}" for i in range(node.gpus)]
    for i, name in enumerate(gpus):
        g.add_node(name, kind="gpu", node=k)
        up = switches[i * len(switches) // node.gpus] if switches and node.p2p else host
        add_link(g, name, up, links.pcie)
    _add_gpu_fabric(g, p, k, gpus, links)
    nics = [f"{p}.nic{j:0{_pad(node.nics)}d}" for j in range(node.nics)]
    for j, name in enumerate(nics):
        g.add_node(name, kind="nic", node=k)
        add_link(
            g, name, switches[j * len(switches) // node.nics] if switches else host, links.pcie
        )
    return gpus, nics


def _add_gpu_fabric(g: nx.DiGraph, p: str, k: int, gpus: list[str], links: _Links) -> None:
    """NVSwitch, all-to-all mesh or NVLink bridges between the server's GPUs."""
    if links.nvlink is not None and len(gpus) > 1:
        if g.graph["fabric"] == "nvswitch":
            nvs = f"{p}.nvswitch"
            g.add_node(nvs, kind="nvswitch", node=k)
            for name in gpus:
                add_link(g, name, nvs, links.nvlink)
        else:
            for i, a in enumerate(gpus):
                for b in gpus[i + 1 :]:
                    add_link(g, a, b, links.nvlink)
    if links.bridge is not None:
        for a, b in zip(gpus[::2], gpus[1::2], strict=True):
            add_link(g, a, b, links.bridge)


def check_connected(g: nx.DiGraph, gpus: tuple[str, ...], name: str) -> None:
    """Raise TopologyError unless every GPU reaches every other without crossing a GPU.

    Links are bidirectional, so two GPUs are connected when they touch a common
    connected component of the graph without GPUs, or are linked directly.

    Parameters
    ----------
    g : networkx.DiGraph
        The built graph.
    gpus : tuple[str, ...]
        GPU node names.
    name : str
        Topology name for the message.
    """
    if len(gpus) < 2:
        return
    gpu_set = set(gpus)
    others = [v for v in g.nodes if v not in gpu_set]
    index = {v: i for i, v in enumerate(others)}
    pairs = [(index[u], index[v]) for u, v in g.edges if u in index and v in index]
    ij = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    n = len(others)
    adj = coo_matrix((np.ones(len(ij)), (ij[:, 0], ij[:, 1])), shape=(n, n))
    _, label = connected_components(adj, directed=True, connection="weak")
    touch = {
        u: frozenset(int(label[index[v]]) for v in g.successors(u) if v in index) for u in gpus
    }
    if frozenset.intersection(*touch.values()):
        return
    groups: dict[frozenset[int], str] = {}
    for u in gpus:
        groups.setdefault(touch[u], u)
    for a, u in groups.items():
        for b, v in groups.items():
            if not a & b and not g.has_edge(u, v):
                raise TopologyError(f"topology {name!r} is disconnected: no route {u} -> {v}")


def build_topology(spec: TopologySpec, *, seed: int = 0, source: str | None = None) -> Topology:
    """Build the cluster graph described by ``spec``.

    Parameters
    ----------
    spec : TopologySpec
        A validated description (see :func:`sim.topology.spec.parse_spec`).
    seed : int
        Seed of the ECMP hash salt.
    source : str, optional
        Where the spec came from, for messages (default: ``spec.name``).

    Returns
    -------
    Topology
        GPUs in rank order (server-major); capacities in bytes/s, latencies in seconds.

    Raises
    ------
    TopologyError
        Unknown GPU or link kind, or a disconnected result.

    Examples
    --------
    >>> from sim.topology.spec import parse_spec
    >>> s = parse_spec({"name": "x", "gpu": "H100-SXM", "node": {"gpus": 8, "fabric": "nvswitch"}})
    >>> build_topology(s).num_gpus
    8
    """
    source = source or spec.name
    try:
        gpu = gpu_spec(spec.gpu)
    except TopologyError as e:
        raise TopologyError(f"{source}: gpu: {e}") from None
    links = _server_links(spec, source)
    g = nx.DiGraph(fabric=spec.node.fabric, p2p=spec.node.p2p)
    width = _pad(spec.nodes)
    all_gpus: list[str] = []
    nics: list[list[str]] = []
    for k in range(spec.nodes):
        gpus, server_nics = _add_server(g, k, spec, links, width)
        all_gpus.extend(gpus)
        nics.append(server_nics)
    if spec.network.kind != "none":
        assert links.nic is not None  # parse_spec checked node.nic
        net_link = _kind(str(spec.network.link), "network.link", source)
        add_fabric(g, spec.network, nics, links.nic, net_link, source)
    check_connected(g, tuple(all_gpus), spec.name)
    net = spec.network
    transport = links.nic.transport if links.nic is not None else "pcie"
    routing = net.routing or ("adaptive" if transport == "ib" else "ecmp")
    return Topology(
        name=spec.name,
        graph=g,
        gpus=tuple(all_gpus),
        gpu=gpu,
        nodes=spec.nodes,
        gpus_per_node=spec.node.gpus,
        seed=seed,
        description=spec.description,
        routing=routing,
        qps=net.qps_per_connection,
        pxn=net.pxn,
        congestion_loss=net.congestion_loss,
    )
