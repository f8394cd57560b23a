"""A disk cache of the simulator's predictions of published rows, for fits that rerun.

A training fit predicts every published row hundreds of times, and the leave-one-table-out
protocol (:mod:`calibrate.loto`) runs several fits; the same command run again asks for
exactly the same predictions (the fits are deterministic). :class:`PredictionCache` keys a
prediction by

- the code: a SHA-256 over every ``.py`` and ``.yaml`` file of ``sim/``,
  ``topologies/`` and ``calibrate/profiles/`` (:func:`code_fingerprint`), so any change
  to the simulator, its catalogs or a shipped profile (a row without one picks the
  profile measured on its hardware) starts a new, empty cache;
- the row: a SHA-256 of the scenario's ``repr`` (every field of the validated scenario:
  what the row readers of ``calibrate/`` make of a published row) and the metric read
  from the result;
- the compute overrides, each value written with ``repr`` (exact for floats).

Values are stored as JSON numbers (``repr`` of a float round-trips exactly), so a cached
prediction is bit-identical to a computed one and cached runs print the same bytes.
Files: ``FOLDER/predictions-<fingerprint[:16]>.json``, written atomically by
:meth:`PredictionCache.save`.

>>> import tempfile
>>> from pathlib import Path
>>> with tempfile.TemporaryDirectory() as d:
...     c = PredictionCache(Path(d), fingerprint="ab" * 32)
...     c.put("k", 0.1 + 0.2); c.save()
...     PredictionCache(Path(d), fingerprint="ab" * 32).get("k") == 0.1 + 0.2
True
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from sim.errors import CalibrationError
from sim.files import write_atomic

__all__ = ["PredictionCache", "code_fingerprint", "default_folder", "row_key"]

_ROOT = Path(__file__).resolve().parents[1]
_CODE = ("sim", "topologies", "calibrate/profiles")


@cache
def code_fingerprint(root: Path = _ROOT) -> str:
    """SHA-256 (hex) over the path and bytes of every ``.py``/``.yaml`` file of the code."""
    h = hashlib.sha256()
    for part in _CODE:
        for path in sorted((root / part).rglob("*")):
            if path.suffix in (".py", ".yaml") and path.is_file():
                h.update(str(path.relative_to(root)).encode())
                h.update(path.read_bytes())
    return h.hexdigest()


def default_folder() -> Path:
    """``$XDG_CACHE_HOME/clustersim`` (``~/.cache/clustersim`` without it)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "clustersim"


def row_key(scenario: Any, metric: str, compute: Mapping[str, float] | None) -> str:
    """The cache key of one prediction (see the module docstring)."""
    row = hashlib.sha256(f"{scenario!r}|{metric}".encode()).hexdigest()[:32]
    params = ",".join(f"{k}={v!r}" for k, v in sorted((compute or {}).items()))
    return f"{row}|{params}"


class PredictionCache:
    """Predictions by key, loaded from and saved to one file of ``folder``."""

    def __init__(self, folder: Path, fingerprint: str | None = None) -> None:
        self.path = folder / f"predictions-{(fingerprint or code_fingerprint())[:16]}.json"
        self._values: dict[str, float] = {}
        self._dirty = False
        self.hits = self.misses = 0
        if self.path.exists():
            try:
                data = json.loads(self.path.read_text())
                self._values = {str(k): float(v) for k, v in data.items()}
            except (OSError, ValueError, AttributeError):
                self._values = {}  # a damaged cache is an empty one

    def get(self, key: str) -> float | None:
        """The cached value, or None."""
        value = self._values.get(key)
        if value is None:
            self.misses += 1
        else:
            self.hits += 1
        return value

    def put(self, key: str, value: float) -> None:
        """Remember ``value`` (saved by :meth:`save`)."""
        self._values[key] = float(value)
        self._dirty = True

    def save(self) -> None:
        """Write the cache file if anything was added (atomically).

        Raises
        ------
        CalibrationError
            The folder cannot be created or written.
        """
        if not self._dirty:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise CalibrationError(f"cache folder {self.path.parent}: {err}") from None
        write_atomic(self.path, json.dumps(self._values, sort_keys=True), "--cache")
        self._dirty = False
