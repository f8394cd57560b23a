"""The hand-transcribed published tables (peak memory, throughput) refuse a file that is
not one and a row whose source the file does not list, naming the file and the row."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from calibrate.published_memory import memory_rows
from calibrate.published_throughput import throughput_rows
from sim.errors import CalibrationError

READERS: list[tuple[Callable[[Path], list[object]], str]] = [
    (memory_rows, "published-memory"),  # type: ignore[list-item]
    (throughput_rows, "published-throughput"),  # type: ignore[list-item]
]


@pytest.mark.parametrize(("read", "kind"), READERS)
def test_a_file_that_is_not_a_table_is_refused(
    tmp_path: Path, read: Callable[[Path], list[object]], kind: str
) -> None:
    bad = tmp_path / "t.yaml"
    for text in ("rows: []\n", "just text\n", "sources: {a: x}\nrows:\n  - {source: a}\n"):
        bad.write_text(text)
        with pytest.raises(CalibrationError, match=f"not a {kind} table"):
            read(bad)
    with pytest.raises(CalibrationError, match="not a"):
        read(tmp_path / "missing.yaml")


def test_a_row_naming_an_unknown_source_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "t.yaml"
    bad.write_text("sources: {a: x}\nrows:\n  - {label: r, source: b, measured: 1, scenario: {}}\n")
    with pytest.raises(CalibrationError, match=r"row 'r' names unknown source 'b'"):
        throughput_rows(bad)
