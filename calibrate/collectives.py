"""Real collectives with torch.distributed, timed the way nccl-tests times them.

``run_collectives`` sweeps message sizes for each op. Under ``torchrun`` (``RANK``,
``WORLD_SIZE`` and ``MASTER_ADDR`` set) it joins that job, so one command runs across many
nodes; ``local=N`` spawns N processes on this machine itself (loopback, a free port).
NCCL runs on GPUs (one per process, CUDA events), gloo on CPU (``time.perf_counter``).

Per size: ``warmup`` untimed calls, then ``iters`` timed ones, each started right after a
barrier. An iteration's time is the slowest rank's (the per-rank times are all-reduced
with MAX, as nccl-tests does); the record keeps the median (or the fastest: ``statistic``)
and the p90−p10 spread.

Failures keep what was measured: with ``out``, rank 0 rewrites that file (atomically) after
every finished size, so a rank that dies or stops leaves the sizes done so far; every
collective times out after ``timeout_s`` (a stopped rank cannot hang the others, and the
parent kills ranks that outlive a peer, see :mod:`calibrate.spawn`); ``resume`` reads
``out`` and measures only the (op, size) pairs it lacks.
Sizes follow nccl-tests: all_gather counts the total output, reduce_scatter the total
input, all_to_all the per-rank send buffer.

>>> message_sizes(1024, 8192, 2)
[1024, 2048, 4096, 8192]
"""

from __future__ import annotations

import math
import os
import socket
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

from calibrate.coll_calls import Unsupported, buffers, time_iterations
from calibrate.compute import cpu_model, gpu_driver, nccl_version, require_torch
from calibrate.measurements import (
    DTYPE_BYTES,
    CollectiveRecord,
    Measurements,
    Meta,
    check_statistic,
    load_measurements,
    save_measurements,
    summarize_times,
    utc_now,
)
from calibrate.spawn import free_port, run_ranks
from sim.collectives.schedule import OPS, busbw_factor
from sim.errors import CalibrationError

__all__ = ["BACKENDS", "message_sizes", "run_collectives"]

BACKENDS = ("nccl", "gloo")
_PER_RANK = ("all_gather", "reduce_scatter", "all_to_all")  # count column is per rank
#: Default per-collective timeout (s): torch.distributed's own default for NCCL is 10 min.
TIMEOUT_S = 300.0
#: Most message sizes in one sweep (nccl-tests' -b 1 -e 16G -f 2 gives 35).
MAX_SIZES = 1000


@dataclass(frozen=True)
class _Plan:
    """Everything a rank needs; picklable, so spawned processes get it whole."""

    backend: str
    ops: tuple[str, ...]
    sizes: tuple[int, ...]
    iters: int
    warmup: int
    dtype: str
    skip_unsupported: bool
    created: str
    repeats: int = 1
    timeout_s: float = TIMEOUT_S
    out: str | None = None
    prior: tuple[CollectiveRecord, ...] = ()
    statistic: str = "median"

    @property
    def done(self) -> frozenset[tuple[str, int]]:
        """(op, size) pairs measured by an earlier run (``resume``)."""
        return frozenset((r.op, r.size_bytes) for r in self.prior)


def message_sizes(min_bytes: int, max_bytes: int, step_factor: float) -> list[int]:
    """nccl-tests' sweep: ``min_bytes``, ×``step_factor``, … up to ``max_bytes`` (bytes)."""
    if min_bytes < 1 or max_bytes < min_bytes:
        raise CalibrationError(
            f"message sizes: need 1 <= min_bytes <= max_bytes, got {min_bytes}..{max_bytes}"
        )
    if not math.isfinite(step_factor) or step_factor <= 1:
        raise CalibrationError(f"step_factor must be a finite number > 1, got {step_factor}")
    points = math.log(max_bytes / min_bytes) / math.log(step_factor) + 1
    if points > MAX_SIZES:
        raise CalibrationError(
            f"step_factor {step_factor} gives {points:.3g} sizes from {min_bytes} to "
            f"{max_bytes} bytes; at most {MAX_SIZES} (raise --step-factor)"
        )
    sizes, size = [], float(min_bytes)
    while size <= max_bytes:
        sizes.append(int(size))
        size *= step_factor
    return sizes


