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
from dataclasses import dataclass, replace
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

    def move(self, name: str, value: int | str, off: int) -> int | str | None:
        """Attribute ``name``'s ``value`` ``off`` ranks away (a peer moves by ``off``; a
        group as :meth:`_group` says), or None where it cannot (a peer outside replica 0
        or beyond the ranks)."""
        if isinstance(value, str):
            return self._group(value, off)
        moved = value + off
        offsets = self.offsets
        if not 0 <= value < len(offsets) or offsets[value] or moved >= len(offsets):
            return None
        return moved

    def _group(self, pg: str, off: int) -> str | None:
        """The group of ``pg``'s members moved by ``off`` where that is a group (a group of
        replica 0 in another replica, a TP rank's DP group at the next TP rank), else
        ``pg`` itself (a group spanning the replicas is the same in each)."""
        key = (pg, off)
        if key not in self._pg:
            members = None if self.groups is None else self.groups.get(pg)
            moved = None if members is None else tuple(sorted(m + off for m in members))
            self._pg[key] = self.by_members.get(moved, pg) if moved else pg
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
    mapper = _Mapper(offsets, groups)
    runs: dict[int, list[_Piece]] = {}
    reps = _read_replica0(files, offsets, mapper, runs, max_bytes)
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


def _read_replica0(
    files: Sequence[Path],
    offsets: list[int],
    mapper: _Mapper,
    runs: dict[int, list[_Piece]],
    max_bytes: int,
) -> dict[int, Trace]:
    """Replica 0's traces. A rank whose file is the previous decoded one's moved by the
    rank difference (the next TP rank of a stage: peers and groups one rank on) is mapped,
    not decoded, after the same byte-for-byte check as a folded replica; the others are
    decoded."""
    seen: dict[str, dict[bytes, object]] = {}
    reps: dict[int, Trace] = {}
    anchor = -1
    for r in range(len(files)):
        if offsets[r]:
            continue
        data = read_bounded(files[r], max_bytes)
        if anchor >= 0:
            if anchor not in runs:
                runs[anchor] = _runs(reps[anchor], mapper)
            if _expected(runs[anchor], mapper, r - anchor) == data:
                reps[r] = _mapped(reps[anchor], mapper, r - anchor)
                runs[r] = _moved(runs[anchor], mapper, r - anchor)
                continue
        reps[r] = decode_trace(data, str(files[r]), cache=seen)
        anchor = r
    return reps


def _mapped(trace: Trace, mapper: _Mapper, off: int) -> Trace:
    """``trace`` with its peers and groups moved by ``off`` (checked movable before)."""
    nodes = []
    for node in trace.nodes:
        fields: dict[str, object] = {}
        for name in _MOVING:
            value = getattr(node, name)
            if value is not None and (name != "pg_name" or group_key(value)):
                moved = mapper.move(name, value, off)
                if moved != value:
                    fields[name] = moved
        nodes.append(replace(node, **fields) if fields else node)  # type: ignore[arg-type]
    return Trace(trace.metadata, tuple(nodes))


def _read_all(prefix: str, files: Sequence[Path], max_bytes: int) -> TraceSet:
    """Every rank's trace (nodes repeated across files decoded once)."""
    seen: dict[str, dict[bytes, object]] = {}
    traces = tuple(decode_trace(read_bounded(f, max_bytes), str(f), cache=seen) for f in files)
    return TraceSet(prefix, traces)


#: A piece of a replica-0 rank's file (:func:`_runs`): bytes every replica shares, or a
#: node with the attributes that move with the replica: its pieces between them (one more
#: than the attributes), each attribute's (name, value), and the node's frame as it is.
_Piece = bytes | tuple[tuple[bytes, ...], tuple[tuple[str, int | str], ...], bytes]
_MOVING = ("comm_src", "comm_dst", "pg_name")
_UNSEEN = object()


def _runs(trace: Trace, mapper: _Mapper) -> list[_Piece]:
    """``trace``'s file as pieces (:data:`_Piece`): the nodes no replica changes, encoded
    once and joined, and the sends, receives and collectives of named groups, whose peers
    and groups may move."""
    cache = mapper.pieces
    out: list[_Piece] = [metadata_frame(trace.metadata, "metadata")]
    static: list[bytes] = []
    for node in trace.nodes:
        pg = node.pg_name if node.pg_name is not None and group_key(node.pg_name) else None
        names = [n for n in _MOVING if getattr(node, n) is not None and (n != "pg_name" or pg)]
        if not names:
            static.append(frame(b"".join(node_pieces(node, cache))))
            continue
        if static:
            out.append(b"".join(static))
            static = []
        parts, at = node_template(node, names, cache)
        cuts = sorted((at[n], n) for n in names)
        between, prev = [], 0
        for i, _ in cuts:
            between.append(b"".join(parts[prev:i]))
            prev = i + 1
        between.append(b"".join(parts[prev:]))
        fields = tuple((n, getattr(node, n)) for _, n in cuts)
        out.append((tuple(between), fields, frame(b"".join(parts))))
    if static:
        out.append(b"".join(static))
    return out


def _moved(runs: list[_Piece], mapper: _Mapper, off: int) -> list[_Piece]:
    """The pieces of the file ``off`` ranks from the one ``runs`` describe (its moving
    attributes moved; checked movable before)."""
    out: list[_Piece] = []
    for item in runs:
        if isinstance(item, bytes):
            out.append(item)
            continue
        between, fields, _ = item
        moved = tuple((n, mapper.move(n, v, off)) for n, v in fields)
        body = _body(between, moved, mapper)
        assert body is not None
        out.append((between, moved, frame(body)))  # type: ignore[arg-type]
    return out


def _body(between: tuple[bytes, ...], fields: Sequence[tuple[str, object]],
          mapper: _Mapper) -> bytes | None:  # fmt: skip
    """A node's message from its pieces and its attributes' values (None: unmovable)."""
    body = [between[0]]
    for (name, value), after in zip(fields, between[1:], strict=True):
        if value is None:
            return None
        body += (known_attr_piece(name, value, mapper.pieces), after)  # type: ignore[arg-type]
    return b"".join(body)


def _expected(runs: list[_Piece], mapper: _Mapper, off: int) -> bytes | None:
    """The file of the replica ``off`` ranks from the one ``runs`` describe; None where a
    peer or group cannot move there."""
    out: list[bytes] = []
    moves: dict[tuple[str, int | str], int | str | None] = {}
    for item in runs:
        if isinstance(item, bytes):
            out.append(item)
            continue
        between, fields, as_is = item
        moved = []
        same = True
        for name, value in fields:
            to = moves.get((name, value), _UNSEEN)
            if to is _UNSEEN:
                to = moves[(name, value)] = mapper.move(name, value, off)
            same = same and to == value
            moved.append((name, to))
        if same:
            out.append(as_is)
            continue
        body = _body(between, moved, mapper)
        if body is None:
            return None
        out.append(frame(body))
    return b"".join(out)
