"""One server's parts and links, from its ``node`` description.

Server ``k``'s parts are named ``n<k>.gpu<i>``, ``n<k>.nvswitch``, ``n<k>.pcie<j>``,
``n<k>.host``, ``n<k>.nic<j>`` (indices zero-padded, so names sort in rank order) and
carry ``node=k``. A ``nvswitch`` fabric is one logical non-blocking switch per NVLink
domain; each GPU links to it at its aggregate NVLink rate. A ``mesh`` fabric links
every GPU pair directly (e.g. MI300X xGMI). GPUs spread evenly over ``pcie_switches``
PCIe switches under the host (DGX H100: 4 switches, 2 GPUs + 2 NICs each); with
``p2p: false`` GPUs sit on host root ports so that GPU<->GPU PCIe traffic crosses the
host. NICs spread evenly over the switches too, unless ``nic_affinity`` places each:
``pcie<j>`` (on switch ``j``), ``gpu<i>`` (where GPU ``i`` attaches: its switch, or the
host) or ``host`` (a host root port). For rack-scale systems (GB200 NVL72) a "server"
is the whole NVLink domain.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.catalog import GpuSpec, LinkSpec
from sim.errors import TopologyError
from sim.topology.digraph import DiGraph
from sim.topology.fabric import add_link
from sim.topology.links import InlineLink, check_role, link_from_ref, with_bandwidth
from sim.topology.spec import NodeSpec
from sim.units import parse_bandwidth

__all__ = ["ServerLinks", "add_server", "server_links"]


@dataclass(frozen=True)
class ServerLinks:
    """The link kinds one server uses (None where unused)."""

    nvlink: LinkSpec | None
    pcie: LinkSpec
    bridge: LinkSpec | None
    nic: LinkSpec | None


def server_links(node: NodeSpec, gpu: GpuSpec, key: str, where: str) -> ServerLinks:
    """Resolve the link fields of ``node`` (``key``: its place in the file, e.g. ``node``).

    Raises
    ------
    TopologyError
        Unknown kind, bad inline link, or NVLink asked of a GPU without one.
    """
    nvlink = None
    if node.fabric in ("nvswitch", "mesh"):
        ref = node.nvlink or gpu.nvlink
        if ref is None:
            raise TopologyError(
                f"{where}: {key}.nvlink: GPU {gpu.name!r} has no NVLink; set {key}.nvlink or "
                "use fabric pcie"
            )
        nvlink = _role(ref, "scale-up fabric", f"{key}.nvlink", where)
    bridge = node.nvlink_bridges
    return ServerLinks(
        nvlink=nvlink,
        pcie=_role(node.pcie or gpu.pcie, "PCIe", f"{key}.pcie", where),
        bridge=_role(bridge, "scale-up fabric", f"{key}.nvlink_bridges", where) if bridge else None,
        nic=_nic(node, key, where) if node.nic is not None else None,
    )


def _role(ref: str | InlineLink, role: str, key: str, where: str) -> LinkSpec:
    """The link field ``key`` resolved and checked for ``role`` (:data:`ROLES`)."""
    return check_role(link_from_ref(ref, key, where), role, key, where)


def _nic(node: NodeSpec, key: str, where: str) -> LinkSpec:
    """The NIC link, with its line rate replaced by ``nic_bandwidth`` when given."""
    assert node.nic is not None
    link = _role(node.nic, "NIC", f"{key}.nic", where)
    if node.nic_bandwidth is None:
        return link
    what = f"{where}: {key}.nic_bandwidth"
    return with_bandwidth(link, parse_bandwidth(node.nic_bandwidth, what), what)


def _pad(n: int) -> int:
    return len(str(max(n - 1, 0)))


def add_server(
    g: DiGraph, k: int, node: NodeSpec, links: ServerLinks, width: int
) -> tuple[list[str], list[str]]:
    """Add server ``k``; return its GPU names (rank order) and NIC names (rail order).

    Parameters
    ----------
    g : DiGraph
        The graph to extend.
    k : int
        Server index.
    node : NodeSpec
        Its validated description.
    links : ServerLinks
        Its resolved links (:func:`server_links`).
    width : int
        Digits of server indices in names.
    """
    p = f"n{k:0{width}d}"
    host = f"{p}.host"
    g.add_node(host, kind="host", node=k)
    switches = [f"{p}.pcie{j:0{_pad(node.pcie_switches)}d}" for j in range(node.pcie_switches)]
    for sw in switches:
        g.add_node(sw, kind="pcie_switch", node=k)
        add_link(g, sw, host, links.pcie)
    gpus = [f"{p}.gpu{i:0{_pad(node.gpus)}d}" for i in range(node.gpus)]
    gpu_up = [
        switches[i * len(switches) // node.gpus] if switches and node.p2p else host
        for i in range(node.gpus)
    ]
    for name, up in zip(gpus, gpu_up, strict=True):
        g.add_node(name, kind="gpu", node=k)
        add_link(g, name, up, links.pcie)
    _add_gpu_fabric(g, node.fabric, p, k, gpus, links)
    nics = [f"{p}.nic{j:0{_pad(node.nics)}d}" for j in range(node.nics)]
    for j, name in enumerate(nics):
        g.add_node(name, kind="nic", node=k)
        add_link(g, name, _nic_parent(node, j, host, switches, gpu_up), links.pcie)
    return gpus, nics


def _nic_parent(node: NodeSpec, j: int, host: str, switches: list[str], gpu_up: list[str]) -> str:
    """Where NIC ``j`` attaches: by ``nic_affinity``, else spread evenly over the switches."""
    if node.nic_affinity is None:
        return switches[j * len(switches) // node.nics] if switches else host
    place = node.nic_affinity[j]
    if place == "host":
        return host
    if place.startswith("pcie"):
        return switches[int(place[4:])]
    return gpu_up[int(place[3:])]


def _add_gpu_fabric(
    g: DiGraph, fabric: str, p: str, k: int, gpus: list[str], links: ServerLinks
) -> None:
    """NVSwitch, all-to-all mesh or NVLink bridges between the server's GPUs."""
    if links.nvlink is not None and len(gpus) > 1:
        if fabric == "nvswitch":
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