def _under_torchrun() -> bool:
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR"))


def _check_args(backend: str, ops: Sequence[str], dtype: str, iters: int, warmup: int) -> None:
    if backend not in BACKENDS:
        raise CalibrationError(f"backend {backend!r} is unknown; allowed: {', '.join(BACKENDS)}")
    bad = [op for op in ops if op not in OPS]
    if bad or not ops:
        what = f"op {bad[0]!r} is unknown" if bad else "no ops given"
        raise CalibrationError(f"{what}; allowed: {', '.join(OPS)}")
    if dtype not in DTYPE_BYTES:
        raise CalibrationError(f"dtype {dtype!r} is unknown; allowed: {', '.join(DTYPE_BYTES)}")
    if iters < 1 or warmup < 0:
        raise CalibrationError(f"need iters >= 1 and warmup >= 0, got {iters} and {warmup}")


def run_collectives(
    backend: str,
    ops: Sequence[str],
    min_bytes: int = 1024,
    max_bytes: int = 2**20,
    step_factor: float = 2.0,
    iters: int = 20,
    warmup: int = 5,
    local: int | None = None,
    dtype: str = "float32",
    skip_unsupported: bool = False,
    created: str | None = None,
    repeats: int = 1,
    timeout_s: float = TIMEOUT_S,
    out: str | None = None,
    resume: bool = False,
    statistic: str = "median",
) -> Measurements:
    """Time real collectives over a sweep of message sizes.

    Parameters
    ----------
    backend : {'nccl', 'gloo'}
        NCCL on GPUs (one per process) or gloo on CPU.
    ops : sequence of str
        Among all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all, send_recv.
    min_bytes, max_bytes, step_factor
        The sweep, in nccl-tests' size (bytes); sizes round down to whole elements per rank.
    iters, warmup : int
        Timed and untimed calls per size.
    local : int, optional
        Spawn this many local processes; None joins the surrounding torchrun job.
    dtype : str
        Element type (torch's spelling, e.g. 'float32', 'bfloat16').
    skip_unsupported : bool
        An op the backend cannot run becomes a note in ``meta.notes`` instead of an error.
    created : str, optional
        Fixed ``meta.created`` (UTC ISO-8601).
    repeats : int
        Interleaved passes over all sizes; each size's median is over every pass's
        ``iters`` calls (steadier on shared or noisy hosts).
    timeout_s : float
        Seconds any one collective may take before the run fails (a stopped or dead rank).
    out : str, optional
        Measurement file that rank 0 rewrites after every finished size, so a failed run
        keeps what it measured.
    resume : bool
        Keep the records already in ``out`` and measure only the (op, size) pairs it lacks.
    statistic : {'median', 'min'}
        What each record's ``time_s`` is of its timed calls
        (:data:`~calibrate.measurements.STATISTICS`, recorded as ``meta.time_statistic``):
        ``min`` on a shared host, where other work only ever adds time.

    Returns
    -------
    Measurements
        Kind ``"collectives"``, on every rank (only rank 0 needs to write it).

    Raises
    ------
    CalibrationError
        Unknown backend/op/dtype, NCCL without CUDA, neither torchrun nor ``local``, an op
        the backend does not support (unless ``skip_unsupported``), a failed rank.
    """
    _check_args(backend, ops, dtype, iters, warmup)
    check_statistic(statistic)
    if repeats < 1:
        raise CalibrationError(f"--repeats {repeats}: must be >= 1")
    if not math.isfinite(timeout_s) or not 0 < timeout_s <= 86400:
        raise CalibrationError(f"--timeout {timeout_s}: must be seconds in (0, 86400]")
    plan = _Plan(backend, tuple(ops), tuple(message_sizes(min_bytes, max_bytes, step_factor)),
                 iters, warmup, dtype, skip_unsupported, utc_now(created), repeats,
                 float(timeout_s), out,
                 _prior(out, backend, dtype, _world(local), iters, statistic) if resume else (),
                 statistic)  # fmt: skip
    torch = require_torch()
    if backend == "nccl" and not torch.cuda.is_available():
        raise CalibrationError("backend 'nccl' needs CUDA GPUs and none is visible; use gloo")
    if local is None:
        if not _under_torchrun():
            raise CalibrationError(
                "not launched by torchrun (RANK, WORLD_SIZE, MASTER_ADDR unset); "
                "launch with torchrun or pass --local N"
            )
        return _run_in_job(torch, plan)
    if _under_torchrun():
        raise CalibrationError("--local N spawns its own processes; do not combine with torchrun")
    if local < 1 or (backend == "nccl" and local > torch.cuda.device_count()):
        gpus = torch.cuda.device_count() if backend == "nccl" else "any"
        raise CalibrationError(f"local={local}: need 1 <= local <= GPUs available ({gpus})")
    if backend == "gloo" and local > max_gloo_ranks():
        raise CalibrationError(
            f"local={local}: at most {max_gloo_ranks()} gloo ranks on this host's "
            f"{os.cpu_count() or 1} CPUs ({GLOO_RANKS_PER_CPU} per CPU); more would time the "
            "scheduler, not the collective"
        )
    return _spawn_local(torch, plan, local)


