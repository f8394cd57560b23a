"""Simulate a Chakra trace set on one of clustersim's topologies, with either network.

:func:`run_traces` reads the ranks' files (folding data-parallel replicas where the files
show they mirror replica 0: :mod:`sim.chakra.fold`), builds the task graph
(:mod:`sim.chakra.taskgraph`) with rank ``r`` on the topology's ``r``-th GPU, and runs it
with the executor of the network backend (:func:`sim.training.graph.execute.execute`):
list scheduling on the analytical network, SimPy on the flow network. Collectives are
planned and timed by the tuner with the topology's profile, chosen as every entry point
chooses it (:func:`sim.profile_select.resolve_profile`: an explicit one, or the shipped
profile measured on this hardware, or none). The simulated time is the end of the last
task on any rank, as ASTRA-sim reports the last rank's finish.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.chakra.export import GENERATOR
from sim.chakra.fold import read_folded
from sim.chakra.groups import groups_from_metadata, read_comm_groups
from sim.chakra.ranks import rank_files
from sim.chakra.stream import MAX_TRACE_BYTES
from sim.chakra.taskgraph import trace_graph
from sim.chakra.trace import Metadata
from sim.errors import ConfigError
from sim.network import backend
from sim.profile_select import describe, resolve_profile
from sim.topology.presets import load_topology
from sim.training.compute.passes import CollectiveTimer
from sim.training.graph.execute import execute

__all__ = ["TraceRun", "p2p_latency_s", "run_traces"]


@dataclass
class TraceRun:
    """A simulated trace set.

    Attributes
    ----------
    time_s : float
        When the last rank finished (seconds from the start).
    rank_end_s : list of float
        When each rank's last task ended (a folded rank: its replica-0 rank's).
    prefix, topology, network : str
    ranks, simulated_ranks, tasks : int
    counts : dict of str to int
        Tasks by kind (:class:`sim.chakra.taskgraph.TraceGraph`).
    profile : dict
        The profile used (:func:`sim.profile_select.describe`).
    notes : list of str
        How replicas were folded, and the assumptions of the run.
    """

    time_s: float
    rank_end_s: list[float]
    prefix: str
    topology: str
    network: str
    ranks: int
    simulated_ranks: int
    tasks: int
    counts: dict[str, int]
    profile: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    def rank_summary(self) -> dict[str, float | int]:
        """Rank end times: min, median, max (seconds) and the first rank ending last."""
        ends = self.rank_end_s
        return {
            "min": min(ends),
            "median": float(statistics.median(ends)),
            "max": max(ends),
            "last_rank": max(range(len(ends)), key=lambda r: (ends[r], -r)),
        }

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready data (``time_s`` the simulated time)."""
        return {
            "time_s": self.time_s,
            "traces": self.prefix,
            "topology": self.topology,
            "network": self.network,
            "ranks": self.ranks,
            "simulated_ranks": self.simulated_ranks,
            "tasks": self.tasks,
            "counts": self.counts,
            "rank_end_s": self.rank_summary(),
            "profile": self.profile,
            "notes": self.notes,
        }

    def summary(self) -> str:
        """A few lines for the terminal."""
        s = self.rank_summary()
        counts = ", ".join(f"{v:,} {k.replace('_', ' ')}" for k, v in self.counts.items() if v)
        lines = [
            f"{self.prefix}: {self.ranks} ranks on {self.topology} ({self.network} network)",
            f"simulated time: {self.time_s:.6f} s",
            f"rank end times: min {s['min']:.6f} s, median {s['median']:.6f} s, "
            f"max {s['max']:.6f} s (rank {s['last_rank']})",
            f"tasks: {self.tasks:,} ({counts}) on {self.simulated_ranks} simulated ranks",
            *(f"note: {n}" for n in self.notes),
        ]
        return "\n".join(lines)


def p2p_latency_s(params: Any) -> float:
    """Software latency of one NCCL send/recv with the collective parameters ``params``
    (seconds): the direct algorithm's Simple-protocol base latency, as the step graph's
    pipeline sends (:func:`sim.training.graph.build.p2p_latency_s`)."""
    return float(params.algorithm("direct").base_latency_s["simple"])


