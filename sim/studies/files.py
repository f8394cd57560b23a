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

import csv
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from sim.errors import ConfigError, MissingExtraError
from sim.files import write_atomic

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


def _drop_partial_line(path: Path) -> None:
    """Cut a last line without its newline (a write interrupted by a kill)."""
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        with open(path, "r+b") as f:
            f.truncate(cut)


def read_rows(path: Path, columns: Sequence[str]) -> list[dict[str, Any]]:
    """Rows of a (partial) sweep file; raises ConfigError if its columns differ."""
    if path.suffix == ".parquet":
        frame = _pandas().read_parquet(path)
        rows: list[dict[str, Any]] = (
            frame.astype(object).where(frame.notna(), None).to_dict("records")
        )
        found = list(frame.columns)
    elif path.suffix == ".csv":
        reader = csv.reader(io.StringIO(path.read_text(encoding="utf-8")))
        lines = list(reader)
        if not lines:
            return []
        found = lines[0]
        rows = [dict(zip(found, map(_parse_cell, line), strict=False)) for line in lines[1:]]
    else:
        text = path.read_text(encoding="utf-8")
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        found = list(rows[0]) if rows else list(columns)
    if list(found) != list(columns):
        raise ConfigError(
            f"{path}: its columns ({', '.join(found)}) are not this sweep's "
            f"({', '.join(columns)}); resume only the sweep that wrote it"
        )
    return rows


def _pandas() -> Any:
    try:
        import pandas
    except ImportError:
        raise MissingExtraError(
            "Parquet files and data frames need pandas and pyarrow: pip install 'clustersim[data]'"
        ) from None
    return pandas


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
        if path.suffix == ".parquet":
            _pandas()
            try:
                import pyarrow  # noqa: F401
            except ImportError:
                raise MissingExtraError(
                    "Parquet files need pyarrow: pip install 'clustersim[data]'"
                ) from None
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
            _drop_partial_line(self.stream)
            return read_rows(self.stream, self.columns)
        if self.path.exists():  # a finished Parquet sweep
            return read_rows(self.path, self.columns)
        return []

    def append(self, row: Mapping[str, Any]) -> None:
        """Write one row at the end of the file and flush it."""
        if self._file is None:
            new = not self.stream.exists() or self.stream.stat().st_size == 0
            self._file = open(self.stream, "a", encoding="utf-8", newline="")  # noqa: SIM115
            if new and self.stream.suffix == ".csv":
                self._file.write(csv_text([], self.columns))
        line = (
            csv_text([row], self.columns, header=False)
            if self.stream.suffix == ".csv"
            else _jsonl_line(row, self.columns)
        )
        self._file.write(line)
        self._file.flush()

    def close(self) -> None:
        """Close the stream (rows stay as written)."""
        if self._file is not None:
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
