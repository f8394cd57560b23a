"""One collective call on real buffers, and its timing (nccl-tests' way).

:func:`buffers` builds the call that runs an op once on ``count`` elements per rank;
:func:`time_iterations` times ``iters`` such calls, each after a barrier, as the slowest
rank saw it (all-reduced with MAX).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from types import ModuleType
from typing import Any

__all__ = ["Unsupported", "buffers", "time_iterations"]


class Unsupported(Exception):
    """The backend refused the op on its first call (the reason is the message)."""

    @classmethod
    def from_error(cls, err: Exception) -> Unsupported:
        text = str(err).strip()
        return cls(text.splitlines()[0][:160] if text else type(err).__name__)


def buffers(torch: ModuleType, op: str, count: int, n: int, rank: int, dev: str, dtype: str
             ) -> tuple[Callable[[], Any], bool]:  # fmt: skip
    """The call that runs ``op`` once, on buffers of ``count`` elements per rank; in-place?"""
    dist = torch.distributed
    make = partial(torch.ones, dtype=getattr(torch, dtype), device=dev)
    buf, full = make(count), make(count * n)
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    if op == "send_recv":
        if n < 2:
            raise Unsupported("send_recv needs at least 2 ranks")
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


def time_iterations(torch: ModuleType, call: Callable[[], Any], warmup: int, iters: int,
                    dev: str
                     ) -> list[float]:  # fmt: skip
    """Per-iteration seconds, the max over ranks, each iteration started after a barrier."""
    dist = torch.distributed
    for _ in range(warmup):
        call()
    times = []
    for _ in range(iters):
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
