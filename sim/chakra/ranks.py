"""ET files on disk: one per rank, named ``PREFIX.RANK.et`` as ASTRA-sim opens them.

ASTRA-sim's workload layer opens ``<--workload-configuration>.<rank>.et`` for every rank
(``Workload.cc``: ``et_filename + "." + to_string(sys->id) + ".et"``), so a set of traces is
a prefix ``DIR/NAME`` and the files ``DIR/NAME.0.et`` ... ``DIR/NAME.<n-1>.et``.
:func:`read_traces` takes that prefix, a folder holding one such set, or one of its files,
and refuses a gap in the ranks; :func:`write_traces` encodes every rank before it writes
any file and never leaves rank files of an older, larger set beside the new ones.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sim.chakra.codec import decode_trace, encode_trace
from sim.chakra.stream import MAX_TRACE_BYTES, read_bounded
from sim.chakra.trace import Trace
from sim.errors import ConfigError
from sim.files import write_atomic

__all__ = [
    "TraceSet",
    "check_writable",
    "rank_files",
    "read_trace",
    "read_traces",
    "write_trace",
    "write_traces",
]

_RANK_FILE = re.compile(r"(?P<name>.+)\.(?P<rank>\d+)\.et")


@dataclass(frozen=True)
class TraceSet:
    """Every rank's trace of one workload.

    Attributes
    ----------
    prefix : str
        ``DIR/NAME``: rank ``r`` is the file ``f"{prefix}.{r}.et"`` (what ASTRA-sim's
        ``--workload-configuration`` takes).
    traces : tuple of Trace
        Rank ``r``'s trace at index ``r``.
    """

    prefix: str
    traces: tuple[Trace, ...]

    @property
    def num_ranks(self) -> int:
        """Ranks in the set."""
        return len(self.traces)

    def path(self, rank: int) -> str:
        """Rank ``rank``'s file name."""
        return f"{self.prefix}.{rank}.et"


def read_trace(path: str | os.PathLike[str], max_bytes: int = MAX_TRACE_BYTES) -> Trace:
    """Read one ET file (plain or gzip-compressed), bounded by ``max_bytes``.

    Raises
    ------
    ConfigError
        One line naming the file and the problem (see :func:`sim.chakra.codec.decode_trace`
        and :func:`sim.chakra.stream.read_bounded`).
    MissingExtraError
        protobuf is not installed.
    """
    return decode_trace(read_bounded(path, max_bytes), str(path))


def write_trace(path: str | os.PathLike[str], trace: Trace) -> Path:
    """Write one ET file atomically (a temporary file, then a rename).

    Raises
    ------
    ConfigError
        An invalid trace or an unwritable path; nothing is written then.
    MissingExtraError
        protobuf is not installed.
    """
    return write_atomic(path, encode_trace(trace, str(path)), "Chakra ET file")


def _ranks_in(folder: Path, name: str | None) -> dict[str, dict[int, Path]]:
    """Rank files in ``folder`` by workload name (only ``name``'s when given)."""
    found: dict[str, dict[int, Path]] = {}
    try:
        entries = sorted(folder.iterdir())
    except OSError as e:
        raise ConfigError(f"{folder}: cannot list the folder ({e.strerror})") from None
    for entry in entries:
        m = _RANK_FILE.fullmatch(entry.name)
        if m is None or (name is not None and m["name"] != name):
            continue
        if m["rank"] != str(int(m["rank"])):
            raise ConfigError(
                f"{entry}: rank {m['rank']} has a leading zero; ASTRA-sim opens "
                f"{m['name']}.{int(m['rank'])}.et"
            )
        found.setdefault(m["name"], {})[int(m["rank"])] = entry
    return found


