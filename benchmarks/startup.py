"""Cold start of short commands (issue 19 part 7): a fresh ``python -m sim`` per run.

Every run is a new process, so each figure holds what a user waits for: interpreter
start, imports, topology build, profile choice, tuning and the simulation itself. Cases:
``clustersim --help``; one 64 MiB all-reduce on 256 H100 (``h100-ib-ndr``, 32 servers)
on the flow network (the command's default) and on the analytical one (target: 0.5 s,
the issue's; ASTRA-sim's analytical backend takes 0.25 s for it); ``clustersim run
gpt2-1gpu --network analytical``.

Prints per case the median, min and max wall time (``time.perf_counter`` around the
process), the median CPU time (user + system, from ``os.wait4``), the peak resident
memory (GNU ``time``'s ``%M`` where installed) and, with ``--against DIR``, the same for
another checkout (e.g. the code before a change) with the median of the per-pair ratios:
runs alternate between the two, so a change in the machine's load hits both alike.

Bytecode: by default the environment decides (a ``PYTHONDONTWRITEBYTECODE=1`` shell
compiles clustersim's ~90 modules at every start, ~0.1 s). ``--bytecode`` gives each
checkout its own cache folder (``PYTHONPYCACHEPREFIX``), written by an uncounted first
run, as an installed package has its bytecode compiled at install time.

``--installed PYTHON`` times an installed clustersim instead of this checkout: ``PYTHON
-m sim`` run from an empty folder with no ``PYTHONPATH``, as a user who followed the README's
first block (``pip install .`` into a virtual environment, bytecode compiled by pip) runs it;
a development install's extra start-up (an editable install's path finder, a checkout's
uncompiled modules) is left out.

Run: ``python benchmarks/startup.py [--runs 7] [--against ../old-checkout] [--bytecode]
[--installed VENV/bin/python]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIME = shutil.which("time", path="/usr/bin:/bin")  # GNU time, for the peak RSS


@dataclass(frozen=True)
class Case:
    """One command line (the arguments after ``python -m sim``) and its target, seconds."""

    name: str
    argv: tuple[str, ...]
    target_s: float | None = None


ALL_REDUCE = ("collective", "--topology", "h100-ib-ndr", "--nodes", "32", "--op", "all_reduce",
              "-b", "64M", "-e", "64M")  # fmt: skip
CASES = (
    Case("help", ("--help",)),
    Case("all-reduce 64M x256 flow", ALL_REDUCE, 0.5),
    Case("all-reduce 64M x256 analytical", (*ALL_REDUCE, "--network", "analytical"), 0.5),
    Case("run gpt2-1gpu analytical", ("run", "gpt2-1gpu", "--network", "analytical")),
)


@dataclass
class Runs:
    """Measurements of one case on one checkout."""

    wall: list[float]
    cpu: list[float]
    rss_mb: list[float]


def run_once(
    checkout: Path, case: Case, env: dict[str, str], python: str = sys.executable
) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MB) of one ``python -m sim`` process in ``checkout``."""
    with (
        tempfile.NamedTemporaryFile("r", suffix=".rss") as rss,
        tempfile.TemporaryFile("w+") as err,
    ):
        prefix = [TIME, "-f", "%M", "-o", rss.name] if TIME else []
        argv = [*prefix, python, "-m", "sim", *case.argv]
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, cwd=checkout, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(p.pid, 0)  # usage: the process and what it waited for
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            err.seek(0)
            raise SystemExit(f"{case.name} failed in {checkout}: {err.read().strip()[-400:]}")
        text = rss.read().split()
        rss_mb = float(text[-1]) / 1024 if text else float("nan")
    return wall, usage.ru_utime + usage.ru_stime, rss_mb


def environment(checkout: Path, cache: Path | None) -> dict[str, str]:
    """The checkout first on the path; with ``cache``, bytecode kept there."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    if cache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(cache)
    return env


def cells(runs: Runs) -> str:
    """median, min and max wall s, median CPU s, peak RSS MB."""
    w = runs.wall
    return (
        f"{statistics.median(w):7.3f} {min(w):7.3f} {max(w):7.3f} "
        f"{statistics.median(runs.cpu):7.3f} {max(runs.rss_mb):6.0f}"
    )


COLUMNS = f"{'wall s':>7} {'min':>7} {'max':>7} {'cpu s':>7} {'MB':>6}"


def main() -> None:
    """Run the cases (alternating with ``--against``) and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=7, help="counted runs per case (default 7)")
    ap.add_argument("--against", type=Path, help="another checkout, run in turn with this one")
    ap.add_argument("--bytecode", action="store_true", help="cache bytecode (see above)")
    ap.add_argument("--only", help="cases whose name starts with this")
    ap.add_argument("--installed", metavar="PYTHON", help="time an installed clustersim (above)")
    args = ap.parse_args()
    checkouts = [ROOT] + ([args.against.resolve()] if args.against else [])
    cases = [c for c in CASES if not args.only or c.name.startswith(args.only)]
    # absolute: the installed runs start in an empty folder
    python = str(Path(args.installed).absolute()) if args.installed else sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        envs = [
            environment(c, Path(tmp) / str(i) if args.bytecode else None)
            for i, c in enumerate(checkouts)
        ]
        if args.installed:  # from an empty folder, nothing of this checkout on the path
            checkouts[0] = Path(tmp) / "installed"
            checkouts[0].mkdir()
            envs[0] = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        results = {(c.name, i): Runs([], [], []) for c in cases for i in range(len(checkouts))}
        for c in cases:
            pythons = [python] + [sys.executable] * (len(checkouts) - 1)
            for i, checkout in enumerate(checkouts):
                run_once(checkout, c, envs[i], pythons[i])  # warm-up: file cache (and bytecode)
            for _ in range(args.runs):
                for i, checkout in enumerate(checkouts):
                    wall, cpu, rss = run_once(checkout, c, envs[i], pythons[i])
                    r = results[(c.name, i)]
                    r.wall.append(wall), r.cpu.append(cpu), r.rss_mb.append(rss)
    mode = "cached bytecode" if args.bytecode else "bytecode as the environment says"
    if args.installed:
        mode = f"installed: {args.installed}"
    print(f"# {args.runs} cold runs per case, {mode}; wall median, min, max; CPU median")
    head = f"{'case':<31} {COLUMNS} {'target':>9}"
    if args.against:
        head += f" | against: {COLUMNS} {'ratio':>6}"
    print(head)
    for c in cases:
        mine = results[(c.name, 0)]
        med = statistics.median(mine.wall)
        verdict = "" if c.target_s is None else ("ok" if med <= c.target_s else "MISS")
        target = "-" if c.target_s is None else f"{c.target_s:g} {verdict}"
        line = f"{c.name:<31} {cells(mine)} {target:>9}"
        if args.against:
            other = results[(c.name, 1)]
            ratio = statistics.median(a / b for a, b in zip(mine.wall, other.wall, strict=True))
            line += f" |          {cells(other)} {ratio:6.2f}"
        print(line)


if __name__ == "__main__":
    main()
