"""The training step as an explicit task graph: tasks, streams, cost inputs, dependencies.

A task is one of three kinds:

- ``COMPUTE``: its stream is busy for ``duration_s`` seconds (a pass or a part of one, the
  optimizer, compression kernels, a CPU optimizer step);
- ``COLLECTIVE``: one or more :class:`Comm` parts, each an operation (``all_reduce``,
  ``all_gather``, ...) of ``nbytes`` run by every group of ``groups`` at once (the TP
  ranks' data-parallel groups of a stage); the parts run together;
- ``TRANSFER``: point-to-point transfers of ``nbytes`` between the ``(src, dst)`` pairs of
  its one :class:`Comm` (pipeline sends, offload copies), landing ``latency_s`` later.

A task starts when every task of ``deps`` has ended and its stream (if any) has finished
the tasks added to it before (streams run their tasks one at a time, in the order they
were added). The graph says *what* runs and in which order; executors
(:mod:`sim.training.graph.execute`) say *how long* communication takes, on the network
backend they run on. Everything a framework decides (overlap switches, bucket release,
prefetch depth, schedule order, where the optimizer runs) is in the builder
(:mod:`sim.training.graph.build`) and nowhere else.

Storage is columnar (one list per field, indexed by task number): a step of thousands of
tasks is built and executed without an object per task.

>>> g = StepGraph()
>>> a = g.add(COMPUTE, g.stream("s0.compute"), (), duration_s=1.0, label="F0")
>>> b = g.add(COMPUTE, g.stream("s0.compute"), (), duration_s=2.0, label="B0")
>>> len(g), g.stream_order[g.stream_of[b]]
(2, [0, 1])
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = ["COLLECTIVE", "COMPUTE", "KINDS", "TRANSFER", "Comm", "PassInfo", "StepGraph"]

COMPUTE, COLLECTIVE, TRANSFER = 0, 1, 2
KINDS = ("compute", "collective", "transfer")

Group = tuple[str, ...]


@dataclass(frozen=True)
class Comm:
    """Cost inputs of one communication part of a task.

    Attributes
    ----------
    op : str
        A collective op (``all_reduce``, ``reduce_scatter``, ``all_gather``, ...) or
        ``send`` for point-to-point transfers.
    nbytes : float
        Bytes per operation (nccl-tests' size for collectives; per pair for ``send``).
    groups : tuple of tuple of str
        The GPU groups that run the collective together, or the ``(src, dst)`` pairs of a
        transfer (graph node names).
    peers : tuple of tuple of str
        Groups the analytical executor takes to run at the same time as ``groups``
        (contention in closed form: every pipeline stage gathering in steady state); empty:
        ``groups`` alone. Executors that simulate the network ignore it.
    latency_s : float
        Software latency added after a transfer lands (NCCL send/recv), seconds.
    rate_cap_Bps : float
        Per-transfer rate cap of a ``send`` (a copy engine's achievable rate), bytes/s.
    tag : str
        What the bytes belong to in the network's per-link counters (``"dp reduce_scatter"``).
    copies : float
        How many operations like this one the whole job runs per simulated one, for the
        step's byte counters (replica 0 stands for its peers; local SGD runs 1 / H).
    """

    op: str
    nbytes: float
    groups: tuple[Group, ...]
    peers: tuple[Group, ...] = ()
    latency_s: float = 0.0
    rate_cap_Bps: float = math.inf
    tag: str = ""
    copies: float = 1.0


class PassInfo(NamedTuple):
    """One forward (``F``) or backward (``B``) pass of a model chunk for a micro-batch (a
    named tuple: a step of thousands of passes makes one per pass)."""

    stage: int
    kind: str
    mb: int
    chunk: int
    vstage: int  # chunk * pp + stage: the virtual stage (the key of its cost)


@dataclass
class StepGraph:
    """Tasks in columns (see the module docstring); build with :meth:`add`."""

    kind: list[int] = field(default_factory=list)
    stream_of: list[int] = field(default_factory=list)  # -1: no stream
    deps: list[list[int]] = field(default_factory=list)
    duration_s: list[float] = field(default_factory=list)
    comm: list[tuple[Comm, ...]] = field(default_factory=list)
    label: list[str] = field(default_factory=list)
    stage: list[int] = field(default_factory=list)  # the pipeline stage it belongs to (-1: none)
    pass_of: list[int] = field(default_factory=list)  # index into ``passes`` (-1: none)
    #: the pass a task outside the passes goes with (a send: its producer; a gradient
    #: bucket: the backward that released it; -1: the step's, e.g. the optimizer)
    owner: list[int] = field(default_factory=list)
    nic: list[int] = field(default_factory=list)  # analytical NIC-sharing resource (-1: none)
    fill: list[bool] = field(default_factory=list)  # yields its NIC to others (fills gaps)
    streams: list[str] = field(default_factory=list)
    stream_order: list[list[int]] = field(default_factory=list)
    passes: list[PassInfo] = field(default_factory=list)
    _stream_ids: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.kind)

    def stream(self, name: str) -> int:
        """The number of stream ``name`` (created on first use)."""
        i = self._stream_ids.get(name)
        if i is None:
            i = self._stream_ids[name] = len(self.streams)
            self.streams.append(name)
            self.stream_order.append([])
        return i

    def add(
        self,
        kind: int,
        stream: int,
        deps: tuple[int, ...] | list[int],
        *,
        duration_s: float = 0.0,
        comm: tuple[Comm, ...] = (),
        label: str = "",
        stage: int = -1,
        pass_of: int = -1,
        nic: int = -1,
        fill: bool = False,
        owner: int = -1,
    ) -> int:
        """Add a task; return its number. ``stream`` -1: the task has no stream; ``owner``:
        the pass a task outside the passes goes with (``pass_of`` for a pass's own)."""
        i = len(self.kind)
        self.kind.append(kind)
        self.stream_of.append(stream)
        self.deps.append(list(deps))
        self.duration_s.append(float(duration_s))
        self.comm.append(comm)
        self.label.append(label)
        self.stage.append(stage)
        self.pass_of.append(pass_of)
        self.owner.append(pass_of if pass_of >= 0 else owner)
        self.nic.append(nic)
        self.fill.append(fill)
        if stream >= 0:
            self.stream_order[stream].append(i)
        return i

    def add_pass(self, info: PassInfo) -> int:
        """Register a pass; return its number (tasks refer to it by ``pass_of``)."""
        self.passes.append(info)
        return len(self.passes) - 1

    def predecessors(self) -> list[list[int]]:
        """Each task's dependencies plus the task before it on its stream."""
        preds = [list(d) for d in self.deps]
        for order in self.stream_order:
            for a, b in itertools.pairwise(order):
                preds[b].append(a)
        return preds