def rank_files(source: str | os.PathLike[str]) -> tuple[str, list[Path]]:
    """The prefix of a set of ET files and its files, rank 0 first.

    Parameters
    ----------
    source : str or Path
        ``DIR/NAME`` (the prefix), a folder holding the files of one workload, or one of
        the files (``DIR/NAME.3.et``).

    Returns
    -------
    (str, list of Path)
        The prefix ``DIR/NAME`` and the files of ranks ``0 .. n-1``.

    Raises
    ------
    ConfigError
        No such files, files of several workloads in one folder (name one), or a missing
        rank (the first one missing is named).
    """
    path = Path(source)
    m = _RANK_FILE.fullmatch(path.name)
    if path.is_dir():
        folder, name = path, None
    elif m is not None and path.exists():
        folder, name = path.parent, m["name"]
    else:
        folder, name = path.parent, path.name
    if not folder.is_dir():
        raise ConfigError(f"{source}: folder {str(folder)!r} does not exist")
    found = _ranks_in(folder, name)
    if not found:
        pattern = f"{name}.RANK.et" if name is not None else "NAME.RANK.et"
        raise ConfigError(f"{source}: no Chakra ET files ({pattern}) in {str(folder)!r}")
    if len(found) > 1:
        names = ", ".join(sorted(found)[:6])
        raise ConfigError(
            f"{source}: the folder holds traces of several workloads ({names}); give {folder}/NAME"
        )
    ((name, ranks),) = found.items()
    prefix = str(folder / name)
    missing = next(r for r in range(len(ranks) + 1) if r not in ranks)
    if missing < len(ranks):
        raise ConfigError(
            f"{prefix}.{missing}.et: missing rank file ({len(ranks)} files, highest rank "
            f"{max(ranks)}; ranks must be 0..n-1)"
        )
    return prefix, [ranks[r] for r in range(len(ranks))]


def read_traces(source: str | os.PathLike[str], max_bytes: int = MAX_TRACE_BYTES) -> TraceSet:
    """Read every rank's ET file of a workload (see :func:`rank_files` for ``source``).

    Parameters
    ----------
    source : str or Path
        ``DIR/NAME``, a folder with one workload's files, or one of its files.
    max_bytes : int
        Largest file read (bytes, each file).

    Returns
    -------
    TraceSet

    Raises
    ------
    ConfigError
        As :func:`rank_files` and :func:`read_trace`: one line naming the file.
    MissingExtraError
        protobuf is not installed.
    """
    prefix, files = rank_files(source)
    return TraceSet(prefix, tuple(read_trace(f, max_bytes) for f in files))


def check_writable(prefix: str, num_ranks: int) -> None:
    """Refuse to write ``num_ranks`` rank files at ``prefix`` (``DIR/NAME``) where they
    cannot go: a folder that does not exist, or rank files ``PREFIX.<r>.et`` with
    ``r >= num_ranks`` already there (they would be read as part of the new set).

    Raises
    ------
    ConfigError
        One line naming the folder or the first stale file.
    """
    folder, name = Path(prefix).parent, Path(prefix).name
    if not name or not folder.is_dir():
        raise ConfigError(f"{prefix}: folder {str(folder)!r} does not exist")
    stale = sorted(r for r in _ranks_in(folder, name).get(name, {}) if r >= num_ranks)
    if stale:
        raise ConfigError(
            f"{prefix}.{stale[0]}.et: already there from another set of traces ({len(stale)} "
            f"files with ranks >= {num_ranks}); remove them or write elsewhere"
        )


def write_traces(prefix: str | os.PathLike[str], traces: Sequence[Trace]) -> TraceSet:
    """Write ``traces`` as ``PREFIX.0.et`` ... ``PREFIX.<n-1>.et``.

    Every trace is encoded (and so checked) before the first file is written, once per
    distinct object (ranks given the same :class:`Trace` object share its bytes); each
    file is written atomically.

    Raises
    ------
    ConfigError
        No traces, an invalid trace (nothing written), a folder that does not exist, or
        rank files ``PREFIX.<r>.et`` with ``r >= n`` already there (they would be read as
        part of this set: remove them or write elsewhere).
    MissingExtraError
        protobuf is not installed.
    """
    text = str(prefix)
    if not traces:
        raise ConfigError(f"{text}: no traces to write")
    check_writable(text, len(traces))
    encoded: dict[int, bytes] = {}  # by id(): a trace given for several ranks, encoded once
    pieces: dict[object, bytes] = {}  # ranks' traces share most of their nodes' bytes
    data = []
    for r, t in enumerate(traces):
        if id(t) not in encoded:
            encoded[id(t)] = encode_trace(t, f"{text}.{r}.et", cache=pieces)
        data.append(encoded[id(t)])
    for r, blob in enumerate(data):
        write_atomic(f"{text}.{r}.et", blob, "Chakra ET file")
    return TraceSet(text, tuple(traces))
