"""Write a built topology out as an explicit graph: a starting point for a design review.

:func:`graph_document` turns any :class:`Topology` (a preset at some size, a user
file) into the ``graph`` form of a topology file (:mod:`sim.topology.graph`): every
node and every link, in build order. Loading the document builds the same parts, links,
capacities, latencies and routes. A link with its kind's catalog values (per cable) is
written as that kind with ``cables``; any other is an inline link with its values in SI
units (bare numbers: bytes/s and seconds).
"""

from __future__ import annotations

import math
from typing import Any

from sim.catalog import link_names, link_spec
from sim.errors import TopologyError
from sim.topology.model import Topology
from sim.units import format_bandwidth, format_time

__all__ = ["graph_document"]

_NODE_ATTRS = (("node", "server"), ("rail", "rail"), ("unit", "unit"), ("pod", "pod"))


def _node(name: str, data: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "kind": data["kind"]}
    out.update({key: int(data[attr]) for attr, key in _NODE_ATTRS if attr in data})
    return out


def _link(
    data: dict[str, Any], back: dict[str, Any], at_nic: bool, catalog: frozenset[str]
) -> tuple[Any, int]:
    """The ``link`` value and cable count of one link, from both directions' attributes
    (the direction out of a NIC carries the per-message overhead on top of the latency)."""
    cap, kind = float(data["capacity_Bps"]), str(data["kind"])
    cables = int(data.get("cables", 1))
    lat = min(float(data["latency_s"]), float(back["latency_s"]))
    over = max(float(data["latency_s"]), float(back["latency_s"])) - lat
    if kind in catalog:
        spec = link_spec(kind)
        same = (spec.scope, spec.transport, spec.bandwidth_Bps, spec.latency_s) == (
            data["scope"],
            data.get("transport", spec.transport),
            cap,
            lat,
        ) and math.isclose(over, spec.overhead_s if at_nic else 0.0, abs_tol=1e-15)
        if same:
            return kind, cables
    inline: dict[str, Any] = {"kind": kind} if kind in catalog else {}
    inline.update(bandwidth=format_bandwidth(cap), latency=format_time(lat), scope=data["scope"])
    if at_nic or over > 0:
        inline["overhead"] = format_time(over)
    if "transport" in data:  # graphs made by hand in code may lack it
        inline["transport"] = str(data["transport"])
    return inline, cables


def graph_document(topology: Topology) -> dict[str, Any]:
    """A topology file mapping (``graph`` form) that rebuilds ``topology``.

    Parameters
    ----------
    topology : Topology
        Any built topology.

    Returns
    -------
    dict
        ``name``, ``description``, ``gpu`` and ``graph`` (``nodes`` and ``edges``), ready
        for ``yaml.safe_dump`` or :func:`sim.topology.spec.parse_spec`.

    Examples
    --------
    >>> from sim.topology.presets import load_topology
    >>> doc = graph_document(load_topology("dgx-h100"))
    >>> len(doc["graph"]["nodes"]), doc["graph"]["edges"][0]
    (22, {'a': 'n0.host', 'b': 'n0.pcie0', 'link': 'pcie-gen5'})
    """
    if topology.heterogeneous:  # an explicit graph has one gpu model for every GPU
        raise TopologyError(
            f"topology {topology.name!r}: servers of different GPU models cannot be written "
            "as an explicit graph; copy the servers file instead"
        )
    g = topology.graph
    catalog = frozenset(link_names())
    edges: list[dict[str, Any]] = []
    done: set[tuple[str, str]] = set()
    for u, v, data in g.edges(data=True):
        if (v, u) in done:
            continue
        done.add((u, v))
        at_nic = "nic" in (g.nodes[u].get("kind"), g.nodes[v].get("kind"))
        link, cables = _link(data, g.edges[v, u], at_nic, catalog)
        edges.append({"a": u, "b": v, "link": link, **({"cables": cables} if cables > 1 else {})})
    return {
        "name": topology.name,
        "description": topology.description,
        "gpu": topology.gpu.name,
        "graph": {"nodes": [_node(v, d) for v, d in g.nodes(data=True)], "edges": edges},
    }
