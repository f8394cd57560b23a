"""Real collectives with torch.distributed, timed the way nccl-tests times them.

``run_collectives`` sweeps message sizes for each op. Under ``torchrun`` (``RANK``,
``WORLD_SIZE`` and ``MASTER_ADDR`` set) it joins that job, so one command runs across many
nodes; ``local=N`` spawns N processes on this machine itself (loopback, a free port).
NCCL runs on GPUs (one per process, CUDA events), gloo on CPU (``time.perf_counter``).

Per size: ``warmup`` untimed calls, then ``iters`` timed ones, each started right after a
barrier. An iteration's time is the slowest rank's (the per-rank times are all-reduced
with MAX, as nccl-tests does); the record keeps the median and the p90−p10 spread.
Sizes follow nccl-tests: all_gather counts the total output, reduce_scatter the total
input, all_to_all the per-rank send buffer.

>>> message_sizes(1024, 8192, 2)
[1024, 2048, 4096, 8192]
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

from calibrate.compute import cpu_model, gpu_driver, nccl_version, require_torch
from calibrate.measurements import (
    DTYPE_BYTES,
    CollectiveRecord,
    Measurements,
    Meta,
    load_measurements,
    save_measurements,
    summarize_times,
    utc_now,
)
from sim.collectives.schedule import OPS, busbw_factor
from sim.errors import CalibrationError

__all__ = ["BACKENDS", "message_sizes", "run_collectives"]

BACKENDS = ("nccl", "gloo")
_PER_RANK = ("all_gather", "reduce_scatter", "all_to_all")  # count column is per rank
_TIMEOUT = timedelta(seconds=300)


class _Unsupported(Exception):
    """The backend refused the op on its first call (the reason is the message)."""

    @classmethod
    def from_error(cls, err: Exception) -> _Unsupported:
        text = str(err).strip()
        return cls(text.splitlines()[0][:160] if text else type(err).__name__)


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


def message_sizes(min_bytes: int, max_bytes: int, step_factor: float) -> list[int]:
    """nccl-tests' sweep: ``min_bytes``, ×``step_factor``, … up to ``max_bytes`` (bytes)."""
    if min_bytes < 1 or max_bytes < min_bytes:
        raise CalibrationError(
            f"message sizes: need 1 <= min_bytes <= max_bytes, got {min_bytes}..{max_bytes}"
        )
    if step_factor <= 1:
        raise CalibrationError(f"step_factor must be > 1, got {step_factor}")
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
    if repeats < 1:
        raise CalibrationError(f"--repeats {repeats}: must be >= 1")
    plan = _Plan(backend, tuple(ops), tuple(message_sizes(min_bytes, max_bytes, step_factor)),
                 iters, warmup, dtype, skip_unsupported, utc_now(created), repeats)  # fmt: skip
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
    return _spawn_local(torch, plan, local)


def _run_in_job(torch: ModuleType, plan: _Plan) -> Measurements:
    dist = torch.distributed
    if plan.backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    owned = not dist.is_initialized()
    if owned:
        dist.init_process_group(plan.backend, timeout=_TIMEOUT)
    try:
        return _measure(torch, plan)
    finally:
        # Tear the group down together: a rank that exits with gloo's threads still
        # running aborts ("terminate called without an active exception"), and torchrun
        # then reports the whole job failed.
        if owned:
            dist.barrier()
            dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spawn_local(torch: ModuleType, plan: _Plan, n: int) -> Measurements:
    with tempfile.TemporaryDirectory(prefix="clustersim-coll-") as tmp:
        args = (n, _free_port(), plan, tmp)
        try:
            torch.multiprocessing.spawn(_worker, args=args, nprocs=n, join=True)
        except Exception as err:  # a rank died outside _worker's own handling
            raise CalibrationError(f"a local rank failed: {str(err).strip()[-300:]}") from None
        errors = sorted(Path(tmp).glob("error-*.txt"))
        if errors:
            raise CalibrationError(errors[0].read_text(encoding="utf-8"))
        m = load_measurements(Path(tmp) / "result.json")
    cores = os.cpu_count() or 1
    if plan.backend == "gloo" and n > cores:  # say so where the numbers are kept
        note = (f"oversubscribed: {n} ranks on {cores} CPU cores; times include scheduler "
                "stalls (keep --local at or below the cores)")  # fmt: skip
        m = replace(m, meta=replace(m.meta, notes=(*m.meta.notes, note)))
    return m


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
                                rank=rank, world_size=n, timeout=_TIMEOUT)  # fmt: skip
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
    records: list[CollectiveRecord] = []
    notes: list[str] = []
    for op in plan.ops:
        try:
            records += _sweep(torch, plan, op)
        except _Unsupported as err:
            msg = f"op {op!r} is not supported by backend {plan.backend!r} on {n} ranks: {err}"
            if not plan.skip_unsupported:
                raise CalibrationError(msg) from None
            notes.append(f"skipped: {msg}")
    return Measurements("collectives", _job_meta(torch, plan, notes), tuple(records))


