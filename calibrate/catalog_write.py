"""Fitted compute parameters written back into ``topologies/catalog/compute.yaml``.

Only the lines of the fitted keys and the ``validation:`` record of one entry change, so
the file's comments, order and sources stay as written by hand.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sim.errors import CalibrationError
from sim.files import write_atomic

__all__ = ["CATALOG", "write_catalog"]

CATALOG = Path(__file__).resolve().parents[1] / "topologies" / "catalog" / "compute.yaml"


def write_catalog(entry: str, params: Mapping[str, float], record: Mapping[str, Any],
                  path: Path = CATALOG) -> None:  # fmt: skip
    """Put fitted ``params`` and their ``validation`` record into ``entry`` of compute.yaml.

    Only those lines of the entry change (comments and order are kept).
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    try:
        start = (
            lines.index(f"{entry}:")
            if f"{entry}:" in lines
            else next(i for i, line in enumerate(lines) if line.startswith(f"{entry}: "))
        )
    except StopIteration:
        raise CalibrationError(f"{path}: no entry {entry!r} to write") from None
    end = next((i for i in range(start + 1, len(lines)) if lines[i][:1] not in ("", " ", "#")),
               len(lines))  # fmt: skip
    done = set()
    for i in range(start + 1, end):
        key = lines[i].strip().split(":", 1)[0]
        if lines[i].startswith("  ") and not lines[i].startswith("   ") and key in params:
            lines[i] = f"  {key}: {params[key]:.4g}"
            done.add(key)
        elif lines[i].startswith("  validation:"):
            lines[i] = "  validation: " + json.dumps(dict(record), sort_keys=True)
            done.add("validation")
    missing = (set(params) | {"validation"}) - done
    if missing:
        raise CalibrationError(f"{path}: entry {entry!r} lacks {', '.join(sorted(missing))}")
    write_atomic(path, "\n".join(lines) + "\n", str(path))