#: Local gloo ranks per CPU a run may spawn (beyond it the ranks wait on the scheduler).
GLOO_RANKS_PER_CPU = 4


def max_gloo_ranks() -> int:
    """Most local gloo ranks :func:`run_collectives` spawns on this host (at least 2)."""
    return max(2, GLOO_RANKS_PER_CPU * (os.cpu_count() or 1))


def _world(local: int | None) -> int | None:
    """The ranks of the run about to start: ``local``, or torchrun's WORLD_SIZE."""
    if local is not None:
        return local
    text = os.environ.get("WORLD_SIZE", "")
    return int(text) if text.isdigit() and len(text) < 10 else None


def _prior(
    out: str | None,
    backend: str,
    dtype: str,
    world: int | None,
    iters: int,
    statistic: str = "median",
) -> tuple[CollectiveRecord, ...]:
    """The records of an earlier run in ``out`` (none if it does not exist yet), refused
    unless that run measured what this one will: collectives on ``backend``, in ``dtype``,
    on ``world`` ranks, ``iters`` timed calls per size, summarised by ``statistic``
    (records of two different runs in one file would be fitted as one)."""
    if out is None:
        raise CalibrationError("--resume needs --out (the file of the run to continue)")
    if not Path(out).exists():
        return ()
    m = load_measurements(out)
    if m.kind != "collectives" or m.meta.backend != backend:
        raise CalibrationError(
            f"--resume: {out} holds {m.kind} measurements with backend {m.meta.backend!r}, "
            f"not collectives with {backend!r}"
        )
    stated = m.meta.details.get("iters")
    checks = (
        ("dtype", dtype, sorted({r.dtype for r in m.collectives})),
        ("ranks", world, sorted({r.n_ranks for r in m.collectives} | {m.meta.world_size})),
        # records count every timed call of a size (iters x repeats); older files did not
        # state iters, so a count that iters does not divide tells another run
        ("iterations per size", iters,
         [stated] if stated is not None else sorted({r.iters for r in m.collectives
                                                     if r.iters and r.iters % iters})),
        ("--statistic", statistic, [m.meta.time_statistic]),
    )  # fmt: skip
    for what, now, earlier in checks:
        if now is not None and earlier and earlier != [now]:
            raise CalibrationError(
                f"--resume: {out} was measured with {what} "
                f"{', '.join(map(str, earlier))}, this run has {now}; resume with the same "
                "options, or write another file"
            )
    return m.collectives


