"""Writing report outputs: whole files or nothing, into folders that exist."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from sim.errors import ConfigError

__all__ = ["write_atomic"]


def write_atomic(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file, so a failure leaves no half file.

    Raises
    ------
    ConfigError
        When the folder of ``path`` does not exist or cannot be written.
    """
    target = Path(path)
    folder = target.parent
    if not folder.is_dir():
        raise ConfigError(f"{path}: folder {str(folder)!r} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}-", suffix=".tmp")
    except OSError as e:
        raise ConfigError(f"{path}: cannot write ({e.strerror})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a report is meant to be shared
        os.replace(tmp, target)
    except IsADirectoryError:
        Path(tmp).unlink(missing_ok=True)
        raise ConfigError(f"{path}: is a folder, not a file name") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
