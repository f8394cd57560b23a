"""Spawn local ranks and wait for them without hanging on one that stopped.

``torch.multiprocessing.spawn(join=True)`` waits for every rank forever: a rank stopped by
a signal, a debugger or a wedged driver hangs the parent. :func:`run_ranks` starts the
ranks with ``join=False`` and polls; once any rank has exited, the others get the
per-collective timeout plus a grace period to finish (their own collectives time out
after ``timeout_s`` when a peer is gone), then they are killed and the run is reported
as failed, naming the ranks that did not finish.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from sim.errors import CalibrationError

__all__ = ["GRACE_S", "free_port", "run_ranks"]

#: Seconds a rank gets, beyond the collective timeout, to exit after a peer exited.
GRACE_S = 10.0
_POLL_S = 0.5


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_ranks(
    torch: ModuleType, worker: Callable[..., None], args: tuple[Any, ...], n: int, timeout_s: float
) -> None:
    """Run ``worker(rank, *args)`` in ``n`` spawned processes; return when all have exited.

    Parameters
    ----------
    torch : module
        The imported torch.
    worker : callable
        A picklable top-level function ``worker(rank, *args)``.
    args : tuple
        Its further arguments.
    n : int
        Processes.
    timeout_s : float
        The per-collective timeout (s): how long ranks may outlive the first one to exit
        (plus :data:`GRACE_S`) before they are killed.

    Raises
    ------
    CalibrationError
        A rank raised outside the worker's own handling, or ranks had to be killed.
    """
    ctx = torch.multiprocessing.spawn(worker, args=args, nprocs=n, join=False)
    first_exit: float | None = None
    try:
        while not ctx.join(timeout=_POLL_S):
            alive = [p.is_alive() for p in ctx.processes]
            if first_exit is None and not all(alive):
                first_exit = time.monotonic()
            if first_exit is not None and time.monotonic() - first_exit > timeout_s + GRACE_S:
                stuck = [i for i, a in enumerate(alive) if a]
                _kill(ctx)
                raise CalibrationError(
                    f"rank(s) {', '.join(map(str, stuck))} did not finish within "
                    f"{timeout_s + GRACE_S:g} s of a peer exiting (stopped or hung); killed"
                )
    except CalibrationError:
        raise
    except Exception as err:  # a rank died outside the worker's own handling
        _kill(ctx)
        raise CalibrationError(f"a local rank failed: {str(err).strip()[-300:]}") from None


def _kill(ctx: Any) -> None:
    for p in ctx.processes:
        if p.is_alive():
            p.kill()  # SIGKILL also ends a stopped (SIGSTOP) process
    for p in ctx.processes:
        p.join(timeout=5)
