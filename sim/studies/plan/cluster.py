"""The cluster a plan is searched on: the scenario's, or ``--gpus N`` of its topology.

``N`` a multiple of the server size sets ``cluster.nodes``; ``N`` below one server
takes a server of the same kind with ``N`` GPUs (a topology file written to a temporary
folder for the search's duration, named ``<topology>-<N>gpu``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from sim.errors import ConfigError
from sim.scenario.load import ClusterSection, Scenario
from sim.topology.presets import load_spec, load_topology

__all__ = ["cluster_for"]


@contextmanager
def cluster_for(
    scenario: Scenario, gpus: int | None
) -> Iterator[tuple[ClusterSection, Any, list[str]]]:
    """Yield (cluster section, topology, notes) for planning ``gpus`` GPUs (None: as is)."""
    cluster = scenario.cluster
    topo = load_topology(cluster.topology, nodes=cluster.nodes, seed=scenario.seed)
    if gpus is None or gpus == topo.num_gpus:
        yield cluster, topo, []
        return
    if isinstance(gpus, bool) or gpus < 1:
        raise ConfigError(f"--gpus {gpus}: expected an integer >= 1")
    per = topo.gpus_per_node
    spec = load_spec(cluster.topology)
    if gpus % per == 0 and spec.multi_node:
        nodes = gpus // per
        yield (
            ClusterSection(cluster.topology, nodes),
            load_topology(cluster.topology, nodes=nodes, seed=scenario.seed),
            [],
        )
        return
    if gpus > per:
        raise ConfigError(
            f"--gpus {gpus}: {cluster.topology} has {per} GPUs per server; give a multiple of "
            f"{per}" + ("" if spec.multi_node else " (it is a single-server topology)")
        )
    if spec.node is None:
        raise ConfigError(
            f"--gpus {gpus}: {cluster.topology} describes its servers with servers: or graph:; "
            "slicing one server out of it is not supported: give a topology with node:"
        )
    update: dict[str, Any] = {"gpus": gpus, "nics": 0, "nic": None}
    if gpus == 1:  # one GPU on its host: no switch fabric to build
        update.update(fabric="pcie", pcie_switches=0, nvlink_bridges=None)
    if spec.node.nvlink_bridges is not None and gpus % 2:
        update["nvlink_bridges"] = None
    node = spec.node.model_copy(update=update)
    small = spec.model_copy(
        update={"name": f"{spec.name}-{gpus}gpu", "nodes": 1, "node": node, "network": None}
    )
    with tempfile.TemporaryDirectory(prefix="clustersim-plan-") as folder:
        path = Path(folder) / f"{small.name}.yaml"
        path.write_text(yaml.safe_dump(small.model_dump(exclude_none=True), sort_keys=False))
        note = f"{gpus} GPU(s) of one {spec.name} server ({per} GPUs each)"
        yield ClusterSection(str(path), None), load_topology(str(path), seed=scenario.seed), [note]
