"""What a sweep runs: a base scenario and its points (cases x the cartesian grid).

A point is an ordered mapping of scenario keys (``cluster.nodes``, ``parallel.tp``,
``network``...) to values, laid over the base scenario as ``--set`` overrides would be.
Points come from ``--grid KEY=V1,V2,...`` options (their cartesian product, in the order
given) and, in a study file, from ``cases``: a list of mappings whose keys move together
(e.g. GPU count and global batch for weak scaling). Every case is combined with every
grid point, cases outermost.

A study file is YAML with ``scenario`` (a preset name, a path relative to the study
file, or an inline scenario mapping), ``grid`` (key -> list of values), optional
``cases`` and ``description``::

    scenario: {model: {preset: gpt2-124m}, cluster: {topology: dgx-h100}, ...}
    grid: {cluster.topology: [h100-ib-ndr, h100-roce-400g]}
    cases: [{cluster.nodes: 1, training.global_batch: 64}, {cluster.nodes: 8, ...}]

>>> spec = sweep_spec("gpt2-1gpu", ["parallel.micro_batch=1,2", "network=analytical"])
>>> [p for p in spec.points()]
[{'parallel.micro_batch': 1, 'network': 'analytical'}, {'parallel.micro_batch': 2, 'network': 'analytical'}]
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from sim.errors import ConfigError
from sim.files import load_yaml, read_text
from sim.scenario.load import apply_overrides, read_raw

__all__ = ["STUDY_KEYS", "SweepSpec", "override_items", "parse_grid", "read_study", "sweep_spec"]

STUDY_KEYS = ("scenario", "grid", "cases", "description")
_STUDY_PREFIX = "studies/"


@dataclass(frozen=True)
class SweepSpec:
    """A base scenario and the points to run over it.

    Attributes
    ----------
    raw : dict
        The base scenario as parsed YAML (not yet validated: each point is).
    name : str
        Scenario name (labels results).
    grid : tuple of (key, values)
        Cartesian grid, in the order the keys were given.
    cases : tuple of dict
        Points whose keys move together; ``({},)`` when there are none.
    description : str
        From the study file, if any.
    folder : Path or None
        Folder of the scenario's file (files it names relatively are found there).
    """

    raw: dict[str, Any]
    name: str
    grid: tuple[tuple[str, tuple[Any, ...]], ...]
    cases: tuple[dict[str, Any], ...] = ({},)
    description: str = ""
    folder: Path | None = None

    @property
    def case_keys(self) -> list[str]:
        """Keys set by ``cases`` (they move together, with the GPU count in scaling studies)."""
        out: dict[str, None] = {}
        for case in self.cases:
            out.update(dict.fromkeys(case))
        return list(out)

    @property
    def keys(self) -> list[str]:
        """The swept keys: case keys first, then grid keys (the rows' leading columns)."""
        out: dict[str, None] = {}
        for case in self.cases:
            out.update(dict.fromkeys(case))
        out.update(dict.fromkeys(k for k, _ in self.grid))
        return list(out)

    def points(self) -> Iterator[dict[str, Any]]:
        """Every point, cases outermost, then the grid's product in key order (one at a
        time: a sweep never holds the list)."""
        names = [k for k, _ in self.grid]
        for case in self.cases:
            for values in itertools.product(*(v for _, v in self.grid)):
                yield {**case, **dict(zip(names, values, strict=True))}

    def point(self, index: int) -> dict[str, Any]:
        """Point ``index`` of :meth:`points`, computed from the index alone.

        >>> spec = sweep_spec("gpt2-1gpu", ["parallel.micro_batch=1,2", "parallel.sp=true,false"])
        >>> spec.point(3) == list(spec.points())[3]
        True
        """
        if not 0 <= index < len(self):
            raise IndexError(index)
        chosen: list[tuple[str, Any]] = []
        for key, values in reversed(self.grid):  # the last key varies fastest
            index, at = divmod(index, len(values))
            chosen.append((key, values[at]))
        return {**self.cases[index], **dict(reversed(chosen))}

    def __len__(self) -> int:
        n = len(self.cases)
        for _, values in self.grid:
            n *= len(values)
        return n


def override_items(point: Mapping[str, Any]) -> list[str]:
    """A point as ``--set`` items (values as JSON, which YAML reads back unchanged).

    >>> override_items({"parallel.tp": 4, "cluster.topology": "dgx-h100"})
    ['parallel.tp=4', 'cluster.topology="dgx-h100"']
    """
    return [f"{k}={json.dumps(v)}" for k, v in point.items()]


def parse_grid(items: Sequence[str]) -> list[tuple[str, tuple[Any, ...]]]:
    """Parse ``KEY=V1,V2,...`` options; values are read as YAML scalars (``4``, ``true``).

    >>> parse_grid(["parallel.tp=1,2", "parallel.sp=true,false"])
    [('parallel.tp', (1, 2)), ('parallel.sp', (True, False))]
    """
    out: list[tuple[str, tuple[Any, ...]]] = []
    seen: set[str] = set()
    for item in items:
        key, eq, text = item.partition("=")
        key = key.strip()
        if not eq or not key or not text.strip():
            raise ConfigError(f"--grid {item!r}: expected KEY=V1,V2,... e.g. cluster.nodes=1,2,4")
        if key in seen:
            raise ConfigError(f"--grid {key}: given twice; put all its values in one option")
        seen.add(key)
        values = tuple(_scalar(v, key) for v in text.split(","))
        out.append((key, values))
    return out


def _scalar(text: str, key: str) -> Any:
    value = load_yaml(text, f"--grid {key}") if text.strip() else None
    if value is None or isinstance(value, (dict, list)):
        raise ConfigError(f"--grid {key}: {text!r} is not a single value")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"--grid {key}: {text!r} is not a finite number")
    return value


