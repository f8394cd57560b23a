"""Import nccl-tests output (every ``*_perf`` binary) as collective measurements.

Reads the table nccl-tests prints, out-of-place and in-place, plus what the log says about
the job: the device lines (ranks, hosts, GPU names), ``nThread``/``nGpus``, the NCCL
version, the command line, ``Collective test starting: X_perf``. Copes with the variations
found in the wild: MPI rank prefixes (``0: ``, ``[1,0]<stdout>:``), a missing leading
``#``, shell command lines and prose around a pasted log, partial sweeps, elided lines
(``...``, ``< truncated ... >``), logs that print only the last device line, ``N/A``
fields. Times are nccl-tests' mean over its timed iterations, in microseconds in the log
and seconds in the records; algbw/busbw are kept as printed (GB/s).

>>> text = '''# Collective test starting: all_reduce_perf
... #  Rank  0 Group  0 Pid 1 on node1 device  0 [0x1a] NVIDIA H100 80GB HBM3
... #  Rank  1 Group  0 Pid 2 on node1 device  1 [0x1b] NVIDIA H100 80GB HBM3
... #       size   count  type redop root   time  algbw  busbw #wrong   time  algbw  busbw #wrong
...      1048576  262144 float   sum   -1  20.00  52.43  52.43      0  19.00  55.19  55.19      0
... '''
>>> m = parse_nccl_tests(text, source="example.log", created="2025-01-01T00:00:00Z")
>>> [(r.op, r.size_bytes, r.in_place, r.n_ranks) for r in m.records]
[('all_reduce', 1048576, False, 2), ('all_reduce', 1048576, True, 2)]
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from calibrate.measurements import (
    DTYPE_BYTES,
    CollectiveRecord,
    Measurements,
    Meta,
    merge_measurements,
    save_measurements,
    utc_now,
)
from calibrate.nccl_scan import ScannedLog, scan_log
from sim import files
from sim.collectives.schedule import busbw_factor
from sim.errors import CalibrationError, ConfigError
from sim.files import check_output_path

__all__ = ["BINARY_OPS", "import_nccl_tests", "parse_nccl_tests"]

#: nccl-tests binary (without ``_perf``) → simulator op. hypercube_perf is an all-gather.
BINARY_OPS: dict[str, str] = {
    "all_reduce": "all_reduce",
    "all_gather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "alltoall": "all_to_all",
    "sendrecv": "send_recv",
    "hypercube": "all_gather",
}
_SOURCE_NAMES = (  # longest first, so "all_reduce" wins over "reduce"
    ("reduce_?scatter", "reduce_scatter"), ("all_?reduce", "all_reduce"),
    ("all_?gather", "all_gather"), ("all_?to_?all", "all_to_all"),
    ("send_?recv", "send_recv"), ("broadcast", "broadcast"), ("hypercube", "all_gather"),
    ("reduce", "reduce"),
)  # fmt: skip


def _op_from_binaries(log: ScannedLog, source: str) -> str | None:
    named: dict[str, int] = {}
    for no, binary in log.binaries:
        if binary not in BINARY_OPS:
            known = ", ".join(f"{b}_perf" for b in BINARY_OPS)
            why = f"{binary}_perf is not supported; supported: {known}"
            raise CalibrationError(f"{source}, line {no}: {why}")
        named.setdefault(BINARY_OPS[binary], no)
    if len(named) > 1:
        which = ", ".join(f"{op} (line {no})" for op, no in named.items())
        raise CalibrationError(f"{source}: log names more than one test: {which}; split it")
    return next(iter(named), None)


def _ops_from_columns(log: ScannedLog) -> set[str]:
    """Ops whose nccl-tests columns (redop, root, count) fit every row."""
    ops = set(BINARY_OPS.values())
    for r in log.rows:
        per_rank = r.count * DTYPE_BYTES[r.dtype] < r.size
        if r.root >= 0:
            ops &= {"broadcast"} if r.redop == "none" else {"reduce"}
        elif r.redop == "none":
            ops &= {"all_gather", "all_to_all"} if per_rank else set()
        else:
            ops &= {"reduce_scatter"} if per_rank else {"all_reduce", "send_recv"}
    return ops


def _op_from_source(source: str) -> str | None:
    name = os.path.basename(source).lower()
    return next((op for pat, op in _SOURCE_NAMES if re.search(pat, name)), None)


def _infer_op(log: ScannedLog, source: str, op: str | None) -> tuple[str, str]:
    """The op and how it was decided."""
    stated = _op_from_binaries(log, source)
    fits = _ops_from_columns(log)
    if op is not None:
        if op not in set(BINARY_OPS.values()):
            allowed = ", ".join(sorted(set(BINARY_OPS.values())))
            raise CalibrationError(f"{source}: op={op!r} is unknown; allowed: {allowed}")
        if stated is not None and stated != op:
            raise CalibrationError(f"{source}: op={op!r} given but the log runs {stated}")
        if log.rows and op not in fits:
            fit = " or ".join(sorted(fits)) or "no known op"
            raise CalibrationError(f"{source}: op={op!r} does not fit the columns "
                                   f"(redop, root, count), which fit {fit}")  # fmt: skip
        return op, "argument"
    if stated is not None:
        if stated not in fits:
            log.notes.append(f"columns (redop, root, count) do not fit {stated}")
        return stated, "log text"
    by_name = _op_from_source(source)
    if len(fits) == 1:
        return next(iter(fits)), "columns (redop, root, count)"
    if by_name is not None and (by_name in fits or not log.rows):
        return by_name, "source name"
    options = " or ".join(sorted(fits)) or "no known op"
    raise CalibrationError(
        f"{source}: cannot tell which collective this log measured (columns fit {options}); "
        "pass op=... (e.g. --op all_reduce)"
    )


def _ranks_from_busbw(log: ScannedLog, op: str) -> int | None:
    """Ranks from busbw = algbw × factor(n), when exactly one n fits the printed rounding."""
    sides = [(a, b) for r in log.rows for _, _, a, b in r.sides if a and b and a >= 0.5]
    varies = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
    if not sides or op not in varies or any(b == "hypercube" for _, b in log.binaries):
        return None
    alg, bus = max(sides)  # the largest printed values carry the most digits
    fits = [n for n in range(2, 65537) if abs(alg * busbw_factor(op, n) - bus) <= 0.02]
    return fits[0] if len(fits) == 1 else None


def _infer_ranks(log: ScannedLog, op: str, n_ranks: int | None) -> tuple[int | None, str]:
    if n_ranks is not None:
        return n_ranks, "argument"
    if log.devices:
        return max(log.devices) + 1, "device lines"
    if (n := _ranks_from_busbw(log, op)) is not None:
        return n, "busbw/algbw ratio"
    if op in ("all_gather", "reduce_scatter", "all_to_all") and log.rows:
        r = log.rows[-1]
        if r.count > 0 and r.size >= r.count * DTYPE_BYTES[r.dtype]:
            return r.size // (r.count * DTYPE_BYTES[r.dtype]), "size/count ratio"
    if "nGpus" in log.header:
        n = log.header["nGpus"] * log.header.get("nThread", 1) * (log.launcher_procs or 1)
        return n, "nGpus × nThread × processes (header or command line)"
    return None, "unknown"


def _records(
    log: ScannedLog, op: str, n: int, source: str
) -> tuple[list[CollectiveRecord], list[str]]:
    records, notes = [], []
    hypercube = any(b == "hypercube" for _, b in log.binaries)
    if hypercube:  # it prints size·(n−1)/n / time as algbw; all_gather's algbw is size/time
        notes.append("hypercube_perf: algbw recomputed as size/time (all_gather's definition)")
    for r in log.rows:
        for in_place, us, alg, bus in r.sides:
            if us is None or alg is None or bus is None:
                notes.append(f"line {r.line_no}: {'in' if in_place else 'out-of'}-place is N/A")
                continue
            alg = r.size / (us * 1e3) if hypercube else alg
            records.append(CollectiveRecord(
                op=op, size_bytes=r.size, count=r.count, dtype=r.dtype, time_s=us / 1e6,
                time_spread_s=None, algbw_GBps=alg, busbw_GBps=bus, in_place=in_place,
                n_ranks=n, iters=log.header.get("iters"),
            ))  # fmt: skip
    if not records:
        raise CalibrationError(f"{source}: no timed rows (every time is N/A)")
    return records, notes


def _placement(log: ScannedLog, n: int) -> tuple[list[str], int | None, int | None, list[str]]:
    hosts = sorted({h for h, _ in log.devices.values()})
    if len(log.devices) != n:
        note = f"device lines list {len(log.devices)} of {n} ranks; nodes not known"
        return hosts, None, None, [note] if log.devices else []
    per_host = [sum(1 for h, _ in log.devices.values() if h == host) for host in hosts]
    gpn = per_host[0] if len(set(per_host)) == 1 else None
    return hosts, len(hosts), gpn, []


def parse_nccl_tests(
    text: str,
    source: str,
    op: str | None = None,
    n_ranks: int | None = None,
    created: str | None = None,
) -> Measurements:
    """Parse the output of one nccl-tests ``*_perf`` run.

    Parameters
    ----------
    text : str
        The log as printed (rank prefixes, prose and command lines allowed).
    source : str
        Where it came from (a path); named in errors and recorded as ``meta.source``.
    op : str, optional
        The collective, when the log does not say (one of the simulator's op names).
    n_ranks : int, optional
        Ranks, when neither device lines, busbw/algbw, counts nor nGpus tell.
    created : str, optional
        Fixed ``meta.created`` (UTC ISO-8601) for deterministic output.

    Returns
    -------
    Measurements
        Kind ``"collectives"``: two records per row (out-of-place, in-place), time in s.

    Raises
    ------
    CalibrationError
        Naming the line number and the line for garbage, or what could not be decided.
    """
    log = scan_log(text, source)
    if not log.rows:
        stray = f"; line {log.first_stray[0]} is not nccl-tests output: " \
                f"{log.first_stray[1].strip()[:120]!r}" if log.first_stray else ""  # fmt: skip
        raise CalibrationError(f"{source}: no nccl-tests result rows found{stray}")
    the_op, op_how = _infer_op(log, source, op)
    n, n_how = _infer_ranks(log, the_op, n_ranks)
    if n is None or n < 1:
        raise CalibrationError(
            f"{source}: cannot tell how many ranks ran (no device lines, nGpus or informative "
            "busbw/algbw); pass n_ranks=..."
        )
    records, row_notes = _records(log, the_op, n, source)
    hosts, nodes, gpn, place_notes = _placement(log, n)
    gpus = sorted({g for _, g in log.devices.values()})
    binary = next((f"{b}_perf" for _, b in log.binaries), None)
    details = {"binary": binary, "op_source": op_how, "n_ranks_source": n_how,
               "command": log.command, "avg_busbw_GBps": log.avg_busbw}  # fmt: skip
    meta = Meta(
        source=source, created=utc_now(created), hosts=tuple(hosts),
        gpu_model=", ".join(gpus) or None, nccl_version=log.nccl_version, world_size=n,
        nodes=nodes, gpus_per_node=gpn, backend="nccl", time_statistic="mean", spread=None,
        notes=tuple(log.notes + row_notes + place_notes),
        details={k: v for k, v in details.items() if v is not None},
    )  # fmt: skip
    return Measurements(kind="collectives", meta=meta, records=tuple(records))


def _read_log(p: Path) -> str:
    """A log's text; bytes that are not UTF-8 become U+FFFD (logs mix encodings).

    Read by :func:`sim.files.read_bytes`: a FIFO, a device (``/dev/zero``) or a file over
    :data:`sim.files.MAX_FILE_BYTES` is refused before any byte is read.
    """
    try:
        data = files.read_bytes(p, "nccl-tests log")
    except ConfigError as err:
        raise CalibrationError(str(err)) from None
    if b"\x00" in data:
        raise CalibrationError(f"{p}: a binary file, not an nccl-tests log (a NUL byte)")
    return data.decode("utf-8", errors="replace")


def import_nccl_tests(
    paths: Iterable[str | os.PathLike[str]],
    out: str | os.PathLike[str] | None = None,
    op: str | None = None,
    created: str | None = None,
) -> Measurements:
    """Parse nccl-tests logs into one measurement file (written to ``out`` when given).

    Meta fields that differ between the logs (GPU, nodes) become None; notes name their log.

    Raises
    ------
    CalibrationError
        For an unreadable, empty or garbled log (naming the file and line), or no paths.
    """
    if out is not None:
        check_output_path(out, "--out")
    parts = []
    for path in paths:
        p = Path(path)
        text = _read_log(p)
        parts.append(parse_nccl_tests(text, str(p), op=op, created=created))
    if not parts:
        raise CalibrationError("import-nccl-tests: no log files given")
    merged = merge_measurements(parts, created)
    if out is not None:
        save_measurements(merged, out)
    return merged
