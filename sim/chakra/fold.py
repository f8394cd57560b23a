"""Read a trace set, folding data-parallel replicas onto replica 0 where their traces mirror it.

A trace set clustersim exported says in its metadata (``replica_axes``: size and rank
stride of the data-parallel and context-parallel axes) that replica ``k``'s rank
``r0 + offset`` runs replica 0's rank ``r0``'s trace with its peers and groups moved by the
same offset (:mod:`sim.chakra.layout`). :func:`read_folded` does not take that on trust:
it reads replica 0's files, then checks every other file byte for byte against replica 0's
trace so mapped (a send's peer ``p`` becomes ``p + offset``; a group whose members all lie
in replica 0 becomes the group of the members moved by ``offset``, which the
communicator-group file must hold; a group spanning replicas stays). A file that matches
need not be decoded (that is what makes a 1,024-rank import take seconds); one that does
not, or a trace set without the attribute, is read whole, every rank simulated.

Folded, only replica 0's ranks are simulated, as the step graph does: their collectives
keep their whole groups (the other replicas' members take part through them), their
sends stay inside replica 0, and every other replica is taken to run the same way
(without contending with replica 0 for the network beyond the collectives they share).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sim.chakra.codec import (
    decode_metadata,
    decode_trace,
    known_attr_piece,
    metadata_frame,
    node_pieces,
    node_template,
)
from sim.chakra.export import GENERATOR
from sim.chakra.groups import group_key
from sim.chakra.ranks import TraceSet, rank_files
from sim.chakra.stream import MAX_TRACE_BYTES, frame, read_bounded
from sim.chakra.trace import Metadata, Trace

__all__ = ["FoldedTraces", "read_folded", "replica_axes"]


@dataclass(frozen=True)
class FoldedTraces:
    """A trace set read with its replicas folded (or not).

    Attributes
    ----------
    traces : TraceSet
        Every rank's trace; a folded rank holds an empty placeholder (its trace is its
        representative's, mapped).
    simulated : tuple of int
        The ranks to simulate (every rank when nothing was folded).
    rep : tuple of int
        For each rank, the simulated rank standing for it (itself when simulated).
    note : str
        How the replicas were folded, or why not.
    """

    traces: TraceSet
    simulated: tuple[int, ...]
    rep: tuple[int, ...]
    note: str

    @property
    def folded(self) -> bool:
        """Whether some ranks stand in for others."""
        return len(self.simulated) < self.traces.num_ranks


def replica_axes(metadata: Metadata) -> tuple[tuple[int, int], ...] | None:
    """(size, rank stride) of each replica axis a clustersim export declares, or None."""
    attrs = {a.name: a for a in metadata.attrs}
    gen, axes = attrs.get("generator"), attrs.get("replica_axes")
    if gen is None or not str(gen.value).startswith(GENERATOR) or axes is None:
        return None
    values = axes.value
    if (
        not isinstance(values, tuple)
        or len(values) % 2
        or not all(type(v) is int and v >= 0 for v in values)
    ):
        return None
    pairs = tuple((int(values[i]), int(values[i + 1])) for i in range(0, len(values), 2))
    return pairs if all(size >= 1 for size, _ in pairs) else None


def _offsets(axes: Sequence[tuple[int, int]], n: int) -> list[int] | None:
    """Each rank's offset from its replica-0 rank, or None where the axes do not describe
    ``n`` ranks (a replica-0 rank must have digit 0 on every axis)."""
    out = []
    for r in range(n):
        off = sum(((r // stride) % size) * stride for size, stride in axes if size > 1)
        r0 = r - off
        if r0 < 0 or any((r0 // stride) % size for size, stride in axes if size > 1):
            return None
        out.append(off)
    return out


class _Mapper:
    """Replica 0's traces moved into another replica (peers and groups by the offset)."""

    def __init__(self, offsets: list[int], groups: Mapping[str, Sequence[int]] | None) -> None:
        self.offsets = offsets
        self.groups = groups
        self.by_members = {tuple(sorted(m)): pg for pg, m in (groups or {}).items()}
        self._pg: dict[tuple[str, int], str | None] = {}
        self.pieces: dict[object, bytes] = {}

    def in_replica0(self, r: int) -> bool:
        return 0 <= r < len(self.offsets) and self.offsets[r] == 0

    def spans(self, pg: str) -> bool:
        """Whether group ``pg`` is the same in every replica (it spans them, or is unknown)."""
        members = None if self.groups is None else self.groups.get(pg)
        return members is None or not all(self.in_replica0(m) for m in members)

    def move(self, name: str, value: int | str, off: int) -> int | str | None:
        """Attribute ``name``'s ``value`` in the replica ``off`` ranks away (a peer moves by
        ``off``, a group inside replica 0 to its members moved), or None where it cannot."""
        if name == "pg_name":
            assert isinstance(value, str)
            return self._group(value, off)
        assert isinstance(value, int)
        if not self.in_replica0(value) or value + off >= len(self.offsets):
            return None
        return value + off

    def _group(self, pg: str, off: int) -> str | None:
        key = (pg, off)
        if key not in self._pg:
            if self.spans(pg):
                self._pg[key] = pg
            else:
                assert self.groups is not None
                moved = tuple(sorted(m + off for m in self.groups[pg]))
                self._pg[key] = self.by_members.get(moved)
        return self._pg[key]