def read_study(source: str) -> tuple[dict[str, Any], Path | None] | None:
    """The study file at ``source`` as a mapping and its folder, or None if it is not one.

    ``studies/NAME`` finds a study shipped in the ``scenarios.studies`` package.
    """
    text: str | None = None
    folder: Path | None = None
    path = Path(source)
    if path.is_file():
        text, folder = read_text(path, "study file"), path.parent
    elif source.startswith(_STUDY_PREFIX):
        name = source.removeprefix(_STUDY_PREFIX).removesuffix(".yaml")
        entry = resources.files("scenarios.studies").joinpath(f"{name}.yaml")
        if not entry.is_file():
            raise ConfigError(f"{source}: no such study; shipped: {', '.join(study_names())}")
        text = entry.read_text(encoding="utf-8")
    if text is None:
        return None
    doc = load_yaml(text, source)
    if isinstance(doc, dict) and "scenario" in doc and ("grid" in doc or "cases" in doc):
        return doc, folder
    return None


def study_names() -> list[str]:
    """Names of the studies shipped in ``scenarios/studies`` (``studies/NAME``)."""
    root = resources.files("scenarios.studies")
    return sorted(
        _STUDY_PREFIX + p.name.removesuffix(".yaml")
        for p in root.iterdir()
        if p.name.endswith(".yaml")
    )


def _study_scenario(
    doc: Mapping[str, Any], folder: Path | None, source: str
) -> tuple[dict, str, Path | None]:
    base = doc["scenario"]
    name = Path(source).stem
    if isinstance(base, dict):
        return base, name, folder
    if not isinstance(base, str):
        raise ConfigError(f"{source}: scenario: expected a preset name, a file or a mapping")
    candidate = folder / base if folder is not None else None
    if candidate is not None and candidate.is_file():
        return (*read_raw(candidate), candidate.parent)
    return (*read_raw(base), _folder_of(base))


def _folder_of(source: str) -> Path | None:
    path = Path(source)
    return path.parent if path.is_file() else None


def _study_grid(doc: Mapping[str, Any], source: str) -> list[tuple[str, tuple[Any, ...]]]:
    grid = doc.get("grid") or {}
    if not isinstance(grid, dict):
        raise ConfigError(f"{source}: grid: expected a mapping of key -> list of values")
    out = []
    for key, values in grid.items():
        vals = values if isinstance(values, list) else [values]
        if not vals:
            raise ConfigError(f"{source}: grid.{key}: no values")
        out.append((str(key), tuple(vals)))
    return out


def _study_cases(doc: Mapping[str, Any], source: str) -> tuple[dict[str, Any], ...]:
    cases = doc.get("cases")
    if cases is None:
        return ({},)
    if not isinstance(cases, list) or not cases or not all(isinstance(c, dict) for c in cases):
        raise ConfigError(f"{source}: cases: expected a non-empty list of key -> value mappings")
    return tuple({str(k): v for k, v in c.items()} for c in cases)


def sweep_spec(source: str, grid: Sequence[str] = (), sets: Sequence[str] = ()) -> SweepSpec:
    """Build a sweep from a scenario (or study file), ``--grid`` options and ``--set`` items.

    ``--grid`` keys replace a study file's grid entry of the same key. Every key is
    checked against the scenario's keys before anything runs (an unknown key is a
    ConfigError naming it); values are checked per point.
    """
    study = read_study(source)
    description = ""
    if study is None:
        raw, name = read_raw(source)
        folder = _folder_of(source)
        base_grid: list[tuple[str, tuple[Any, ...]]] = []
        cases: tuple[dict[str, Any], ...] = ({},)
    else:
        doc, study_folder = study
        unknown = sorted(set(doc) - set(STUDY_KEYS))
        if unknown:
            raise ConfigError(
                f"{source}: {unknown[0]}: unknown key; allowed: {', '.join(STUDY_KEYS)}"
            )
        raw, name, folder = _study_scenario(doc, study_folder, source)
        base_grid, cases = _study_grid(doc, source), _study_cases(doc, source)
        description = str(doc.get("description") or "").strip()
    raw = apply_overrides(raw, sets)
    given = parse_grid(grid)
    merged = dict(base_grid)
    merged.update(dict(given))
    spec = SweepSpec(raw, name, tuple(merged.items()), cases, description, folder)
    if len(spec) == 0 or not spec.keys:
        raise ConfigError("sweep: nothing to sweep; give --grid KEY=V1,V2,...")
    for key in spec.keys:  # unknown keys fail here, once, not in every point
        apply_overrides({}, [f"{key}=0"])
    return spec