def _run_in_job(torch: ModuleType, plan: _Plan) -> Measurements:
    dist = torch.distributed
    if plan.backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    owned = not dist.is_initialized()
    if owned:
        dist.init_process_group(plan.backend, timeout=timedelta(seconds=plan.timeout_s))
    try:
        return _measure(torch, plan)
    finally:
        # Tear the group down together: a rank that exits with gloo's threads still
        # running aborts ("terminate called without an active exception"), and torchrun
        # then reports the whole job failed.
        if owned:
            dist.barrier()
            dist.destroy_process_group()


def _spawn_local(torch: ModuleType, plan: _Plan, n: int) -> Measurements:
    with tempfile.TemporaryDirectory(prefix="clustersim-coll-") as tmp:
        try:
            run_ranks(torch, _worker, (n, free_port(), plan, tmp), n, plan.timeout_s)
            errors = sorted(Path(tmp).glob("error-*.txt"))
            if errors:
                raise CalibrationError(errors[0].read_text(encoding="utf-8"))
        except CalibrationError as err:
            raise CalibrationError(f"{err}{_kept(plan)}") from None
        m = load_measurements(Path(tmp) / "result.json")
    cores = os.cpu_count() or 1
    if plan.backend == "gloo" and n > cores:  # say so where the numbers are kept
        note = (f"oversubscribed: {n} ranks on {cores} CPU cores; times include scheduler "
                "stalls (keep --local at or below the cores)")  # fmt: skip
        m = replace(m, meta=replace(m.meta, notes=(*m.meta.notes, note)))
    return m


def _kept(plan: _Plan) -> str:
    """Where the sizes finished before a failure are, for the error message."""
    if plan.out is None or not Path(plan.out).exists():
        return ""
    kept = len(load_measurements(plan.out).records)
    return f"; {kept} records kept in {plan.out} (add --resume to continue)"


def _worker(rank: int, n: int, port: int, plan: _Plan, outdir: str) -> None:
    """One spawned rank: run the sweep; rank 0 writes the result, any rank its error."""
    import torch

    dist = torch.distributed
    try:
        if plan.backend == "nccl":
            torch.cuda.set_device(rank)
        else:  # CPU ranks share the host's cores: don't let each one claim all of them
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // n))
        dist.init_process_group(plan.backend, init_method=f"tcp://127.0.0.1:{port}",
                                rank=rank, world_size=n,
                                timeout=timedelta(seconds=plan.timeout_s))  # fmt: skip
        m = _measure(torch, plan)
        if rank == 0:
            save_measurements(m, Path(outdir) / "result.json")
    except Exception as err:
        text = str(err) if isinstance(err, CalibrationError) else f"{type(err).__name__}: {err}"
        Path(outdir, f"error-{rank}.txt").write_text(f"rank {rank}: {text}", encoding="utf-8")
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _measure(torch: ModuleType, plan: _Plan) -> Measurements:
    """This rank's part of the sweep; every rank returns the same Measurements."""
    dist = torch.distributed
    n = dist.get_world_size()
    records: list[CollectiveRecord] = list(plan.prior)
    notes: list[str] = [f"resumed: {len(plan.prior)} records from an earlier run"] * bool(
        plan.prior
    )
    meta = _job_meta(torch, plan, notes)  # collective: every rank, before any failure

    def keep(record: CollectiveRecord) -> None:
        records.append(record)
        if plan.out is not None and dist.get_rank() == 0:
            partial = (*notes, f"partial: {len(records)} records so far (--resume continues)")
            save_measurements(_sorted(meta, records, partial), plan.out)

    for op in plan.ops:
        try:
            _sweep(torch, plan, op, keep)
        except Unsupported as err:
            msg = f"op {op!r} is not supported by backend {plan.backend!r} on {n} ranks: {err}"
            if not plan.skip_unsupported:
                raise CalibrationError(msg) from None
            notes.append(f"skipped: {msg}")
    return _sorted(meta, records, notes)


