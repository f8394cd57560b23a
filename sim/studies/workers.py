"""Worker processes of a local sweep that stop with it: Ctrl-C, a kill, or an error.

A sweep's process pool must never outlive its sweep. :func:`worker_pool` gives a
``ProcessPoolExecutor`` (spawn context: workers start clean, the same on every OS) whose
workers

- ignore Ctrl-C (SIGINT reaches the whole terminal's process group): the sweep itself
  stops them, so a Ctrl-C prints no traceback per worker;
- end on their own within :data:`PARENT_POLL_S` when the sweep's process is gone (killed
  with ``kill -9``, which no handler sees);
- are terminated at once when the sweep leaves the pool with an exception (Ctrl-C, an
  error, a closed generator) instead of finishing the points already running.

:func:`usable_cpus` is what ``--jobs`` is capped at: more processes than cores only share
them.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from multiprocessing import get_context

__all__ = ["PARENT_POLL_S", "usable_cpus", "worker_pool"]

#: How often a worker checks that the sweep that started it is still alive (seconds).
PARENT_POLL_S = 0.5


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one), >= 1.

    >>> usable_cpus() >= 1
    True
    """
    affinity = getattr(os, "sched_getaffinity", None)
    count = len(affinity(0)) if affinity is not None else os.cpu_count()
    return max(1, count or 1)


def _watch_parent(parent: int) -> None:
    while True:
        time.sleep(PARENT_POLL_S)
        if os.getppid() != parent:  # re-parented: the sweep is gone
            os._exit(1)


def _worker_init(parent: int) -> None:
    """Run in each worker before its first point: ignore Ctrl-C, die with the parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()


def _stop(pool: ProcessPoolExecutor, before: set[multiprocessing.process.BaseProcess]) -> None:
    """Cancel what has not started and end the workers now (not after their points)."""
    pool.shutdown(wait=False, cancel_futures=True)
    mine = [p for p in multiprocessing.active_children() if p not in before]
    for p in mine:
        p.terminate()
    for p in mine:
        p.join(timeout=2)
        if p.is_alive():
            p.kill()
            p.join(timeout=2)


@contextmanager
def worker_pool(jobs: int) -> Iterator[ProcessPoolExecutor]:
    """A process pool of ``jobs`` workers that never outlives the ``with`` block.

    Leaving the block normally waits for submitted work; leaving it with an exception
    (``KeyboardInterrupt``, ``GeneratorExit``, an error) cancels pending work and
    terminates the workers.
    """
    before = set(multiprocessing.active_children())
    pool = ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=get_context("spawn"),
        initializer=_worker_init,
        initargs=(os.getpid(),),
    )
    try:
        yield pool
    except BaseException:
        _stop(pool, before)
        raise
    pool.shutdown(wait=True)
