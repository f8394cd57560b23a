"""The ``clustersim`` command: subcommands, and the one place user errors become exit 2.

A :class:`~sim.errors.ClusterSimError` prints one line ``clustersim: error: ...`` on stderr
and exits with status 2, no traceback. argparse's own usage errors also exit 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from sim.errors import ClusterSimError

__all__ = ["main"]

Handler = Callable[[argparse.Namespace], int]


def _parser() -> argparse.ArgumentParser:
    from sim.cli import collective, topologies

    parser = argparse.ArgumentParser(
        prog="clustersim",
        description="Simulate multi-GPU training clusters, calibrated against real runs.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    collective.register(sub)
    topologies.register(sub)
    for name in ("run", "calibrate"):
        _register_optional(sub, name)
    return parser


def _register_optional(sub: argparse._SubParsersAction, name: str) -> None:
    """Subcommands whose modules may not exist yet in a partial checkout."""
    import importlib

    try:
        mod = importlib.import_module(f"sim.cli.{name}")
    except ModuleNotFoundError:
        return
    mod.register(sub)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``clustersim`` console script; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except ClusterSimError as e:
        print(f"clustersim: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
