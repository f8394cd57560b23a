"""Run a sweep: every point through the simulator, on a process pool or a Ray cluster.

Backends yield ``(point index, row)`` as points finish; :func:`run_sweep` appends each
row to the result file at once, shows progress with an ETA on stderr, and at the end
fills the ``scaling_*`` columns and rewrites the file in point order. Every point is
simulated on its own from the same inputs, so the rows do not depend on the backend,
the number of workers or the order in which points finished.

What a sweep guarantees about its file and its processes:

- points are computed from their index (:meth:`SweepSpec.point`) and submitted a few at a
  time, never listed; a sweep has at most :data:`~sim.budget.MAX_SWEEP_POINTS` points;
- ``--out`` is locked for the whole sweep (:func:`sim.files.output_lock`): a second
  sweep on the same file is refused, naming the one running;
- a Ctrl-C (or SIGTERM, which the command line turns into one) ends the workers at once
  and raises :class:`~sim.errors.Interrupted`, saying how many points are in the file;
  they are whole rows, and ``--resume`` finishes the sweep;
- workers ignore Ctrl-C and end by themselves when the sweep is killed
  (:mod:`sim.studies.workers`); ``jobs`` is capped at the CPUs this process may use;
- ``--resume`` checks every row it keeps: its point, its grid values, its columns and
  its metrics (:class:`~sim.studies.rows.SweepRow`); two rows of one point must agree.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Generator, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sim.budget import check_sweep_points
from sim.errors import ConfigError, Interrupted, MissingExtraError
from sim.studies.efficiency import scaling_columns
from sim.studies.files import RowFile, cell
from sim.studies.grid import SweepSpec
from sim.studies.points import METRICS, evaluate_point
from sim.studies.rows import SweepRow
from sim.studies.workers import usable_cpus, worker_pool

__all__ = ["BACKENDS", "columns_of", "run_sweep", "usable_jobs"]

BACKENDS = ("local", "ray")
Finished = Generator[tuple[int, dict[str, Any]], None, None]
#: Points in flight per worker: enough to keep each busy, few enough to stream.
_AHEAD = 2


def columns_of(spec: SweepSpec) -> list[str]:
    """A sweep row's columns: ``point``, the swept keys, then :data:`METRICS`."""
    return ["point", *spec.keys, *METRICS]


def usable_jobs(jobs: int, backend: str = "local") -> int:
    """``jobs`` capped at the CPUs this process may use (local pool or local Ray)."""
    if backend == "ray" and os.environ.get("RAY_ADDRESS"):
        return jobs  # a cluster's CPUs, not this machine's
    return min(jobs, usable_cpus())


def _evaluate(spec: SweepSpec, i: int, network: str | None) -> dict[str, Any]:
    return evaluate_point(spec.raw, spec.name, spec.point(i), network, spec.folder)


def _local(spec: SweepSpec, todo: Iterator[int], jobs: int, network: str | None) -> Finished:
    if jobs <= 1:
        for i in todo:
            yield i, _evaluate(spec, i, network)
        return
    with worker_pool(jobs) as pool:
        pending: dict[Future[dict[str, Any]], int] = {}

        def fill() -> None:
            for i in todo:
                point = spec.point(i)
                f = pool.submit(evaluate_point, spec.raw, spec.name, point, network, spec.folder)
                pending[f] = i
                if len(pending) >= _AHEAD * jobs:
                    return

        fill()
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for f in sorted(finished, key=lambda f: pending[f]):
                yield pending.pop(f), f.result()
            fill()


def _ray(spec: SweepSpec, todo: Iterator[int], jobs: int, network: str | None) -> Finished:
    try:
        import ray
    except ImportError:
        raise MissingExtraError("--backend ray needs Ray: pip install 'clustersim[ray]'") from None
    address = os.environ.get("RAY_ADDRESS")
    started = not ray.is_initialized()
    if started:
        options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if address:
            ray.init(address=address, **options)
        else:
            ray.init(num_cpus=max(1, jobs), **options)
    refs: dict[Any, int] = {}
    try:
        remote = ray.remote(evaluate_point)
        ahead = _AHEAD * max(jobs, int(ray.cluster_resources().get("CPU", jobs)))

        def fill() -> None:
            for i in todo:
                refs[remote.remote(spec.raw, spec.name, spec.point(i), network, spec.folder)] = i
                if len(refs) >= ahead:
                    return

        fill()
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=1)
            for ref in ready:
                yield refs.pop(ref), ray.get(ref)
            fill()
    except BaseException:
        for ref in refs:
            ray.cancel(ref, force=True)
        raise
    finally:
        if started:
            ray.shutdown()


_BACKENDS = {"local": _local, "ray": _ray}


