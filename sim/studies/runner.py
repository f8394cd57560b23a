"""Run a sweep: every point through the simulator, on a process pool or a Ray cluster.

Backends yield ``(point index, row)`` as points finish; :func:`run_sweep` appends each
row to the result file at once, shows progress with an ETA on stderr, and at the end
fills the ``scaling_*`` columns and rewrites the file in point order. Every point is
simulated on its own from the same inputs, so the rows do not depend on the backend,
the number of workers or the order in which points finished.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from functools import partial
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from sim.errors import ConfigError, MissingExtraError
from sim.studies.efficiency import scaling_columns
from sim.studies.files import RowFile, cell
from sim.studies.grid import SweepSpec
from sim.studies.points import METRICS, evaluate_point

__all__ = ["BACKENDS", "columns_of", "run_sweep"]

BACKENDS = ("local", "ray")
Finished = Iterator[tuple[int, dict[str, Any]]]


def columns_of(spec: SweepSpec) -> list[str]:
    """A sweep row's columns: ``point``, the swept keys, then :data:`METRICS`."""
    return ["point", *spec.keys, *METRICS]


Evaluate = Callable[..., dict[str, Any]]


def _local(spec: SweepSpec, todo: Sequence[int], jobs: int, evaluate: Evaluate) -> Finished:
    points = list(spec.points())
    if jobs <= 1 or len(todo) <= 1:
        for i in todo:
            yield i, evaluate(spec.raw, spec.name, points[i], folder=spec.folder)
        return
    # spawn: workers start clean (no inherited threads or caches), the same on every OS.
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        pending: dict[Future[dict[str, Any]], int] = {
            pool.submit(evaluate, spec.raw, spec.name, points[i], folder=spec.folder): i
            for i in todo
        }
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for f in sorted(finished, key=lambda f: pending[f]):
                yield pending.pop(f), f.result()


def _ray(spec: SweepSpec, todo: Sequence[int], jobs: int, evaluate: Evaluate) -> Finished:
    try:
        import ray
    except ImportError:
        raise MissingExtraError("--backend ray needs Ray: pip install 'clustersim[ray]'") from None
    points = list(spec.points())
    address = os.environ.get("RAY_ADDRESS")
    started = not ray.is_initialized()
    if started:
        options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if address:
            ray.init(address=address, **options)
        else:
            ray.init(num_cpus=max(1, jobs), **options)
    try:
        remote = ray.remote(evaluate)
        refs = {remote.remote(spec.raw, spec.name, points[i], folder=spec.folder): i for i in todo}
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=1)
            for ref in ready:
                yield refs.pop(ref), ray.get(ref)
    finally:
        if started:
            ray.shutdown()


_BACKENDS = {"local": _local, "ray": _ray}


def _resumed(
    rows: Sequence[Mapping[str, Any]], points: Sequence[Mapping[str, Any]], path: Path
) -> dict[int, dict[str, Any]]:
    """Rows of a partial file by point index, checked against this sweep's points."""
    done: dict[int, dict[str, Any]] = {}
    for row in rows:
        i = row.get("point")
        if not isinstance(i, int) or not 0 <= i < len(points):
            raise ConfigError(f"{path}: row with point {i!r} is not a point of this sweep")
        for key, value in points[i].items():
            if cell(row.get(key)) != cell(value):
                raise ConfigError(
                    f"{path}: point {i} has {key}={cell(row.get(key))} in the file but "
                    f"{cell(value)} in this sweep; resume only the sweep that wrote it"
                )
        done[i] = {**points[i], **{k: row.get(k) for k in METRICS}, "point": i}
    return done


def _progress(total: int, initial: int, show: bool) -> Any:
    from tqdm import tqdm

    return tqdm(
        total=total,
        initial=initial,
        file=sys.stderr,
        unit="point",
        desc="sweep",
        disable=not show,
        dynamic_ncols=True,
        mininterval=0.5,
    )


def run_sweep(
    spec: SweepSpec,
    out: str | Path | None = None,
    *,
    jobs: int = 1,
    backend: str = "local",
    resume: bool = False,
    network: str | None = None,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Simulate every point of ``spec``; return the rows in point order.

    Parameters
    ----------
    spec : SweepSpec
        From :func:`sim.studies.grid.sweep_spec`.
    out : str or Path, optional
        ``.csv``, ``.jsonl`` or ``.parquet``: rows are appended as points finish, and the
        file is rewritten in point order at the end.
    jobs : int
        Worker processes (local) or CPUs (a local Ray instance).
    backend : {"local", "ray"}
        ``local``: a process pool (in-process when ``jobs == 1``). ``ray``: Ray tasks on
        the cluster at ``RAY_ADDRESS``, else on a local Ray instance.
    resume : bool
        Continue the sweep that wrote ``out``: its finished points are kept, not rerun.
    network : str, optional
        ``flow`` or ``analytical`` for every point (default: the scenario's).
    progress : bool
        Show a progress bar with an ETA on stderr.

    Returns
    -------
    list of dict
        One row per point: ``point``, the swept keys, then :data:`~sim.studies.points.METRICS`.
    """
    if backend not in _BACKENDS:
        raise ConfigError(f"--backend {backend!r} is unknown; allowed: {', '.join(BACKENDS)}")
    if jobs < 1:
        raise ConfigError(f"--jobs {jobs}: expected an integer >= 1")
    if resume and out is None:
        raise ConfigError("--resume needs --out FILE (the file of the sweep to continue)")
    points = list(spec.points())
    sink = RowFile(Path(out), columns_of(spec), resume) if out is not None else None
    done = _resumed(sink.done_rows(), points, sink.path) if sink is not None and resume else {}
    todo = [i for i in range(len(points)) if i not in done]
    bar = _progress(len(points), len(done), progress)
    try:
        evaluate = partial(evaluate_point, network=network)
        for i, row in _BACKENDS[backend](spec, todo, jobs, evaluate):
            done[i] = {"point": i, **row}
            if sink is not None:
                sink.append(done[i])
            bar.update(1)
    finally:
        bar.close()
        if sink is not None:
            sink.close()
    rows = [done[i] for i in range(len(points))]
    for row, scaling in zip(rows, scaling_columns(rows, spec.keys, spec.case_keys), strict=True):
        row.update(scaling)
    if sink is not None:
        sink.finish(rows)
    return rows
