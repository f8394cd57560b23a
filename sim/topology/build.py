"""Build a validated :class:`TopologySpec` into a :class:`Topology` graph.

In order: the servers (:mod:`sim.topology.server`), the scale-out fabric when
``network.kind`` is not ``none`` (:mod:`sim.topology.fabric`), the explicit ``graph``
(:mod:`sim.topology.graph`), then the ``overrides`` (:mod:`sim.topology.overrides`);
last, every GPU must reach every other.

Scale-out fabric
    ``rail-optimized``: NIC ``r`` of every server in a unit of ``nodes_per_leaf`` servers
    goes to that unit's rail-``r`` leaf; leaves to spines. ``leaf-spine``: all NICs of a
    server go to its unit's (top-of-rack) leaf. ``fat-tree-3tier``: leaves and spines in
    pods, spines to cores by plane. Where servers differ (``servers``), leaf ports and
    uplinks are sized for the fastest NIC and each NIC<->leaf link runs at its own NIC's
    rate; rails number up to the largest NIC count.
"""

from __future__ import annotations

import numpy as np

from sim.catalog import GpuSpec, LinkSpec, gpu_spec
from sim.errors import TopologyError
from sim.topology.bfs import weak_components
from sim.topology.cabling import FabricPlan, plan_fabric
from sim.topology.digraph import DiGraph
from sim.topology.fabric import add_fabric, add_link
from sim.topology.graph import add_graph
from sim.topology.links import check_role, link_from_ref
from sim.topology.model import Topology
from sim.topology.overrides import apply_overrides
from sim.topology.parts import parts_catalog, switch_for
from sim.topology.server import ServerLinks, add_server, server_links
from sim.topology.spec import NodeSpec, TopologySpec

__all__ = ["build_topology", "check_connected"]


