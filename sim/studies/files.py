"""Sweep result files: rows appended as points finish, read back to resume, finished in order.

Formats by suffix: ``.csv`` (a header, then a row per point), ``.jsonl`` (a JSON object
a line) and ``.parquet`` (the ``[data]`` extra). A Parquet file cannot be appended to,
so its rows stream into ``FILE.parquet.partial.jsonl`` and the Parquet file is written
when the sweep ends. Each row is written with one ``write`` and flushed, so a killed sweep
leaves whole rows and at most one partial last line, which resuming drops.

When the sweep ends the file is rewritten in point order with ``scaling_efficiency``
filled in: the finished file is the same whatever the number of workers or the order in
which points finished.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from sim.errors import ConfigError, MissingExtraError
from sim.files import decode_text, load_json, read_bytes, write_atomic

__all__ = ["FORMATS", "RowFile", "cell", "csv_text", "read_rows"]

FORMATS = (".csv", ".jsonl", ".parquet")


def cell(value: Any) -> str:
    """A value as a CSV cell: empty for None, ``true``/``false``, floats by ``repr``.

    >>> [cell(v) for v in (None, True, 0.1, 3, "ib")]
    ['', 'true', '0.1', '3', 'ib']
    """
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _parse_cell(text: str) -> Any:
    if text == "":
        return None
    if text in ("true", "false"):
        return text == "true"
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            pass
    return text


def csv_text(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], header: bool = True) -> str:
    """Rows as CSV text (``\\n`` line ends) in ``columns`` order."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    if header:
        w.writerow(columns)
    for r in rows:
        w.writerow([cell(r.get(c)) for c in columns])
    return buf.getvalue()


def _jsonl_line(row: Mapping[str, Any], columns: Sequence[str]) -> str:
    return json.dumps({c: row.get(c) for c in columns}, allow_nan=False) + "\n"


def _cut_row_or_refuse(path: Path, whole: bytes, tail: bytes, columns: Sequence[str]) -> None:
    """Refuse a last line without its newline that cannot be a row this sweep was writing
    when it was killed: a CSV file needs its header line whole (or a cut header), a JSON
    line starts as this sweep's rows start. The file is then not this sweep's, and it is
    left as it is."""
    if not tail:
        return
    if path.suffix == ".csv":
        header = csv_text([], columns).encode("utf-8")
        ours = bool(whole) or header.startswith(tail)
    else:
        start = ("{" + json.dumps(columns[0]) + ":").encode("utf-8")  # as _jsonl_line's rows
        n = min(len(start), len(tail))
        ours = tail[:n] == start[:n]
    if not ours:
        raise ConfigError(
            f"--out {str(path)!r} does not hold this sweep's rows (its last line starts "
            f"{tail[:40].decode('utf-8', 'replace')!r}); resume only the sweep that wrote it"
        )


def _columns_differ(path: Path, found: Sequence[str], columns: Sequence[str]) -> ConfigError:
    return ConfigError(
        f"{path}: its columns ({', '.join(map(str, found))}) are not this sweep's "
        f"({', '.join(columns)}); resume only the sweep that wrote it"
    )


