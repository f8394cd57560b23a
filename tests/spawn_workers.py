"""Workers for tests of calibrate.spawn: importable top-level functions for spawned ranks."""

from __future__ import annotations

import os
import signal


def stop_rank_one(rank: int) -> None:
    """Rank 0 returns at once; rank 1 stops itself (SIGSTOP), as a wedged rank would."""
    if rank == 1:
        os.kill(os.getpid(), signal.SIGSTOP)


def all_return(rank: int) -> None:
    """Every rank returns at once."""