def _groups(
    prefix: str, comm_groups: str | os.PathLike[str] | None
) -> dict[str, tuple[int, ...]] | None:
    """The communicator groups: the file given, else ``PREFIX.groups.json`` when there."""
    if comm_groups is not None:
        return read_comm_groups(comm_groups)
    beside = Path(f"{prefix}.groups.json")
    return read_comm_groups(beside) if beside.is_file() else None


def run_traces(
    source: str | os.PathLike[str],
    topology: str,
    *,
    nodes: int | None = None,
    network: str = "flow",
    profile: str | None = None,
    force_profile: bool = False,
    comm_groups: str | os.PathLike[str] | None = None,
    fold: bool = True,
    seed: int = 0,
    max_bytes: int = MAX_TRACE_BYTES,
) -> TraceRun:
    """Simulate the trace set ``source`` on ``topology`` (see the module docstring).

    Parameters
    ----------
    source : str or Path
        ``DIR/NAME``, a folder with one workload's files, or one of them.
    topology : str
        A preset or a topology YAML file.
    nodes : int, optional
        Servers of a multi-node topology.
    network : str
        ``flow`` or ``analytical``.
    profile : str, optional
        A profile (name, path or ``none``); default: the shipped profile measured on the
        topology's hardware.
    force_profile : bool
        Use a profile measured on other hardware.
    comm_groups : str or Path, optional
        ASTRA-sim's communicator-group file; default ``PREFIX.groups.json`` when there,
        else the traces' process-group records, else the ranks naming each group.
    fold : bool
        Fold replicas that mirror replica 0 (:mod:`sim.chakra.fold`).
    seed : int
        Seed of the topology's ECMP hashing.
    max_bytes : int
        Largest file read.

    Returns
    -------
    TraceRun

    Raises
    ------
    ConfigError
        One line: more ranks than the topology has GPUs, a bad file, traces that do not
        match, an unknown network or profile.
    """
    net = backend(network, "--network").name
    prefix, files = rank_files(source)
    topo = load_topology(topology, nodes=nodes, seed=seed)
    if len(files) > topo.num_gpus:
        raise ConfigError(
            f"{prefix}: {len(files)} ranks but topology {topo.name!r} has {topo.num_gpus} GPUs "
            "(rank r runs on GPU r; give a larger topology or --nodes)"
        )
    resolved = resolve_profile(profile, topo, force=force_profile)
    groups = _groups(prefix, comm_groups)
    read = read_folded(prefix, groups, fold=fold, max_bytes=max_bytes)
    if groups is None:
        groups = groups_from_metadata(read.traces) or None
    params = resolved.profile.collectives
    timer = CollectiveTimer(topo, params, net)
    built = trace_graph(read.traces, topo.gpus, groups, ranks=read.simulated,
                        host_of=topo.host_of, latency_s=p2p_latency_s(params))  # fmt: skip
    done = execute(built.graph, timer, net)
    end_of = {r: max((done.end[t] for t in tasks), default=0.0)
              for r, tasks in built.rank_tasks.items()}  # fmt: skip
    ends = [end_of[read.rep[r]] for r in range(read.traces.num_ranks)]
    info = describe(resolved, topo)
    notes = [read.note, *built.notes]
    recorded = _recorded_profile(read.traces.traces[read.simulated[0]].metadata)
    if recorded is not None and recorded != resolved.key:
        notes.append(
            f"the traces were exported with profile {recorded!r}; this run uses "
            f"{resolved.key!r} (--profile {recorded} for the same collectives)"
        )
    return TraceRun(
        time_s=max(ends, default=0.0),
        rank_end_s=ends,
        prefix=prefix,
        topology=topo.name,
        network=net,
        ranks=read.traces.num_ranks,
        simulated_ranks=len(read.simulated),
        tasks=len(built.graph),
        counts=built.counts,
        profile=info,
        notes=notes,
    )


def _recorded_profile(metadata: Metadata) -> str | None:
    """The profile a clustersim export names in its metadata (None for other traces)."""
    attrs = {a.name: a.value for a in metadata.attrs}
    gen, name = attrs.get("generator"), attrs.get("profile")
    if isinstance(gen, str) and gen.startswith(GENERATOR) and isinstance(name, str) and name:
        return name
    return None