def _buffers(torch: ModuleType, op: str, count: int, n: int, rank: int, dev: str, dtype: str
             ) -> tuple[Callable[[], Any], bool]:  # fmt: skip
    """The call that runs ``op`` once, on buffers of ``count`` elements per rank; in-place?"""
    dist = torch.distributed
    make = partial(torch.ones, dtype=getattr(torch, dtype), device=dev)
    buf, full = make(count), make(count * n)
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    if op == "send_recv":
        if n < 2:
            raise _Unsupported("send_recv needs at least 2 ranks")
        recv = make(count)
        p2p = [dist.P2POp(dist.isend, buf, (rank + 1) % n),
               dist.P2POp(dist.irecv, recv, (rank - 1) % n)]  # fmt: skip
        return lambda: [w.wait() for w in dist.batch_isend_irecv(p2p)], False
    calls: dict[str, tuple[Callable[[], Any], bool]] = {
        "all_reduce": (partial(dist.all_reduce, buf), True),
        "broadcast": (partial(dist.broadcast, buf, src=0), True),
        "reduce": (partial(dist.reduce, buf, dst=0), True),
        "all_gather": (partial(gather, full, buf), False),
        "reduce_scatter": (partial(scatter, buf, full), False),
        "all_to_all": (partial(dist.all_to_all_single, make(count * n), full), False),
    }
    return calls[op]


def _time_iterations(torch: ModuleType, call: Callable[[], Any], plan: _Plan, dev: str
                     ) -> list[float]:  # fmt: skip
    """Per-iteration seconds, the max over ranks, each iteration started after a barrier."""
    dist = torch.distributed
    for _ in range(plan.warmup):
        call()
    times = []
    for _ in range(plan.iters):
        dist.barrier()
        if dev == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e-3)
        else:
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
    slowest = torch.tensor(times, dtype=torch.float64, device=dev)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return [float(t) for t in slowest.tolist()]


def _sweep(torch: ModuleType, plan: _Plan, op: str) -> list[CollectiveRecord]:
    dist = torch.distributed
    n, rank = dist.get_world_size(), dist.get_rank()
    dev = "cuda" if plan.backend == "nccl" else "cpu"
    elt = DTYPE_BYTES[plan.dtype]
    samples: dict[int, list[float]] = {}
    shape: dict[int, tuple[int, bool]] = {}
    # ``repeats`` passes over all sizes, interleaved: a burst of host noise then spreads
    # over every size's samples instead of shifting a few sizes of one pass.
    for _ in range(plan.repeats):
        for nbytes in plan.sizes:
            count = nbytes // (elt * (n if op in _PER_RANK else 1))
            if count == 0:
                continue  # smaller than one element per rank
            size = count * elt * (n if op in _PER_RANK else 1)
            call, in_place = _buffers(torch, op, count, n, rank, dev, plan.dtype)
            if not samples:
                try:  # a backend that lacks the op says so on the first call
                    call()
                except (RuntimeError, NotImplementedError) as err:
                    raise _Unsupported.from_error(err) from None
            samples.setdefault(size, []).extend(_time_iterations(torch, call, plan, dev))
            shape[size] = (count, in_place)
    records: list[CollectiveRecord] = []
    for size in sorted(samples):
        median, spread = summarize_times(samples[size])
        algbw = size / median / 1e9
        records.append(CollectiveRecord(
            op=op, size_bytes=size, count=shape[size][0], dtype=plan.dtype, time_s=median,
            time_spread_s=spread, algbw_GBps=algbw, busbw_GBps=algbw * busbw_factor(op, n),
            in_place=shape[size][1], n_ranks=n, iters=len(samples[size]),
        ))  # fmt: skip
    return records


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
        backend=plan.backend, time_statistic="median", spread="p90-p10", notes=tuple(notes),
        details={"cpu_model": cpu_model(), "timing": f"{timing}, barrier before each call, "
                 "max over ranks", "warmup": plan.warmup, "device": "cuda" if cuda else "cpu"},
    )  # fmt: skip