def check_connected(g: DiGraph, gpus: tuple[str, ...], name: str) -> None:
    """Raise TopologyError unless every GPU reaches every other without crossing a GPU.

    Links are bidirectional, so two GPUs are connected when they touch a common
    connected component of the graph without GPUs, or are linked directly.

    Parameters
    ----------
    g : DiGraph
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
    label = weak_components(len(others), ij[:, 0], ij[:, 1])
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


def _servers(
    g: DiGraph, servers: list[tuple[str, NodeSpec]], gpus_of: list[GpuSpec], source: str
) -> tuple[list[str], list[list[str]], list[LinkSpec | None]]:
    """Add the servers built from ``node``/``servers`` (server ``k`` holds GPUs of model
    ``gpus_of[k]``); return GPUs, NICs, NIC links."""
    resolved: dict[tuple[int, str], ServerLinks] = {}
    width = len(str(max(len(servers) - 1, 0)))
    gpus: list[str] = []
    nics: list[list[str]] = []
    nic_links: list[LinkSpec | None] = []
    for k, ((key, node), gpu) in enumerate(zip(servers, gpus_of, strict=True)):
        links = resolved.get((id(node), gpu.name))
        if links is None:
            links = resolved[(id(node), gpu.name)] = server_links(node, gpu, key, source)
        server_gpus, server_nics = add_server(g, k, node, links, width)
        gpus.extend(server_gpus)
        nics.append(server_nics)
        nic_links.append(links.nic)
    return gpus, nics, nic_links


def _server_gpus(spec: TopologySpec, primary: GpuSpec, source: str) -> list[GpuSpec]:
    """The GPU model of each server: its group's ``gpu``, else the file's."""
    out: list[GpuSpec] = []
    named = {primary.name: primary}
    groups = spec.servers or []
    for i, group in enumerate(groups):
        name = group.gpu or primary.name
        if name not in named:
            try:
                named[name] = gpu_spec(name)
            except TopologyError as e:
                raise TopologyError(f"{source}: servers[{i}].gpu: {e}") from None
        out += [named[name]] * group.count
    return out or [primary] * len(spec.server_nodes())


def _scale_out(
    g: DiGraph,
    spec: TopologySpec,
    nics: list[list[str]],
    nic_links: list[LinkSpec | None],
    source: str,
) -> FabricPlan:
    """Add the parametric fabric as planned (returned); NIC<->leaf links at each server's
    own NIC rate."""
    assert spec.network.link is not None  # parse_spec checked it
    fastest = max((x for x in nic_links if x is not None), key=lambda x: x.bandwidth_Bps)
    net_link = link_from_ref(spec.network.link, "network.link", source)
    check_role(net_link, "switch-to-switch", "network.link", source)  # NICs: server_links
    for key, used in [("network.link", net_link), *(("node.nic", x) for x in nic_links if x)]:
        if used.scope != "net":  # NVLink or PCIe cannot be cabled to a leaf switch
            raise TopologyError(
                f"{source}: {key}: {used.name!r} is a {used.scope} link; the scale-out "
                "network needs a network link (InfiniBand, RoCE, Ethernet, EFA), e.g. ib-ndr"
            )
    switch = switch_for(parts_catalog(), net_link, spec.network.switch, spec.network.radix)
    plan = plan_fabric(spec.network, [len(x) for x in nics], fastest.bandwidth_Bps, net_link,
                       switch, source)  # fmt: skip
    add_fabric(g, plan, spec.network, nics, fastest, net_link)
    for server, link in zip(nics, nic_links, strict=True):
        if link is None or link == fastest:
            continue
        for nic in server:
            for leaf in list(g.successors(nic)):
                if g.nodes[leaf].get("node") is None:
                    add_link(g, nic, leaf, link)
    return plan


def _explicit_gpus(g: DiGraph) -> list[str]:
    """GPUs of an explicit graph in rank order: by server, then as listed."""
    found = [(d["node"], i, v) for i, (v, d) in enumerate(g.nodes(data=True)) if d["kind"] == "gpu"]
    return [v for _, _, v in sorted(found)]


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
        Unknown GPU or link kind, a bad graph or override, or a disconnected result.

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
    servers = spec.server_nodes()
    first: NodeSpec | None = servers[0][1] if servers else None
    g = DiGraph(fabric=first.fabric if first else "graph", p2p=first.p2p if first else True)
    per_server = _server_gpus(spec, gpu, source)
    gpus, nics, nic_links = _servers(g, servers, per_server, source)
    plan = None
    if spec.network.kind != "none":
        plan = _scale_out(g, spec, nics, nic_links, source)
    if spec.graph is not None:
        add_graph(g, spec.graph, source)
        gpus = gpus or _explicit_gpus(g)
    apply_overrides(g, spec.overrides, source)
    check_connected(g, tuple(gpus), spec.name)
    net = spec.network
    return Topology(
        name=spec.name,
        graph=g,
        gpus=tuple(gpus),
        gpu=gpu,
        nodes=spec.nodes,
        gpus_per_node=len(gpus) // spec.nodes,
        seed=seed,
        description=spec.description,
        routing=net.routing or _default_routing(g),
        qps=net.qps_per_connection,
        pxn=net.pxn,
        congestion_loss=net.congestion_loss,
        sharp=net.sharp,
        gpu_models=_gpu_models(per_server, len(gpus) // spec.nodes, len(gpus)),
        fabric=plan,
    )


def _gpu_models(per_server: list[GpuSpec], per_node: int, gpus: int) -> tuple[GpuSpec, ...]:
    """One GPU model per GPU in rank order when servers differ; empty when every GPU is
    the same model (the homogeneous cluster of today, built exactly as before)."""
    if len({g.name for g in per_server}) <= 1:
        return ()
    out = tuple(g for g in per_server for _ in range(per_node))
    assert len(out) == gpus, (len(out), gpus)
    return out


def _default_routing(g: DiGraph) -> str:
    """``adaptive`` when every network link is InfiniBand (NCCL enables IB adaptive
    routing by default: NCCL_IB_AR_THRESHOLD), else ``ecmp``."""
    transports = {d.get("transport") for _, _, d in g.edges(data=True) if d.get("scope") == "net"}
    return "adaptive" if transports == {"ib"} else "ecmp"