def _sorted(meta: Meta, records: Sequence[CollectiveRecord], notes: Sequence[str]) -> Measurements:
    """The file's contents: records in (op order, size) order, whatever ran first."""
    order = {op: i for i, op in enumerate(OPS)}
    ordered = sorted(records, key=lambda r: (order.get(r.op, len(order)), r.size_bytes))
    return Measurements("collectives", replace(meta, notes=tuple(notes)), tuple(ordered))


def _sweep(torch: ModuleType, plan: _Plan, op: str,
           keep: Callable[[CollectiveRecord], None]) -> None:  # fmt: skip
    """Time ``op`` at every size not done yet; ``keep`` each record as its size finishes."""
    dist = torch.distributed
    n, rank = dist.get_world_size(), dist.get_rank()
    dev = "cuda" if plan.backend == "nccl" else "cpu"
    elt = DTYPE_BYTES[plan.dtype]
    per = elt * (n if op in _PER_RANK else 1)
    # Requested sizes round to whole elements per rank; several may round to one size,
    # whose samples all count. Sizes measured by an earlier run (resume) are skipped.
    counts = [c for c in (b // per for b in plan.sizes) if c and (op, c * per) not in plan.done]
    final = {c: i for i, c in enumerate(counts)}  # a size's record is kept after its last call
    samples: dict[int, list[float]] = {}
    # ``repeats`` passes over all sizes, interleaved: a burst of host noise then spreads
    # over every size's samples instead of shifting a few sizes of one pass.
    for last in [False] * (plan.repeats - 1) + [True]:
        for i, count in enumerate(counts):
            call, in_place = buffers(torch, op, count, n, rank, dev, plan.dtype)
            if not samples:
                try:  # a backend that lacks the op says so on the first call
                    call()
                except (RuntimeError, NotImplementedError) as err:
                    raise Unsupported.from_error(err) from None
            times = time_iterations(torch, call, plan.warmup, plan.iters, dev)
            samples.setdefault(count, []).extend(times)
            if last and final[count] == i:
                keep(_record(op, count * per, count, in_place, samples[count], plan.dtype, n,
                             plan.statistic))  # fmt: skip


def _record(op: str, size: int, count: int, in_place: bool, times_s: list[float], dtype: str,
            n: int, statistic: str = "median") -> CollectiveRecord:  # fmt: skip
    t, spread = summarize_times(times_s, statistic)
    algbw = size / t / 1e9
    return CollectiveRecord(
        op=op, size_bytes=size, count=count, dtype=dtype, time_s=t,
        time_spread_s=spread, algbw_GBps=algbw, busbw_GBps=algbw * busbw_factor(op, n),
        in_place=in_place, n_ranks=n, iters=len(times_s),
    )  # fmt: skip


def _job_meta(torch: ModuleType, plan: _Plan, notes: list[str]) -> Meta:
    dist = torch.distributed
    n = dist.get_world_size()
    names: list[Any] = [None] * n
    dist.all_gather_object(names, socket.gethostname())
    hosts = sorted(set(names))
    cuda = plan.backend == "nccl"
    timing = "CUDA events" if cuda else "time.perf_counter"
    return Meta(
        source="live run", created=plan.created, hosts=tuple(hosts),
        gpu_model=torch.cuda.get_device_name() if cuda else None,
        driver=gpu_driver() if cuda else None, torch_version=torch.__version__,
        nccl_version=nccl_version(torch) if cuda else None, world_size=n, nodes=len(hosts),
        gpus_per_node=n // len(hosts) if cuda and n % len(hosts) == 0 else None,
        backend=plan.backend, time_statistic=plan.statistic, spread="p90-p10",
        notes=tuple(notes),
        details={"cpu_model": cpu_model(), "timing": f"{timing}, barrier before each call, "
                 "max over ranks", "warmup": plan.warmup, "iters": plan.iters,
                 "repeats": plan.repeats, "device": "cuda" if cuda else "cpu"},
    )  # fmt: skip
