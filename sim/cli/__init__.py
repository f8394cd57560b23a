"""The ``clustersim`` command: subcommands, and the one place user errors become exit 2.

A :class:`~sim.errors.ClusterSimError` prints one line ``clustersim: error: ...`` on stderr
and exits with status 2, no traceback (130 for :class:`~sim.errors.Interrupted` and a
Ctrl-C: the run was stopped, and says what it kept). argparse's own usage errors also exit 2. So do the
failures only hostile input reaches past the validators: a file that cannot be read or
written (``OSError``), input nested too deeply (``RecursionError``), sizes too large to hold
(``MemoryError``, ``OverflowError``); they print one line naming the problem.

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
import contextlib
import gc
import os
import sys
from collections.abc import Callable, Iterator, Sequence

from sim.cli.runtime import settle
from sim.errors import ClusterSimError

__all__ = ["long_lived", "main"]

COMMAND_GROUP = "clustersim.commands"
BUILTIN_COMMANDS = (
    "collective",
    "topologies",
    "run",
    "compare",
    "sweep",
    "plan",
    "report",
    "explore",
    "schema",
    "chakra",
)

Handler = Callable[[argparse.Namespace], int]
#: A package's ``register(subparsers)`` (what a ``clustersim.commands`` entry point names).
Registrar = Callable[[argparse._SubParsersAction], None]


def _parser(argv: Sequence[str], plugins: Sequence[Registrar] = ()) -> argparse.ArgumentParser:
    from sim.cli import (
        chakra,
        collective,
        compare,
        explore,
        plan,
        report,
        run,
        schema,
        sweep,
        topologies,
    )
    from sim.version import __version__

    parser = argparse.ArgumentParser(
        prog="clustersim",
        description="Simulate multi-GPU training clusters, calibrated against real runs.",
    )
    parser.add_argument("--version", action="version", version=f"clustersim {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (
        collective,
        topologies,
        run,
        compare,
        sweep,
        plan,
        report,
        explore,
        schema,
        chakra,
    ):
        module.register(sub)
    if not argv or argv[0] not in BUILTIN_COMMANDS:
        _register_plugins(sub, plugins)
    return parser


def _register_plugins(sub: argparse._SubParsersAction, plugins: Sequence[Registrar]) -> None:
    """Add ``plugins`` and the subcommands of installed packages' ``clustersim.commands``
    entry points (one naming a registrar already in ``plugins`` is not added twice)."""
    from importlib.metadata import entry_points

    found = [ep.load() for ep in sorted(entry_points(group=COMMAND_GROUP), key=lambda e: e.name)]
    for register in (*plugins, *(r for r in found if r not in plugins)):
        register(sub)


def main(argv: Sequence[str] | None = None, plugins: Sequence[Registrar] = ()) -> int:
    """Entry point of the ``clustersim`` console script; returns the exit status.

    ``plugins``: registrars added even where no installed package's entry point names them
    (``python -m calibrate`` from a source tree that was never installed).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if sys.stdout is None:  # started with standard output closed (``>&-``)
        return _fail("standard output is closed; redirect it to a file or /dev/null")
    args = _parser(argv, plugins).parse_args(argv)
    # before the simulator's imports (NumPy's BLAS threads; they allocate too); a command
    # that times real kernels keeps the C heap as a training job has it
    settle(heap=not getattr(args, "times_kernels", False))
    handler: Handler = args.handler
    try:
        return handler(args)
    except ClusterSimError as e:
        return _fail(str(e), e.exit_status)
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    except BrokenPipeError:
        return 0
    except OSError as e:
        name = f" {_short(e.filename)}" if e.filename else ""
        return _fail(f"cannot use file{name}: {e.strerror or e}")
    except RecursionError:
        return _fail("the input is nested too deeply")
    except (MemoryError, OverflowError) as e:
        return _fail(f"the input asks for more than this machine can hold ({type(e).__name__})")


@contextlib.contextmanager
def long_lived() -> Iterator[None]:
    """Around code whose objects live to the end of the command (a handler's imports of
    the simulator: modules, classes, pydantic schemas; the cluster it builds): the
    cyclic garbage collector is off while it runs (its passes over those objects were
    ~60 ms CPU of a 256-GPU collective's cold start), then stops re-scanning them
    (``gc.freeze``). Pydantic plugins are not looked up unless ``PYDANTIC_DISABLE_PLUGINS``
    says otherwise: clustersim uses none, and scanning every installed package's entry
    points was ~15 ms of a cold start."""
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def _short(value: object, limit: int = 80) -> str:
    text = repr(str(value))
    return text if len(text) <= limit else text[: limit - 4] + "...'"


def _fail(message: str, status: int = 2) -> int:
    """Print ``message`` as at most two lines on stderr; return ``status`` (2: a user error;
    130: stopped by the user)."""
    lines = message.splitlines() or [""]
    text = "\n".join(line if len(line) <= 400 else line[:397] + "..." for line in lines[:2])
    print(f"clustersim: error: {text}", file=sys.stderr)
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
