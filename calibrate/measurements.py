"""The measurement file: what real runs and log importers write, and what fitting reads.

One JSON document per file, versioned and schema-checked on load::

    {"schema": "clustersim.measurements/1",
     "kind": "collectives" | "compute" | "step",
     "meta": {...provenance: hosts, GPU, driver, versions, world size, source, created...},
     "records": [...one object per measured case, shaped by ``kind``...]}

Units are SI except where a name says otherwise: times in seconds (``_s``), sizes in
bytes, bandwidths in GB/s = 1e9 bytes/s (``_GBps``, nccl-tests' own unit) or bytes/s
(``_Bps``), compute in FLOP and FLOP/s. ``save_measurements`` writes sorted keys with a
fixed layout, so equal measurements give byte-identical files.

>>> meta = Meta(source="live run", created="2025-01-01T00:00:00Z")
>>> Measurements(kind="collectives", meta=meta).records
()
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, Union

from calibrate.dtypes import DTYPE_BYTES
from sim.errors import CalibrationError, ClusterSimError, ConfigError
from sim.files import load_json, read_text, write_atomic

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = [
    "DTYPE_BYTES",
    "KINDS",
    "SCHEMA",
    "STATISTICS",
    "CollectiveRecord",
    "ComputeRecord",
    "Measurements",
    "Meta",
    "StepRecord",
    "check_statistic",
    "describe_file",
    "load_measurements",
    "measurements_from_dict",
    "measurements_to_dict",
    "merge_measurements",
    "save_measurements",
    "summarize_times",
    "utc_now",
]

SCHEMA = "clustersim.measurements/1"
KINDS = ("collectives", "compute", "step")


Scalar = Union[str, int, float, bool, None]  # noqa: UP007 - get_type_hints on py3.10
T = TypeVar("T")


@dataclass(frozen=True)
class Meta:
    """Provenance of one measurement file.

    Attributes
    ----------
    source : str
        The file(s) a log was imported from, or ``"live run"``.
    created : str
        UTC ISO-8601 time the file was made (see :func:`utc_now` for a fixed override).
    hosts : tuple[str, ...]
        Host names, one per node, sorted.
    gpu_model, driver, torch_version, nccl_version : str or None
        What ran it; None where unknown (e.g. a log that does not print it).
    world_size : int
        Ranks (processes × GPUs) in the job; 1 for a single-device compute run.
    nodes, gpus_per_node : int or None
        None where the source does not say.
    backend : str or None
        ``"nccl"``, ``"gloo"``, or None for compute/step runs.
    time_statistic : str
        What ``time_s`` is: ``"median"`` or ``"min"`` (live runs, :data:`STATISTICS`),
        ``"mean"`` (nccl-tests prints means), or a trace's own wording.
    spread : str or None
        What ``time_spread_s`` is, e.g. ``"p90-p10"``; None when no spread is known.
    notes : tuple[str, ...]
        Human-readable remarks: skipped cases, unsupported dtypes, elided log lines.
    details : dict[str, str | int | float | bool | None]
        Further provenance, e.g. ``{"n_ranks_source": "device lines"}``.
    """

    source: str
    created: str
    hosts: tuple[str, ...] = ()
    gpu_model: str | None = None
    driver: str | None = None
    torch_version: str | None = None
    nccl_version: str | None = None
    world_size: int = 1
    nodes: int | None = None
    gpus_per_node: int | None = None
    backend: str | None = None
    time_statistic: str = "median"
    spread: str | None = None
    notes: tuple[str, ...] = ()
    details: dict[str, Scalar] = field(default_factory=dict)


@dataclass(frozen=True)
class CollectiveRecord:
    """One collective at one size, timed (nccl-tests' definitions throughout).

    ``size_bytes`` is nccl-tests' size (all_gather: total output; reduce_scatter: total
    input; all_to_all: per-rank send buffer); ``count`` its element count column.
    ``algbw_GBps = size_bytes / time_s / 1e9``; ``busbw_GBps = algbw × busbw_factor``.
    """

    op: str
    size_bytes: int
    count: int
    dtype: str
    time_s: float
    time_spread_s: float | None
    algbw_GBps: float
    busbw_GBps: float
    in_place: bool
    n_ranks: int
    iters: int | None


@dataclass(frozen=True)
class ComputeRecord:
    """One kernel on one device: ``flops`` (FLOP) and ``bytes`` moved per call, timed."""

    op: str
    shape: tuple[int, ...]
    dtype: str
    flops: float
    bytes: float
    time_s: float
    time_spread_s: float | None
    achieved_flops_per_s: float
    achieved_Bps: float
    iters: int
    device: str


@dataclass(frozen=True)
class StepRecord:
    """One training-step job: the exact model and the measured time per step.

    ``model`` holds the config (layers, hidden, heads, ffn_hidden, vocab, seq, batch,
    dtype, ...); ``step_times_s`` every timed step in order.
    """

    model: dict[str, Scalar]
    device: str
    optimizer: str
    n_params: int
    tokens_per_step: int
    model_flops_per_step: float
    warmup_steps: int
    time_s: float
    time_spread_s: float | None
    step_times_s: tuple[float, ...]
    tokens_per_s: float
    achieved_flops_per_s: float


Record = Union[CollectiveRecord, ComputeRecord, StepRecord]  # noqa: UP007
_RECORD_TYPE: dict[str, type[Record]] = {
    "collectives": CollectiveRecord,
    "compute": ComputeRecord,
    "step": StepRecord,
}


@dataclass(frozen=True)
class Measurements:
    """A whole measurement file: ``kind`` (one of :data:`KINDS`), provenance, records."""

    kind: str
    meta: Meta
    records: tuple[Record, ...] = ()

    @property
    def collectives(self) -> tuple[CollectiveRecord, ...]:
        """The records typed as collectives (empty for other kinds)."""
        return tuple(r for r in self.records if isinstance(r, CollectiveRecord))

    @property
    def computes(self) -> tuple[ComputeRecord, ...]:
        """The records typed as compute kernels (empty for other kinds)."""
        return tuple(r for r in self.records if isinstance(r, ComputeRecord))

    @property
    def steps(self) -> tuple[StepRecord, ...]:
        """The records typed as training-step jobs (empty for other kinds)."""
        return tuple(r for r in self.records if isinstance(r, StepRecord))


def utc_now(created: str | None = None) -> str:
    """The ``created`` stamp: ``created`` if given, else ``$SOURCE_DATE_EPOCH``, else now.

    Returns UTC ISO-8601 to the second, e.g. ``'2025-01-01T00:00:00Z'``.

    >>> utc_now("2025-01-01T00:00:00Z")
    '2025-01-01T00:00:00Z'
    """
    if created is not None:
        try:
            datetime.fromisoformat(created)
        except (TypeError, ValueError):
            raise CalibrationError(
                f"--created {created!r}: expected a UTC ISO-8601 time such as 2025-01-01T00:00:00Z"
            ) from None
        return created
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    when = (
        datetime.fromtimestamp(int(epoch), tz=timezone.utc)
        if epoch and epoch.isdigit()
        else datetime.now(timezone.utc)
    )
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


#: How a record summarises its timed iterations: ``median`` (the default), or ``min``, the
#: fastest iteration. On a host shared with other work a neighbour only ever adds time,
#: so the minimum estimates the uncontended time, steadily from one run to the next (the
#: estimator :func:`timeit.Timer.repeat`'s documentation recommends, and the one the trace
#: reader takes for a CPU trace's kernels); the median moves with how busy the host was.
STATISTICS = ("median", "min")


def check_statistic(statistic: str) -> str:
    """``statistic`` if it is one of :data:`STATISTICS`, else CalibrationError naming them.

    >>> check_statistic("min")
    'min'
    """
    if statistic not in STATISTICS:
        raise CalibrationError(
            f"--statistic {statistic!r} is unknown; allowed: {', '.join(STATISTICS)}"
        )
    return statistic


def summarize_times(times_s: Sequence[float], statistic: str = "median") -> tuple[float, float]:
    """The ``statistic`` (:data:`STATISTICS`) and p90−p10 spread (both seconds) of
    per-iteration times.

    >>> summarize_times([1.0, 2.0, 3.0, 4.0, 5.0])
    (3.0, 3.2)
    >>> summarize_times([2.0, 1.0, 5.0, 4.0, 3.0], "min")
    (1.0, 3.2)
    """
    check_statistic(statistic)
    if not times_s:
        raise CalibrationError("no timed iterations to summarize (iters must be >= 1)")
    xs = sorted(float(t) for t in times_s)
    if len(xs) == 1:
        return xs[0], 0.0
    q = statistics.quantiles(xs, n=10, method="inclusive")
    centre = xs[0] if statistic == "min" else float(statistics.median(xs))
    return centre, round(q[-1] - q[0], 15)


# --- dict <-> dataclass, with checking ------------------------------------------------


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def measurements_to_dict(m: Measurements) -> dict[str, Any]:
    """The JSON-ready dict of ``m`` (lists for tuples, nested dicts for dataclasses)."""
    return {"schema": SCHEMA, **_plain(m)}


def measurements_from_dict(data: Mapping[str, Any], where: str = "measurements") -> Measurements:
    """Check a parsed JSON document and build :class:`Measurements`.

    The rules live in :mod:`calibrate.measurement_models` (pydantic): known keys only,
    strict types, finite numbers, times > 0, counts >= 1.

    Raises
    ------
    CalibrationError
        One line naming ``where`` and the bad field, e.g. ``m.json: records[3].time_s``.
    """
    # pydantic is imported here, not at the top: a run on a machine without it (a lent GPU
    # whose image has torch but not this project's dependencies) still measures and saves
    from calibrate.measurement_models import RECORD_MODELS, FileModel
    from sim.validation import validate_model

    top = validate_model(FileModel, data, where, CalibrationError)
    model = RECORD_MODELS[top.kind]
    cls = _RECORD_TYPE[top.kind]
    records: tuple[Record, ...] = tuple(
        _build(cls, validate_model(model, r, where, CalibrationError, ("records", i)))
        for i, r in enumerate(top.records)
    )
    return Measurements(kind=top.kind, meta=_build(Meta, top.meta), records=records)


def _build(cls: type[T], model: BaseModel) -> T:
    """The frozen dataclass ``cls`` from a validated model (lists become tuples)."""
    values = {f.name: getattr(model, f.name) for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})


def merge_measurements(parts: Sequence[Measurements], created: str | None = None) -> Measurements:
    """One file from several of the same kind: records concatenated, provenance combined.

    Meta fields that differ between the parts become None (hosts: their union; world
    size: the largest); each part's notes are kept, prefixed by its source.
    """
    if not parts:
        raise CalibrationError("nothing to merge: no measurements given")
    if len(parts) == 1:
        return parts[0]
    kinds = sorted({p.kind for p in parts})
    if len(kinds) > 1:
        raise CalibrationError(f"cannot merge measurements of different kinds: {kinds}")

    def same(name: str) -> Any:
        values = {getattr(p.meta, name) for p in parts}
        return values.pop() if len(values) == 1 else None

    meta = Meta(
        source=", ".join(p.meta.source for p in parts),
        created=utc_now(created),
        hosts=tuple(sorted({h for p in parts for h in p.meta.hosts})),
        world_size=max(p.meta.world_size for p in parts),
        notes=tuple(f"{p.meta.source}: {n}" for p in parts for n in p.meta.notes),
        details={"merged_files": len(parts)},
        **{k: same(k) for k in ("gpu_model", "driver", "torch_version", "nccl_version",
                                "nodes", "gpus_per_node", "backend", "spread")},
        time_statistic=same("time_statistic") or "mixed",
    )  # fmt: skip
    return Measurements(kinds[0], meta, tuple(r for p in parts for r in p.records))


def save_measurements(m: Measurements, path: str | os.PathLike[str]) -> Path:
    """Write ``m`` to ``path`` as sorted-keys JSON (deterministic bytes). Returns the path.

    Raises
    ------
    CalibrationError
        If a value is not JSON-representable (NaN, infinity) or the file cannot be written.
    """
    out = Path(path)
    data = measurements_to_dict(m)
    try:
        text = json.dumps(data, sort_keys=True, indent=1, allow_nan=False, ensure_ascii=True)
    except ValueError as err:
        raise CalibrationError(f"{out}: cannot write measurements: {err}") from None
    try:
        measurements_from_dict(json.loads(text), str(out))  # never write what we cannot read
    except ModuleNotFoundError as err:
        # no pydantic here (a bare GPU machine): the file is checked when it is loaded
        if not str(err.name or "").startswith("pydantic"):
            raise
    return write_atomic(out, text + "\n", "--out")


def load_measurements(path: str | os.PathLike[str]) -> Measurements:
    """Read and schema-check a measurement file.

    Raises
    ------
    CalibrationError
        Naming the file and the bad field (or the JSON syntax error's line).
    """
    p = Path(path)
    try:
        data = load_json(read_text(p, "measurement file"), str(p))
    except ConfigError as err:  # duplicate keys, NaN/Infinity, 4,300-digit ints, nesting
        raise CalibrationError(str(err)) from None
    return measurements_from_dict(data, str(p))


def describe_file(path: str | os.PathLike[str]) -> str:
    """What a file holds, for a refusal to replace it: ``"48 collectives records"``.

    >>> describe_file("/nonexistent.json")
    'not a measurement file'
    """
    try:
        m = load_measurements(path)
    except ClusterSimError:
        return "not a measurement file"
    return f"{len(m.records)} {m.kind} record{'s' * (len(m.records) != 1)}"