def _checked_row(row: Mapping[str, Any], spec: SweepSpec, path: Path, n: int) -> dict[str, Any]:
    """Row ``n`` (1-based, in file order) of a partial file, checked as :func:`_resumed` says."""
    i = row.get("point")
    if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(spec):
        raise ConfigError(f"{path}: row {n} has point {i!r}, not a point of this sweep")
    point = spec.point(i)
    for key, value in point.items():
        if cell(row.get(key)) != cell(value):
            raise ConfigError(
                f"{path}: point {i} has {key}={cell(row.get(key))} in the file but "
                f"{cell(value)} in this sweep; resume only the sweep that wrote it"
            )
    try:
        SweepRow.model_validate(dict(row))
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "row"
        raise ConfigError(
            f"{path}: row {n} (point {i}) is damaged: {where}: "
            f"{str(first['msg']).removeprefix('Value error, ')}; remove the row to rerun it"
        ) from None
    return {**point, **{k: row.get(k) for k in METRICS}, "point": i}


def _resumed(
    rows: Sequence[Mapping[str, Any]], spec: SweepSpec, path: Path
) -> dict[int, dict[str, Any]]:
    """Rows of a partial file by point index, every one checked: its point is one of this
    sweep's, its grid values are that point's, its metrics are a row's
    (:class:`~sim.studies.rows.SweepRow`), and a point written twice (two sweeps on one
    file) has the same row both times."""
    done: dict[int, dict[str, Any]] = {}
    for n, raw in enumerate(rows, 1):
        row = _checked_row(raw, spec, path, n)
        i = row["point"]
        if i in done and done[i] != row:
            raise ConfigError(
                f"{path}: point {i} is written twice with different metrics (rows of two "
                "sweeps?); keep one of them and resume again"
            )
        done[i] = row
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
        file is rewritten in point order at the end. Locked while the sweep runs.
    jobs : int
        Worker processes (local) or CPUs (a local Ray instance), capped at the CPUs
        this process may use (:func:`usable_jobs`).
    backend : {"local", "ray"}
        ``local``: a process pool (in-process when ``jobs == 1``). ``ray``: Ray tasks on
        the cluster at ``RAY_ADDRESS``, else on a local Ray instance.
    resume : bool
        Continue the sweep that wrote ``out``: its finished points are kept (each checked,
        see :func:`_resumed`), not rerun.
    network : str, optional
        ``flow`` or ``analytical`` for every point (default: the scenario's).
    progress : bool
        Show a progress bar with an ETA on stderr.

    Returns
    -------
    list of dict
        One row per point: ``point``, the swept keys, then :data:`~sim.studies.points.METRICS`.

    Raises
    ------
    ConfigError
        Bad options, more than :data:`~sim.budget.MAX_SWEEP_POINTS` points, ``out`` held
        by another sweep, or a file ``--resume`` cannot trust.
    Interrupted
        Ctrl-C: the workers are ended; the rows finished so far are in ``out``.
    """
    if backend not in _BACKENDS:
        raise ConfigError(f"--backend {backend!r} is unknown; allowed: {', '.join(BACKENDS)}")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ConfigError(f"--jobs {jobs!r}: expected an integer >= 1")
    if resume and out is None:
        raise ConfigError("--resume needs --out FILE (the file of the sweep to continue)")
    check_sweep_points(len(spec))
    if out is None:
        return _run(spec, None, resume, usable_jobs(jobs, backend), backend, network, progress)
    from sim.locks import output_lock

    with output_lock(out, "--out") as target:
        sink = RowFile(target, columns_of(spec), resume)
        return _run(spec, sink, resume, usable_jobs(jobs, backend), backend, network, progress)


def _kept(sink: RowFile | None, finished: int, total: int) -> str:
    """What an interrupted sweep keeps: the whole rows in its file, counted there (a Ctrl-C
    between a row's write and its count in memory must not make the message one short),
    or the ``finished`` points without a file."""
    if sink is None:
        return f"{finished:,} of {total:,} points were finished (give --out FILE to keep them)"
    sink.close()
    rows = len(sink.done_rows())
    return f"{rows:,} of {total:,} points are in {sink.path}; add --resume to finish"


def _run(
    spec: SweepSpec,
    sink: RowFile | None,
    resume: bool,
    jobs: int,
    backend: str,
    network: str | None,
    progress: bool,
) -> list[dict[str, Any]]:
    total = len(spec)
    done = _resumed(sink.done_rows(), spec, sink.path) if sink is not None and resume else {}
    todo = (i for i in range(total) if i not in done)
    jobs = min(jobs, max(1, total - len(done)))
    bar = _progress(total, len(done), progress)
    finished = _BACKENDS[backend](spec, todo, jobs, network)
    try:
        for i, row in finished:
            record = {"point": i, **row}
            if sink is not None:
                sink.append(record)
            done[i] = record
            bar.update(1)
    except KeyboardInterrupt:
        finished.close()  # ends the workers before the message
        raise Interrupted(f"sweep stopped: {_kept(sink, len(done), total)}") from None
    finally:
        finished.close()
        bar.close()
        if sink is not None:
            sink.close()
    rows = [done[i] for i in range(total)]
    for row, scaling in zip(rows, scaling_columns(rows, spec.keys, spec.case_keys), strict=True):
        row.update(scaling)
    if sink is not None:
        sink.finish(rows)
    return rows
