"""Hand-transcribed published tables kept as YAML: a ``sources`` mapping (key -> where the
numbers come from) and ``rows``, each naming one of those sources.

>>> import tempfile, pathlib
>>> p = pathlib.Path(tempfile.mkdtemp()) / "t.yaml"
>>> _ = p.write_text("sources: {s: a paper}\\nrows:\\n  - {label: x, source: s}\\n")
>>> sourced_rows(p, "demo", lambda r: r["label"])
['x']
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from sim.errors import CalibrationError

__all__ = ["sourced_rows"]

T = TypeVar("T")


def sourced_rows(path: Path, kind: str, make: Callable[[dict[str, Any]], T]) -> list[T]:
    """The rows of the table at ``path``, each made by ``make`` from its mapping.

    Raises CalibrationError naming ``path`` when the file is not a ``kind`` table (no
    ``sources`` or ``rows``, or a row ``make`` refuses) or a row names a source the file
    does not list.
    """
    try:
        raw: Any = yaml.safe_load(path.read_text())
        sources = raw["sources"]
        pairs = [(r["label"], r["source"], make(r)) for r in raw["rows"]]
    except (OSError, KeyError, TypeError, ValueError, yaml.YAMLError) as e:
        raise CalibrationError(f"{path}: not a {kind} table ({e})") from None
    for label, source, _ in pairs:
        if source not in sources:
            raise CalibrationError(f"{path}: row {label!r} names unknown source {source!r}")
    return [row for _, _, row in pairs]
