"""The ``clustersim`` command: subcommands, and the one place user errors become exit 2.

A :class:`~sim.errors.ClusterSimError` prints one line ``clustersim: error: ...`` on stderr
and exits with status 2, no traceback. argparse's own usage errors also exit 2.

Start-up stays short: the subcommand modules import only the standard library at the
top, and each handler imports the simulator when it runs, so ``clustersim --help``
never loads numpy, scipy or networkx. Subcommands of other packages (``calibrate``)
register through the ``clustersim.commands`` entry-point group, whose entries are
functions ``register(subparsers)``; they are loaded only when the command line does not
start with a built-in command (a plugin's command, help or a usage error), so the
simulator never imports them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from sim.errors import ClusterSimError

__all__ = ["main"]

COMMAND_GROUP = "clustersim.commands"
BUILTIN_COMMANDS = ("collective", "topologies", "run", "sweep", "plan", "report", "schema")

Handler = Callable[[argparse.Namespace], int]


def _parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    from sim import __version__
    from sim.cli import collective, plan, report, run, schema, sweep, topologies

    parser = argparse.ArgumentParser(
        prog="clustersim",
        description="Simulate multi-GPU training clusters, calibrated against real runs.",
    )
    parser.add_argument("--version", action="version", version=f"clustersim {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (collective, topologies, run, sweep, plan, report, schema):
        module.register(sub)
    if not argv or argv[0] not in BUILTIN_COMMANDS:
        _register_plugins(sub)
    return parser


def _register_plugins(sub: argparse._SubParsersAction) -> None:
    """Add the subcommands of installed packages' ``clustersim.commands`` entry points."""
    from importlib.metadata import entry_points

    for ep in sorted(entry_points(group=COMMAND_GROUP), key=lambda e: e.name):
        ep.load()(sub)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``clustersim`` console script; returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser(argv).parse_args(argv)
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
