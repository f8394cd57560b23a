"""Exclusive locks on outputs that a run writes over time (a sweep's ``--out``).

A file written at once is replaced atomically (:func:`sim.files.write_atomic`); a file a
run appends to for minutes needs more: a second run on it would interleave its rows. The
lock here makes the second run fail at once, naming the first.

>>> import tempfile, pathlib
>>> out = pathlib.Path(tempfile.mkdtemp()) / "s.csv"
>>> with output_lock(out, "--out") as target:
...     target.name
's.csv'
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from sim.errors import ConfigError
from sim.files import check_output_path, writes_through

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["output_lock"]


def _holder(fd: int) -> str:
    """What the lock file says about the process holding it (pid, host, since)."""
    try:
        text = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    return text or "a process that has not said who it is"


@contextmanager
def output_lock(path: str | os.PathLike[str], option: str) -> Iterator[Path]:
    """Hold an exclusive lock on an output for a run that writes it over time.

    The lock is a file ``.NAME.lock`` beside the output, locked with ``flock`` (released
    by the kernel when its holder dies, even by ``kill -9``) and holding its holder's pid,
    host and start time; it is removed when the run ends. A second run on the same output
    is refused at once, naming the holder. Where ``fcntl`` is missing (Windows) outputs
    are not locked.

    Parameters
    ----------
    path : str or Path
        The output (see :func:`check_output_path`).
    option : str
        The option naming it, for messages.

    Yields
    ------
    Path
        The output file (a symbolic link's target).

    Raises
    ------
    ConfigError
        Another run holds the lock, or the lock file cannot be made.
    """
    target = check_output_path(path, option)
    if fcntl is None or writes_through(path, option):
        yield target
        return
    lock = target.with_name(f".{target.name[:200]}.lock")
    fd = _take_lock(lock, f"{option} {str(path)!r}")
    try:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {when}\n".encode(), 0)
        yield target
    finally:
        with suppress(OSError):
            lock.unlink()  # while still held: a waiting process sees it gone and retries
        os.close(fd)


def _take_lock(lock: Path, what: str) -> int:
    """Open and ``flock`` ``lock``; retried when the holder removed it meanwhile."""
    assert fcntl is not None
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise ConfigError(
                f"{what}: cannot make the lock file {lock.name} ({e.strerror})"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _holder(fd)
            os.close(fd)
            raise ConfigError(
                f"{what} is being written by another run ({holder}); wait for it to end "
                "or choose another file"
            ) from None
        try:
            same = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # the previous holder removed it after we opened it: take the new one
