"""Scanning nccl-tests output line by line into rows and facts (no inference yet).

Tolerates what real logs contain: MPI rank prefixes (``0: ``, ``[1,0]<stdout>:``), a missing
leading ``#``, shell command lines, "Using devices" blocks, partial sweeps, elided rows and
N/A fields. :mod:`calibrate.nccl_tests` decides the op and the rank count from the facts.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from calibrate.measurements import DTYPE_BYTES
from sim.errors import CalibrationError

__all__ = ["MAX_DIGITS", "MAX_LINE_CHARS", "ScannedLog", "ScannedRow", "garbage_error", "scan_log"]

#: Longest line scanned (characters). nccl-tests lines are under 200; a longer one is prose
#: or junk (a pasted binary, an environment dump) and is skipped with a note, never given
#: to the patterns below, whose work grows with the line.
MAX_LINE_CHARS = 4096
#: Most digits of an integer read from a log (ranks, counts, sizes): 18 digits hold any
#: real size (2^62 bytes) and stay far from Python's 4,300-digit conversion limit.
MAX_DIGITS = 18

_NCCL_DTYPES = {
    "float": "float32", "half": "float16", "double": "float64", "bfloat16": "bfloat16",
    "int8": "int8", "uint8": "uint8", "int32": "int32", "uint32": "uint32", "int64": "int64",
    "uint64": "uint64", "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2",
    **{name: name for name in DTYPE_BYTES},
}  # fmt: skip
_DEFAULT_LAYOUT = "size count type redop root time algbw busbw wrong time algbw busbw wrong"
_PREFIX = re.compile(r"^(?:\s*\d+:\s?|\[\d+,\d+\]<std(?:out|err)>:\s?)")
_BINARY = re.compile(r"([A-Za-z_]+?)_perf(?:_mpi)?\b")
_DEVICE = re.compile(
    r"Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s+(.*)$"
)
_ELIDED = re.compile(r"^\.\.\.|^<.*truncat.*>$", re.IGNORECASE)


@dataclass
class ScannedRow:
    """One table row: size, count, dtype, redop, root and (in_place, us, algbw, busbw) sides."""

    line_no: int
    size: int
    count: int
    dtype: str
    redop: str
    root: int
    sides: list[tuple[bool, float | None, float | None, float | None]]  # in_place, us, alg, bus


@dataclass
class ScannedLog:
    """Facts gathered from one log, before the op and the rank count are decided."""

    rows: list[ScannedRow] = field(default_factory=list)
    devices: dict[int, tuple[str, str]] = field(default_factory=dict)  # rank → (host, gpu)
    binaries: list[tuple[int, str]] = field(default_factory=list)
    layout: list[str] | None = None
    header: dict[str, int] = field(default_factory=dict)  # nThread, nGpus, iters
    launcher_procs: int | None = None
    command: str | None = None
    nccl_version: str | None = None
    avg_busbw: float | None = None
    notes: list[str] = field(default_factory=list)
    stray: tuple[int, str] | None = None  # first unrecognised line since the last row
    first_stray: tuple[int, str] | None = None


def garbage_error(source: str, line_no: int, line: str, why: str) -> CalibrationError:
    """The one-line error naming the file, the line number and the line."""
    return CalibrationError(f"{source}, line {line_no}: {why}: {line.strip()[:120]!r}")


def scan_log(text: str, source: str) -> ScannedLog:
    """Rows, device lines, binaries and header facts of one log; garbage raises, naming the line."""
    log = ScannedLog()
    for no, raw in enumerate(text.splitlines(), start=1):
        if len(raw) > MAX_LINE_CHARS:
            head = _PREFIX.sub("", raw[:200], count=1).strip().lstrip("#").strip()
            if head[:1].isdigit():  # a table row (or a rank prefix) of absurd length
                raise garbage_error(
                    source, no, raw[:120], f"{len(raw):,} characters in a table row"
                )
            log.notes.append(
                f"line {no}: {len(raw):,} characters, longer than any nccl-tests line; skipped"
            )
            continue
        line = _PREFIX.sub("", raw.rstrip("\r\n"), count=1)
        body = line.strip()
        commented = body.startswith("#")
        content = body.lstrip("#").strip()
        if content:
            _scan_line(log, no, line, content, commented, source)
    return log


def _scan_line(
    log: ScannedLog, no: int, line: str, content: str, commented: bool, source: str
) -> None:
    if content[0].isdigit():
        if log.stray is not None and log.layout is not None:
            s_no, s_line = log.stray
            raise garbage_error(source, s_no, s_line, "not nccl-tests output (inside the table)")
        log.rows.append(_parse_row(log, no, line, content, source))
        return
    if _ELIDED.search(content):
        log.notes.append(f"line {no}: elided in the source, skipped: {content[:60]!r}")
    elif m := re.search(r"Collective test (?:starting|concluded):\s*(\S+)", content):
        log.binaries.extend((no, b) for b in _BINARY.findall(m.group(1)))
    elif m := _DEVICE.search(content):
        log.devices[_whole(m.group(1), "rank", (source, no, line))] = (
            m.group(2),
            m.group(3).strip(),
        )
    elif m := re.search(r"NCCL version\s+(\S+)", content):
        log.nccl_version = m.group(1)
    elif m := re.search(r"Avg bus bandwidth\s*:\s*([0-9.]+)", content):
        log.avg_busbw = float(m.group(1))
    elif re.search(r"\bnThread\s+\d+", content):
        _scan_header(log, content)
    elif re.match(r"size\s+count\s+type\b", content):
        log.layout = ["wrong" if c in ("#wrong", "error") else c for c in content.split()]
        log.stray = None  # prose before the table is fine
    elif not commented and _BINARY.search(content):  # a shell command line
        _scan_command(log, no, content)
    elif not commented and not _known_text(content):
        log.stray = log.stray or (no, line)
        log.first_stray = log.first_stray or (no, line)


def _known_text(content: str) -> bool:
    words = ("out-of-place", "(B)", "Out of bounds", "Using devices", "Reducing maxBytes")
    return any(w in content for w in words)


def _scan_header(log: ScannedLog, content: str) -> None:
    for key, pattern in (
        ("nThread", r"nThread\s+(\d+)"),
        ("nGpus", r"nGpus\s+(\d+)"),
        ("iters", r"(?<!warmup )(?<!agg )iters:\s*(\d+)"),
    ):
        if (m := re.search(pattern, content)) and len(m.group(1)) <= MAX_DIGITS:
            log.header[key] = int(m.group(1))


def _scan_command(log: ScannedLog, no: int, content: str) -> None:
    """A shell command line: the binary names the op; flags give GPUs, threads, iters."""
    m = _BINARY.search(content)
    assert m is not None
    log.binaries.append((no, m.group(1)))
    log.command = content
    launcher, test = content[: m.start()], content[m.end() :]
    if n := re.search(r"(?:^|\s)(?:-np|-n|--np|--ntasks)[\s=]*(\d{1,18})\b", launcher):
        log.launcher_procs = int(n.group(1))
    for key, flag in (
        ("nGpus", "-g|--ngpus"),
        ("nThread", "-t|--nthreads"),
        ("iters", "-n|--iters"),
    ):
        if f := re.search(rf"(?:^|\s)(?:{flag})[\s=]*(\d{{1,18}})\b", test):
            log.header.setdefault(key, int(f.group(1)))


def _whole(token: str, what: str, where: tuple[str, int, str]) -> int:
    """An integer of at most :data:`MAX_DIGITS` digits; longer ones are refused unread."""
    if len(token) > MAX_DIGITS:
        raise garbage_error(*where, f"{what} has {len(token):,} digits, more than any real {what}")
    return int(token)


def _number(token: str, kind: type, what: str, where: tuple[str, int, str]) -> float | None:
    if token.upper() == "N/A":
        return None
    if len(token) > 40:  # never converted: a 4,400-digit integer costs seconds, then fails
        raise garbage_error(
            *where, f"{what} {token[:20]!r}... ({len(token):,} characters) is not a number"
        )
    try:
        value = float(kind(token))
    except (ValueError, OverflowError):
        raise garbage_error(*where, f"cannot read {what} {token[:40]!r}") from None
    if not math.isfinite(value) or value > 2.0**62:
        raise garbage_error(*where, f"{what} {token[:40]!r} is not a finite number of sane size")
    return value


def _parse_row(log: ScannedLog, no: int, line: str, content: str, source: str) -> ScannedRow:
    layout = log.layout or _DEFAULT_LAYOUT.split()
    fields = content.split()
    where = (source, no, line)
    if len(fields) != len(layout):
        why = f"expected {len(layout)} columns ({' '.join(layout)}), got {len(fields)}"
        raise garbage_error(*where, why)
    col = {name: fields[i] for i, name in reversed(list(enumerate(layout)))}  # first wins
    dtype = _NCCL_DTYPES.get(col.get("type", "float"))
    if dtype is None:
        raise garbage_error(*where, f"unknown data type {col['type']!r}")
    size, count = (_number(col[k], int, k, where) for k in ("size", "count"))
    if size is None or count is None or size <= 0 or count <= 0:
        raise garbage_error(*where, "size and count must be positive integers")
    sides = []
    starts = [i for i, name in enumerate(layout) if name == "time"]
    for side, start in enumerate(starts[:2]):
        if layout[start : start + 3] != ["time", "algbw", "busbw"]:
            raise garbage_error(*where, "header has no time/algbw/busbw columns")
        values = [_number(fields[start + k], float, layout[start + k], where) for k in range(3)]
        if values[0] is not None and values[0] <= 0:
            raise garbage_error(*where, f"time must be positive, got {values[0]}")
        sides.append((side == 1, values[0], values[1], values[2]))
    root = _number(col.get("root", "-1"), int, "root", where)
    log.stray = None
    root = -1 if root is None else int(root)
    return ScannedRow(no, int(size), int(count), dtype, col.get("redop", "none"), root, sides)


# --- deciding what the log measured ----------------------------------------------------
