"""Measured collectives as simulator cases: the GPU group of a record and its :class:`Point`.

A measurement file becomes :class:`Point` objects: one per record, each tied to a
:class:`~sim.collectives.simulate.CollectiveSetup` on the group of GPUs that ran it
(:func:`group_for`: ``gpus_per_node`` GPUs on each of the first ``nodes`` servers).

>>> from sim.topology.presets import load_topology
>>> group_for(load_topology("h100-ib-ndr", nodes=2), nodes=2, gpus_per_node=1)
('n0.gpu0', 'n1.gpu0')
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from calibrate.measurements import CollectiveRecord, Measurements
from sim.collectives.engine import SCOPE_NAME
from sim.collectives.links import LinkKey, link_keys
from sim.collectives.params import CollectiveParams, default_params
from sim.collectives.simulate import CollectiveSetup
from sim.errors import CalibrationError
from sim.topology.model import Topology

__all__ = ["MAX_CLASSES", "Point", "check_record", "crossed_keys", "group_for", "placement",
           "points_from", "step_scopes"]  # fmt: skip

#: Most link classes (scope, transport, line rate, NIC or not) one fit can tell apart.
MAX_CLASSES = 8


def group_for(topology: Topology, nodes: int, gpus_per_node: int) -> tuple[str, ...]:
    """GPU names: ``gpus_per_node`` GPUs on each of the first ``nodes`` servers.

    Raises
    ------
    CalibrationError
        When the topology has fewer servers, or servers with fewer GPUs.
    """
    if nodes < 1 or gpus_per_node < 1:
        raise CalibrationError(
            f"group: need nodes >= 1 and gpus per node >= 1, got {nodes}, {gpus_per_node}"
        )
    if nodes > topology.nodes or gpus_per_node > topology.gpus_per_node:
        raise CalibrationError(
            f"group of {nodes} node(s) x {gpus_per_node} GPU(s) does not fit topology "
            f"{topology.name!r} ({topology.nodes} node(s) x {topology.gpus_per_node} GPUs); "
            "pass --nodes/--gpus or a larger topology"
        )
    per_node: dict[int, list[str]] = {}
    for g in topology.gpus:
        per_node.setdefault(topology.node_of(g), []).append(g)
    servers = sorted(per_node)[:nodes]
    return tuple(g for s in servers for g in per_node[s][:gpus_per_node])


def placement(m: Measurements, n_ranks: int, topology: Topology, nodes: int | None,
              gpus: int | None) -> tuple[int, int]:  # fmt: skip
    """(nodes, GPUs per node) of a file: its meta, else ``nodes``/``gpus``, else packed.

    Raises
    ------
    CalibrationError
        When nodes × GPUs per node is not the file's rank count.
    """
    n_nodes = m.meta.nodes or nodes
    gpn = m.meta.gpus_per_node or gpus
    if n_nodes is None and gpn is None:
        gpn = min(n_ranks, topology.gpus_per_node)
    if n_nodes is None:
        n_nodes = max(1, math.ceil(n_ranks / gpn)) if gpn else 1
    if gpn is None:
        gpn = max(1, n_ranks // n_nodes)
    if n_nodes * gpn != n_ranks:
        raise CalibrationError(
            f"{m.meta.source}: {n_ranks} ranks do not match {n_nodes} node(s) x {gpn} GPU(s); "
            "pass --nodes N --gpus G with N*G = ranks"
        )
    return n_nodes, gpn


@dataclass(frozen=True)
class Point:
    """One measured collective: the case, the measured time (s) and where it came from."""

    topology: Topology
    setup: CollectiveSetup
    op: str
    size_bytes: int
    time_s: float
    in_place: bool
    source: str


def check_record(r: CollectiveRecord, source: str) -> None:
    """Reject records that cannot be fitted: NaN or non-positive times, sizes < 1 byte."""
    if not math.isfinite(r.time_s) or r.time_s <= 0:
        raise CalibrationError(
            f"{source}: {r.op} of {r.size_bytes} B has time {r.time_s!r} s; times must be finite and > 0"
        )
    if r.size_bytes < 1:
        raise CalibrationError(
            f"{source}: {r.op} has size {r.size_bytes!r} B; sizes must be >= 1 byte"
        )


def points_from(measurements: Sequence[Measurements], topology: Topology, nodes: int | None = None,
                gpus: int | None = None, params: CollectiveParams | None = None) -> list[Point]:  # fmt: skip
    """Every collective record of ``measurements`` as a :class:`Point` on ``topology``.

    ``nodes``/``gpus`` (GPUs per node) apply where a file's meta does not say.
    """
    params = params or default_params()
    points: list[Point] = []
    for m in measurements:
        if m.kind != "collectives":
            continue
        by_n: dict[int, list[CollectiveRecord]] = {}
        for r in m.collectives:
            check_record(r, m.meta.source)
            by_n.setdefault(r.n_ranks, []).append(r)
        for n, recs in sorted(by_n.items()):
            n_nodes, gpn = placement(m, n, topology, nodes, gpus)
            setup = CollectiveSetup(topology, group_for(topology, n_nodes, gpn), params)
            points += [
                Point(topology, setup, r.op, r.size_bytes, r.time_s, r.in_place, m.meta.source)
                for r in recs
            ]
    return points


def step_scopes(setup: CollectiveSetup) -> set[str]:
    """Scopes (nvlink/pcie/net) that steps between the group's GPUs can have."""
    routes = setup.routes
    g = setup.group
    return {SCOPE_NAME[routes.facts(a, b)[2]] for a in g for b in g if a != b}


def crossed_keys(setup: CollectiveSetup) -> set[LinkKey]:
    """Link classes (:func:`sim.collectives.links.link_keys`) on routes between the group's
    GPUs, each pinned to any rail: what the measurements can say something about."""
    topo = setup.topology
    keys, index = link_keys(topo)
    rails = range(-1, max(topo.nics_per_node().values(), default=0))
    g = setup.group
    seen = {
        int(index[li])
        for a in g for b in g if a != b
        for r in rails
        for li in topo.path(a, b, r).links
    }  # fmt: skip
    return {keys[i] for i in seen}
