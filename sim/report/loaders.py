"""Read result files into :class:`ResultSet` objects; refuse bad files in one line.

A result file is JSON (one run record, or a list of run, plan, sweep or collective
records), JSON Lines (one record a line) or CSV (sweep rows). Which kind of result it
holds is told by its fields (see :func:`detect_kind`) unless the caller says.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from sim.errors import ConfigError
from sim.files import load_json, read_text
from sim.report.records import CollectiveRecord, PlanRecord, RunRecord, SweepRow

__all__ = ["KINDS", "ResultKind", "ResultSet", "detect_kind", "load_results"]

ResultKind = Literal["run", "plan", "sweep", "collective"]
KINDS: tuple[ResultKind, ...] = ("run", "plan", "sweep", "collective")
_MODELS: dict[str, type[BaseModel]] = {
    "run": RunRecord,
    "plan": PlanRecord,
    "sweep": SweepRow,
    "collective": CollectiveRecord,
}
_SUFFIXES = (".json", ".jsonl", ".csv")


@dataclass(frozen=True)
class ResultSet:
    """Records of one kind from one source (a file, or one command's results).

    Attributes
    ----------
    kind : {"run", "plan", "sweep", "collective"}
        What the records are.
    source : str
        Where they come from (the path as given); labels the report's series and tables.
    records : tuple
        The validated records (:class:`RunRecord`, :class:`PlanRecord` best first,
        :class:`SweepRow` or :class:`CollectiveRecord`), in file order.
    """

    kind: ResultKind
    source: str
    records: tuple[Any, ...]

    @classmethod
    def from_dicts(
        cls, items: Sequence[Mapping[str, Any]], kind: str | None = None, source: str = "results"
    ) -> ResultSet:
        """Validate plain dicts (e.g. ``[step_result.to_dict()]``) into a result set.

        Parameters
        ----------
        items : sequence of mappings
            The records, e.g. as a command would print them with ``--json``.
        kind : str, optional
            ``run``, ``plan``, ``sweep`` or ``collective``; default :func:`detect_kind`.
        source : str
            Label of the set in plots and the report.

        Examples
        --------
        >>> rs = ResultSet.from_dicts([{"op": "all_reduce", "size_bytes": 1024, "n_ranks": 8,
        ...     "time_s": 1e-5, "algbw_GBps": 0.1, "busbw_GBps": 0.18, "algorithm": "ring"}])
        >>> rs.kind, len(rs.records)
        ('collective', 1)
        """
        if not items:
            raise ConfigError(f"{source}: no records")
        for i, item in enumerate(items, 1):
            if not isinstance(item, Mapping):
                raise ConfigError(f"{source}: record {i} is {type(item).__name__}, not an object")
        if kind is None:
            kind = detect_kind(items, source)
        elif kind not in _MODELS:
            raise ConfigError(
                f"{source}: result kind {kind!r} is unknown; allowed: {', '.join(KINDS)}"
            )
        model = _MODELS[kind]
        records = []
        for i, item in enumerate(items, 1):
            try:
                records.append(model.model_validate(item))
            except ValidationError as e:
                raise ConfigError(_one_line(e, source, i if len(items) > 1 else None)) from None
        return cls(kind=kind, source=source, records=tuple(records))  # type: ignore[arg-type]


def detect_kind(items: Sequence[Mapping[str, Any]], source: str = "results") -> ResultKind:
    """Tell which kind of result a list of records is, from the fields of its first record.

    ``busbw_GBps`` marks a collective, ``parallel`` a plan, ``breakdown`` a run, and
    ``gpus`` with ``step_time_s`` or ``reason`` (but no breakdown) a sweep row.

    Examples
    --------
    >>> detect_kind([{"gpus": 8, "step_time_s": 1.0, "nodes": 1}])
    'sweep'
    """
    first = items[0]
    if "busbw_GBps" in first:
        return "collective"
    if "parallel" in first:
        return "plan"
    if "breakdown" in first:
        return "run"
    if "gpus" in first and ("step_time_s" in first or "reason" in first):
        return "sweep"
    keys = ", ".join(sorted(first)[:8]) or "none"
    raise ConfigError(
        f"{source}: cannot tell what these results are (fields: {keys}); expected run, plan, "
        "sweep or collective records"
    )


def load_results(path: str | Path, kind: str | None = None) -> ResultSet:
    """Read one result file.

    Parameters
    ----------
    path : str or Path
        ``.json`` (a record or a list of records), ``.jsonl`` (a record a line) or
        ``.csv`` (sweep rows, with a header).
    kind : str, optional
        Force the kind (``run``, ``plan``, ``sweep``, ``collective``); default from the fields.

    Returns
    -------
    ResultSet
        Labelled with ``path`` as given.

    Raises
    ------
    ConfigError
        Missing or unreadable file, bad JSON/CSV, or a record that does not validate; the
        message is one line naming the file, the record and the field.
    """
    source = str(path)
    p = Path(path)
    if p.suffix.lower() not in _SUFFIXES:
        raise ConfigError(
            f"{source}: unknown result file type {p.suffix!r}; allowed: {', '.join(_SUFFIXES)}"
        )
    text = read_text(p, "result file")
    suffix = p.suffix.lower()
    if suffix == ".csv":
        items = _csv_rows(text, source)
        kind = kind or "sweep"
    elif suffix == ".jsonl":
        items = [
            _json(line, source, n) for n, line in enumerate(text.splitlines(), 1) if line.strip()
        ]
    else:
        doc = _json(text, source, None)
        items = [doc] if isinstance(doc, dict) else doc
        if not isinstance(items, list):
            raise ConfigError(f"{source}: expected a JSON object or list, got {type(doc).__name__}")
    return ResultSet.from_dicts(items, kind, source)


def _json(text: str, source: str, line: int | None) -> Any:
    """Parse JSON text by the safe reader's rules (:func:`sim.files.load_json`)."""
    return load_json(text, source if line is None else f"{source}: line {line}")


def _csv_rows(text: str, source: str) -> list[dict[str, Any]]:
    """CSV rows as dicts; empty cells read as missing, numbers as numbers."""
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames:
        raise ConfigError(f"{source}: empty CSV file (a header row is needed)")
    rows = []
    for n, row in enumerate(reader, 2):
        if None in row:
            raise ConfigError(f"{source}: line {n} has more cells than the header")
        rows.append({k: _cell(v) for k, v in row.items() if v not in ("", None)})
    return rows


def _cell(text: str) -> int | float | str:
    """A CSV cell as int or float where it is one, else the text."""
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            pass
    return text


def _one_line(error: ValidationError, source: str, index: int | None) -> str:
    """The first problem of a validation error, in one line; the count of the others."""
    first = error.errors()[0]
    field = ".".join(str(p) for p in first["loc"])
    where = f"{source}: record {index}" if index is not None else source
    value = repr(first.get("input"))
    value = value if len(value) <= 40 else value[:37] + "..."
    msg = f"{where}: {field or 'record'}: {first['msg']}"
    if first["type"] != "missing":
        msg += f" (got {value})"
    if error.error_count() > 1:
        msg += f" (and {error.error_count() - 1} more problems)"
    return msg