def _read_parquet(path: Path) -> Any:
    """``path`` as a pandas frame; a file that is not Parquet is one clear error."""
    pandas, pyarrow = _pandas(), _pyarrow()
    try:
        return pandas.read_parquet(path)
    except (pyarrow.ArrowException, OSError, ValueError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ConfigError(
            f"--out {str(path)!r} is not a readable Parquet file ({first}); resume only the "
            "sweep that wrote it, or give another --out"
        ) from None


def read_rows(
    path: Path, columns: Sequence[str], data: bytes | None = None
) -> list[dict[str, Any]]:
    """Rows of a (partial) sweep file, each with exactly ``columns`` (``data``: the
    file's bytes to read instead, for CSV and JSON lines).

    Raises
    ------
    ConfigError
        The file's columns differ from ``columns``, a row has more or fewer cells than
        the header (CSV) or other keys (JSON lines), or a line is not JSON.
    """
    if path.suffix == ".parquet":
        frame = _read_parquet(path)
        if list(frame.columns) != list(columns):
            raise _columns_differ(path, list(frame.columns), columns)
        rows: list[dict[str, Any]] = (
            frame.astype(object).where(frame.notna(), None).to_dict("records")
        )
        return rows
    raw = read_bytes(path, "--out") if data is None else data
    text = decode_text(raw, f"--out {str(path)!r}")
    if path.suffix == ".csv":
        lines = list(csv.reader(io.StringIO(text)))
        if not lines:
            return []
        if lines[0] != list(columns):
            raise _columns_differ(path, lines[0], columns)
        for n, line in enumerate(lines[1:], 2):
            if len(line) != len(columns):
                raise ConfigError(
                    f"{path}: line {n} has {len(line)} cells, not {len(columns)}: the file "
                    "is damaged; remove that line to rerun its point"
                )
        return [dict(zip(columns, map(_parse_cell, line), strict=True)) for line in lines[1:]]
    rows = []
    for n, text_line in enumerate(text.splitlines(), 1):
        if not text_line.strip():
            continue
        row = load_json(text_line, f"{path}: line {n}")
        if not isinstance(row, dict) or list(row) != list(columns):
            found = list(row) if isinstance(row, dict) else [type(row).__name__]
            raise _columns_differ(path, found, columns)
        rows.append(row)
    return rows


def _pandas() -> Any:
    try:
        import pandas
    except ImportError:
        raise MissingExtraError(
            "Parquet files and data frames need pandas and pyarrow: pip install 'clustersim[data]'"
        ) from None
    return pandas


def _pyarrow() -> Any:
    """pyarrow (the ``[data]`` extra, beside pandas), or MissingExtraError."""
    try:
        import pyarrow
    except ImportError:
        raise MissingExtraError(
            "Parquet files need pyarrow: pip install 'clustersim[data]'"
        ) from None
    return pyarrow


class RowFile:
    """The result file of one sweep: append rows as they come, finish in point order.

    Parameters
    ----------
    path : Path
        ``.csv``, ``.jsonl`` or ``.parquet``.
    columns : sequence of str
        Every row's columns, in order.
    resume : bool
        Continue an existing file (its whole rows are kept); without it an existing file
        is refused rather than overwritten.
    """

    def __init__(self, path: Path, columns: Sequence[str], resume: bool) -> None:
        if path.suffix not in FORMATS:
            raise ConfigError(
                f"--out {str(path)!r}: unknown type {path.suffix!r}; allowed: {', '.join(FORMATS)}"
            )
        if not path.parent.is_dir():
            raise ConfigError(f"--out {str(path)!r}: folder {str(path.parent)!r} does not exist")
        if path.exists() and not path.is_file():
            raise ConfigError(
                f"--out {str(path)!r}: not a regular file; a sweep appends to its file and "
                "reads it back to resume"
            )
        if path.suffix == ".parquet":
            _pandas()
            _pyarrow()
        self.path, self.columns = path, list(columns)
        self.stream = (
            path.with_name(path.name + ".partial.jsonl") if path.suffix == ".parquet" else path
        )
        existing = path.exists() or self.stream.exists()
        if existing and not resume:
            raise ConfigError(
                f"--out {str(path)!r} exists; add --resume to continue that sweep, or remove it"
            )
        self._file: IO[str] | None = None

    def done_rows(self) -> list[dict[str, Any]]:
        """Rows already written (whole rows only; a partial last line is dropped)."""
        if self.stream.exists():
            data = read_bytes(self.stream, "--out")
            cut = data.rfind(b"\n") + 1  # a last line without its newline: a killed write
            whole, tail = data[:cut], data[cut:]
            _cut_row_or_refuse(self.stream, whole, tail, self.columns)
            rows = read_rows(self.stream, self.columns, whole)  # refused: the file unchanged
            if tail:
                with open(self.stream, "r+b") as f:
                    f.truncate(cut)
            return rows
        if self.path.exists():  # a finished Parquet sweep
            return read_rows(self.path, self.columns)
        return []

    def append(self, row: Mapping[str, Any]) -> None:
        """Write one row at the end of the file and flush it.

        Raises
        ------
        ConfigError
            The row cannot be written (a full disk): the rows before it stay, and a cut
            last line is dropped when the sweep is resumed.
        """
        line = (
            csv_text([row], self.columns, header=False)
            if self.stream.suffix == ".csv"
            else _jsonl_line(row, self.columns)
        )
        try:
            if self._file is None:
                new = not self.stream.exists() or self.stream.stat().st_size == 0
                self._file = open(self.stream, "a", encoding="utf-8", newline="")  # noqa: SIM115
                if new and self.stream.suffix == ".csv":
                    self._file.write(csv_text([], self.columns))
            self._file.write(line)
            self._file.flush()
        except OSError as e:
            raise ConfigError(
                f"--out {str(self.path)!r}: cannot write a row ({e.strerror}); the rows "
                "before it are kept: add --resume to continue once it can be written"
            ) from None

    def close(self) -> None:
        """Close the stream (rows stay as written; a failing flush is ignored here, the
        failed write already said so)."""
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None

    def finish(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Replace the file by ``rows`` (all points, in order), atomically."""
        self.close()
        if self.path.suffix == ".parquet":
            pd = _pandas()
            frame = pd.DataFrame([{c: r.get(c) for c in self.columns} for r in rows])
            buf = io.BytesIO()
            frame.to_parquet(buf, index=False)
            write_atomic(self.path, buf.getvalue())
            self.stream.unlink(missing_ok=True)
            return
        if self.path.suffix == ".csv":
            text = csv_text(rows, self.columns)
        else:
            text = "".join(_jsonl_line(r, self.columns) for r in rows)
        write_atomic(self.path, text.encode("utf-8"))