def read_folded(
    source: str | os.PathLike[str],
    groups: Mapping[str, Sequence[int]] | None = None,
    *,
    fold: bool = True,
    max_bytes: int = MAX_TRACE_BYTES,
) -> FoldedTraces:
    """Read a trace set, folding replicas where their files mirror replica 0's.

    Parameters
    ----------
    source : str or Path
        ``DIR/NAME``, a folder with one workload's files, or one of them
        (:func:`sim.chakra.ranks.rank_files`).
    groups : mapping, optional
        Communicator groups by ``pg_name`` (to move groups into other replicas).
    fold : bool
        False: read and simulate every rank.
    max_bytes : int
        Largest file read.

    Raises
    ------
    ConfigError
        As :func:`sim.chakra.ranks.read_traces`.
    MissingExtraError
        protobuf is not installed.
    """
    prefix, files = rank_files(source)
    n = len(files)
    everyone = tuple(range(n))
    first = read_bounded(files[0], max_bytes)
    meta, _ = decode_metadata(first, str(files[0]))
    axes = replica_axes(meta)
    offsets = _offsets(axes, n) if axes else None
    why = ""
    if not fold:
        why = "not folded (asked)"
    elif axes is None:
        why = "not folded: the traces declare no replicas (no clustersim replica_axes)"
    elif offsets is None:
        why = f"not folded: replica_axes {list(axes)} do not describe {n} ranks"
    elif not any(offsets):
        why = "not folded: one replica"
    if why or offsets is None:
        return FoldedTraces(_read_all(prefix, files, max_bytes), everyone, everyone, why)
    seen: dict[str, dict[bytes, object]] = {}
    reps = {r: decode_trace(read_bounded(files[r], max_bytes), str(files[r]), cache=seen)
            for r in range(n) if offsets[r] == 0}  # fmt: skip
    mapper = _Mapper(offsets, groups)
    runs: dict[int, list[_Piece]] = {}
    for r in range(n):
        off = offsets[r]
        if off == 0:
            continue
        r0 = r - off
        if r0 not in runs:
            runs[r0] = _runs(reps[r0], mapper)
        data = read_bounded(files[r], max_bytes)
        if _expected(runs[r0], mapper, off) != data:
            why = f"not folded: {files[r].name} is not {files[r0].name} moved by {off} ranks"
            return FoldedTraces(_read_all(prefix, files, max_bytes), everyone, everyone, why)
    placeholder = Trace(meta, ())
    simulated = tuple(sorted(reps))
    traces = tuple(reps.get(r, placeholder) for r in range(n))
    sizes = " x ".join(str(size) for size, _ in axes or () if size > 1)
    note = (
        f"folded: {n} ranks simulated as {len(simulated)} (replica 0 of {sizes} replicas, "
        "each checked to mirror it)"
    )
    rep = tuple(r - offsets[r] for r in range(n))
    return FoldedTraces(TraceSet(prefix, traces), simulated, rep, note)


def _read_all(prefix: str, files: Sequence[Path], max_bytes: int) -> TraceSet:
    """Every rank's trace (nodes repeated across files decoded once)."""
    seen: dict[str, dict[bytes, object]] = {}
    traces = tuple(decode_trace(read_bounded(f, max_bytes), str(f), cache=seen) for f in files)
    return TraceSet(prefix, traces)


#: A piece of a replica-0 rank's file (:func:`_runs`): bytes every replica shares, or a
#: node's pieces with the attributes that move with the replica (name, position, value).
_Piece = bytes | tuple[list[bytes], list[tuple[str, int, int | str]]]
_MOVING = ("comm_src", "comm_dst", "pg_name")


def _runs(trace: Trace, mapper: _Mapper) -> list[_Piece]:
    """``trace``'s file as pieces (:data:`_Piece`): the nodes no replica changes, encoded
    once and joined, and the sends, receives and collectives of groups inside replica 0,
    whose peers and groups move."""
    cache = mapper.pieces
    out: list[_Piece] = [metadata_frame(trace.metadata, "metadata")]
    static: list[bytes] = []
    for node in trace.nodes:
        pg = node.pg_name if node.pg_name is not None and group_key(node.pg_name) else None
        moves = node.comm_src is not None or node.comm_dst is not None
        moves = moves or (pg is not None and not mapper.spans(pg))
        if not moves:
            static.append(frame(b"".join(node_pieces(node, cache))))
            continue
        if static:
            out.append(b"".join(static))
            static = []
        parts, at = node_template(node, _MOVING, cache)
        fields = [(name, at[name], getattr(node, name)) for name in _MOVING if name in at]
        out.append((parts, [(n, i, v) for n, i, v in fields if n != "pg_name" or pg]))
    if static:
        out.append(b"".join(static))
    return out


def _expected(runs: list[_Piece], mapper: _Mapper, off: int) -> bytes | None:
    """The file of the replica ``off`` ranks from the one ``runs`` describe; None where a
    peer or group cannot move there."""
    out: list[bytes] = []
    cache = mapper.pieces
    for item in runs:
        if isinstance(item, bytes):
            out.append(item)
            continue
        parts, fields = item
        parts = list(parts)
        for name, i, value in fields:
            moved = mapper.move(name, value, off)
            if moved is None:
                return None
            parts[i] = known_attr_piece(name, moved, cache)
        out.append(frame(b"".join(parts)))
    return b"".join(out)
