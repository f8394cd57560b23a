"""One small tree of user-facing errors.

Every mistake a user can make (bad file, unknown preset, impossible plan, bad unit)
raises a subclass of :class:`ClusterSimError`. The CLI prints ``str(error)`` as one or
two lines and exits with status 2; no traceback. ``assert`` is kept for internal
invariants only.
"""

from __future__ import annotations

__all__ = [
    "CalibrationError",
    "ClusterSimError",
    "ConfigError",
    "Interrupted",
    "MissingExtraError",
    "TopologyError",
    "UnsupportedCollectiveError",
]


class ClusterSimError(Exception):
    """Base of every error caused by user input."""

    #: The command line's exit status for this error.
    exit_status = 2


class ConfigError(ClusterSimError, ValueError):
    """A bad value or key in a scenario, profile, parameter file or command line."""


class TopologyError(ClusterSimError, ValueError):
    """A topology that cannot be built or used (unknown part, disconnected, bad link)."""


class CalibrationError(ClusterSimError, ValueError):
    """Measurements that cannot be parsed, fitted or run."""


class MissingExtraError(ClusterSimError, ImportError):
    """An optional dependency (an install extra such as ``[plot]`` or ``[chakra]``) is missing."""


class UnsupportedCollectiveError(ConfigError):
    """An algorithm asked for an operation or group it does not implement."""


class Interrupted(ClusterSimError):
    """The user stopped a run (Ctrl-C, SIGTERM); the message says what was kept.

    The command line exits with 130, the shell's status for a run ended by Ctrl-C.
    """

    exit_status = 130
