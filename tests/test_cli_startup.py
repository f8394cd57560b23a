"""The command line starts without the simulator, and finds ``calibrate`` by entry point.

``clustersim --help`` and ``clustersim COMMAND --help`` must not import numpy, scipy,
networkx, simpy, pydantic or torch: every handler imports what it needs when it runs;
commands that simulate import neither scipy nor networkx (benchmarks/startup.py times them).
Subcommands of other packages come from the ``clustersim.commands`` entry-point group,
looked up only when the command line does not start with a built-in command.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from sim.cli import BUILTIN_COMMANDS, COMMAND_GROUP, main

HEAVY = ("numpy", "scipy", "networkx", "simpy", "pydantic", "yaml", "torch")
CALIBRATE_SUBCOMMANDS = ("collectives", "compute", "step", "import-nccl-tests", "fit", "validate")


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["run", "--help"], ["collective", "--help"], ["topologies", "--help"],
     ["calibrate", "--help"], ["calibrate", "fit", "--help"]],
)  # fmt: skip
def test_help_loads_no_heavy_module(argv: list[str]) -> None:
    """Asking for help parses arguments only: no numerical library is imported."""
    code = (
        "import sys\n"
        "from sim.cli import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        f"heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
        "assert not heavy, f'imported for --help: {heavy}'\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("usage: clustersim")


#: What a command that simulates must not import: its topology is built and routed
#: without graph or sparse-matrix libraries, and plotting, tables and calibration stay out.
NOT_FOR_SIMULATING = (
    "scipy",
    "networkx",
    "matplotlib",
    "pandas",
    "torch",
    "calibrate",
    "sim.report",
)


@pytest.mark.parametrize(
    "argv",
    [["collective", "--topology", "h100-ib-ndr", "--nodes", "2", "-b", "1M", "-e", "1M"],
     ["collective", "--topology", "dgx-h100", "-b", "1M", "-e", "1M", "--network", "analytical"],
     ["run", "gpt2-1gpu", "--network", "analytical"],
     ["topologies"]],
)  # fmt: skip
def test_simulating_commands_load_no_graph_or_plotting_library(argv: list[str]) -> None:
    """`collective`, `run` and `topologies` start without scipy, networkx or the report."""
    _assert_not_imported(argv, NOT_FOR_SIMULATING)


#: What the closed form of a collective on an adaptive-routed fabric does not need: no
#: event loop, no flow network, no random numbers (no ECMP choice to hash).
NOT_FOR_CLOSED_FORM = (
    "simpy",
    "sim.network.base",
    "sim.network.flow",
    "sim.collectives.process",
    "numpy.random",
)


def test_analytical_collective_loads_no_event_loop() -> None:
    """A collective on the analytical network is the tuner's closed form: SimPy and the
    network backends stay unimported (they were 60-70 ms of its cold start), and so does
    numpy.random when no route has an ECMP choice to hash."""
    argv = ["collective", "--topology", "h100-ib-ndr", "--nodes", "2", "-b", "1M", "-e", "1M",
            "--network", "analytical"]  # fmt: skip
    _assert_not_imported(argv, NOT_FOR_CLOSED_FORM)


@pytest.mark.parametrize(
    "argv",
    [["run", "llama3-8b-dgx", "--network", "analytical"],
     ["plan", "llama3-8b-dgx", "--top", "2"]],
)  # fmt: skip
def test_analytical_steps_and_plans_load_no_event_loop(argv: list[str]) -> None:
    """A training step on the analytical network is list-scheduled (pipeline sends by the
    closed form of :mod:`sim.network.batch`), and a scenario's reliability section is
    parsed without the failure simulator: SimPy stays unimported (~70 ms of every
    analytical ``run``, ``sweep`` and ``plan``)."""
    _assert_not_imported(argv, ("simpy", "sim.network.base", "sim.network.flow"))


def _assert_not_imported(argv: list[str], modules: tuple[str, ...]) -> None:
    """Run ``clustersim ARGV`` in a fresh interpreter; none of ``modules`` may be imported."""
    code = (
        "import contextlib, io, sys\n"
        "from sim.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    assert main({argv!r}) == 0\n"
        f"loaded = sorted(m for m in {modules!r} if m in sys.modules)\n"
        "assert not loaded, f'imported: {loaded}'\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert p.returncode == 0, p.stderr


def test_console_script_finds_calibrate_by_entry_point() -> None:
    """The installed ``clustersim`` script lists ``calibrate`` and its subcommands."""
    script = shutil.which("clustersim", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip(f"no clustersim console script next to {sys.executable}: pip install -e .")
    top = subprocess.run([script, "--help"], capture_output=True, text=True, check=False)
    assert top.returncode == 0 and "calibrate" in top.stdout, top.stderr
    p = subprocess.run([script, "calibrate", "--help"], capture_output=True, text=True, check=False)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("usage: clustersim calibrate [-h] SUBCOMMAND ...")
    assert all(name in p.stdout for name in CALIBRATE_SUBCOMMANDS), p.stdout


def test_python_dash_m_sim_is_the_same_command() -> None:
    """``python -m sim`` prints what ``python -m sim.cli`` prints, with the same status."""
    runs = [
        subprocess.run([sys.executable, "-m", mod, "bogus"], capture_output=True, text=True)
        for mod in ("sim", "sim.cli")
    ]
    assert runs[0].returncode == runs[1].returncode == 2
    assert runs[0].stderr == runs[1].stderr and "invalid choice: 'bogus'" in runs[0].stderr


def _say_hello(args: argparse.Namespace) -> int:
    print("hello from a plugin")
    return 0


def _hello(sub: argparse._SubParsersAction) -> None:
    """The ``register`` function of a plugin command, as an entry point names it."""
    sub.add_parser("hello", help="a plugin command of this test").set_defaults(handler=_say_hello)


def test_plugins_load_only_when_the_command_is_not_built_in(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An entry point adds a command; a built-in command never looks entry points up."""
    lookups: list[str] = []
    hello = EntryPoint("hello", f"{__name__}:_hello", COMMAND_GROUP)

    def entry_points(group: str) -> list[EntryPoint]:
        lookups.append(group)
        return [hello] if group == COMMAND_GROUP else []

    monkeypatch.setattr("importlib.metadata.entry_points", entry_points)
    assert main(["hello"]) == 0
    assert capsys.readouterr().out == "hello from a plugin\n"
    assert lookups == [COMMAND_GROUP]
    for command in BUILTIN_COMMANDS:
        with pytest.raises(SystemExit):
            main([command, "--help"])
    assert lookups == [COMMAND_GROUP]


@pytest.mark.parametrize("installed", [False, True])
def test_plugins_passed_in_work_without_an_entry_point_and_register_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], installed: bool
) -> None:
    """``python -m calibrate`` passes its registrar: from a source tree never installed
    (no entry point: the lent GPU's image) and where the entry point names it too."""
    hello = EntryPoint("hello", f"{__name__}:_hello", COMMAND_GROUP)
    monkeypatch.setattr("importlib.metadata.entry_points",
                        lambda group: [hello] if installed and group == COMMAND_GROUP else [])  # fmt: skip
    assert main(["hello"], plugins=(_hello,)) == 0
    assert capsys.readouterr().out == "hello from a plugin\n"


def test_python_dash_m_calibrate_is_the_calibrate_command() -> None:
    p = subprocess.run([sys.executable, "-m", "calibrate", "calibrate", "--help"],
                       capture_output=True, text=True, check=False)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert all(name in p.stdout for name in CALIBRATE_SUBCOMMANDS), p.stdout
