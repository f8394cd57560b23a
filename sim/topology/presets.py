"""Topology presets by name, and user topology files by path.

Presets are YAML files shipped in the ``topologies`` package (``topologies/<name>.yaml``)
and found with :mod:`importlib.resources`, so they work from an installed wheel as well
as from a source checkout. Each is a file a user can copy and edit; see
:mod:`sim.topology.spec` for the schema.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from sim.errors import ConfigError, TopologyError
from sim.files import load_shipped_yaml, load_yaml, read_text
from sim.topology.build import build_topology
from sim.topology.model import Topology
from sim.topology.spec import MAX_GPUS, TopologySpec, parse_spec

__all__ = ["load_spec", "load_topology", "nodes_override_note", "preset_names"]

_SUFFIXES = (".yaml", ".yml")


def preset_names() -> list[str]:
    """Sorted names of the shipped topology presets.

    >>> "dgx-h100" in preset_names()
    True
    """
    root = resources.files("topologies")
    return sorted(p.name.rsplit(".", 1)[0] for p in root.iterdir() if p.name.endswith(_SUFFIXES))


def _is_path(name_or_path: str) -> bool:
    return name_or_path.endswith(_SUFFIXES) or "/" in name_or_path or "\\" in name_or_path


def _read(name_or_path: str) -> tuple[str, str]:
    """Return (text, source label) of a preset name or a YAML file path."""
    if _is_path(name_or_path):
        path = Path(name_or_path)
        if not path.exists():  # a FIFO or a device is named as what it is by read_text
            raise TopologyError(f"topology file {name_or_path!r} not found")
        try:
            return read_text(path, "topology file"), str(path)
        except ConfigError as e:
            raise TopologyError(str(e)) from None
    res = resources.files("topologies").joinpath(f"{name_or_path}.yaml")
    if not res.is_file():
        raise TopologyError(
            f"unknown topology preset {name_or_path!r}; known: {', '.join(preset_names())} "
            "(or give a path to a .yaml file)"
        )
    return res.read_text(encoding="utf-8"), name_or_path


def _parse_yaml(text: str, source: str, shipped: bool) -> Any:
    try:
        return load_shipped_yaml(text, source) if shipped else load_yaml(text, source)
    except ConfigError as e:
        raise TopologyError(str(e)) from None


def load_spec(name_or_path: str, *, nodes: int | None = None) -> TopologySpec:
    """Read and validate a topology description without building it.

    Parameters
    ----------
    name_or_path : str
        A preset name (see :func:`preset_names`) or a path to a YAML file.
    nodes : int, optional
        Override the server count of a multi-node topology (>= 1).

    Returns
    -------
    TopologySpec

    Raises
    ------
    TopologyError
        Unknown preset, missing file, bad YAML, bad key or value, or ``nodes`` on a
        single-server topology.

    Examples
    --------
    >>> load_spec("h100-ib-ndr", nodes=4).nodes
    4
    """
    text, source = _read(name_or_path)
    shipped = not _is_path(name_or_path)
    spec = _capped(parse_spec(_parse_yaml(text, source, shipped), source), spec_nodes=None)
    if nodes is None:
        return spec
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise TopologyError(f"nodes: must be an integer >= 1 (got {nodes!r})")
    if not spec.multi_node:
        what = "a single-server topology (network.kind none)"
        if spec.servers is not None or spec.graph is not None:
            what = f"written server by server ({'servers' if spec.servers else 'graph'})"
        raise TopologyError(
            f"nodes: {source!r} is {what}; --nodes applies only to node/nodes with a "
            "parametric network"
        )
    return _capped(spec, spec_nodes=nodes)


def _capped(spec: TopologySpec, spec_nodes: int | None) -> TopologySpec:
    """``spec`` (with ``nodes`` replaced), refused above :data:`MAX_GPUS` GPUs."""
    nodes = spec.nodes if spec_nodes is None else spec_nodes
    gpus = nodes * spec.gpus_per_node
    if gpus > MAX_GPUS:
        raise TopologyError(
            f"nodes: {nodes:,} servers x {spec.gpus_per_node} GPUs = {gpus:,} GPUs; at most "
            f"{MAX_GPUS:,} GPUs are simulated"
        )
    return spec if spec_nodes is None else spec.model_copy(update={"nodes": nodes})


def load_topology(name_or_path: str, *, nodes: int | None = None, seed: int = 0) -> Topology:
    """Load a preset or a topology YAML file and build it.

    Parameters
    ----------
    name_or_path : str
        A preset name (see :func:`preset_names`) or a path to a YAML file.
    nodes : int, optional
        Override the server count (racks for GB200 NVL72) of a multi-node topology.
    seed : int
        Seed of the ECMP hash salt.

    Returns
    -------
    Topology
        Capacities in bytes/s, latencies in seconds, GPUs in rank order.

    Raises
    ------
    TopologyError
        One line naming the bad name, key or value (see :func:`load_spec`), an unknown
        GPU or link kind, or a disconnected topology.

    Examples
    --------
    >>> t = load_topology("h100-ib-ndr", nodes=2)
    >>> t.num_gpus, t.gpus_per_node
    (16, 8)
    """
    spec = load_spec(name_or_path, nodes=nodes)
    return build_topology(spec, seed=seed, source=name_or_path)


def nodes_override_note(
    name_or_path: str, nodes: int | None, key: str = "cluster.nodes"
) -> str | None:
    """What a run says when ``nodes`` (a scenario's ``cluster.nodes``) replaces the server
    count the topology file gives; None when it does not.

    >>> nodes_override_note("h100-ib-ndr", 128)
    'cluster.nodes 128 replaces the 32 servers of topology h100-ib-ndr (1,024 GPUs, not 256)'
    >>> nodes_override_note("h100-ib-ndr", 32) is None
    True
    """
    if nodes is None:
        return None
    spec = load_spec(name_or_path)
    if spec.nodes == nodes:
        return None
    per = spec.gpus_per_node
    return (
        f"{key} {nodes} replaces the {spec.nodes} servers of topology {name_or_path} "
        f"({nodes * per:,} GPUs, not {spec.nodes * per:,})"
    )
