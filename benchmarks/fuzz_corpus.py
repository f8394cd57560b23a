"""The hostile-input corpus: every case a real ``python -m sim`` process with a time and
memory cap, counted by outcome.

The cases are ``tests/fuzz_cases.py``'s (hostile files and flags for every subcommand,
with valid controls: :func:`all_cases`) plus its big valid-looking inputs
(:func:`big_cases`: 80,000-GPU steps, 131,072-GPU collectives...). Each runs in its own
temporary folder (files and special files made as the case says), in a subprocess with

- ``RLIMIT_CPU`` = ``--cpu`` seconds (default 20) and ``RLIMIT_AS`` = ``--memory``
  (default 3 GiB), the caps of the corpus the issue describes; the wall clock is only a
  backstop (``--wall``, default 10x the CPU cap: a shared host stretches wall time, not
  CPU time);
- ``CLUSTERSIM_TIME_LIMIT`` set to the same CPU cap: the simulator is told the budget it
  runs under, so an input it predicts will not fit is refused up front with its
  estimate (:mod:`sim.budget`) instead of being killed.

Outcomes, printed as counts (and the cases of every bad outcome):

- **clean refusal**: a case meant to fail exited 2 with one or two error lines;
- **valid run**: a valid case (or a big one) exited 0, its ``--json`` strict JSON;
- **big refused**: a big case refused up front (exit 2, one or two lines);
- **traceback**: a Python traceback anywhere in the output;
- **hang**: killed by a cap (CPU, memory, wall) or out of memory;
- **silent accept**: a case meant to fail exited 0;
- **refused control**: a valid case exited 2;
- **messy**: any other exit status, or a refusal of more than two lines.

Run: ``python benchmarks/fuzz_corpus.py [--jobs N] [--only PREFIX] [--no-big]``. Exits 1
when any bad outcome is counted.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fuzz_cases import Case, all_cases, big_cases, materialise  # noqa: E402

GOOD = ("clean refusal", "valid run", "big refused")
BAD = ("traceback", "hang", "silent accept", "refused control", "messy")


@dataclass(frozen=True)
class Outcome:
    """What one case did."""

    case: str
    kind: str
    code: int
    detail: str


def _caps(cpu_s: int, memory: int) -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    os.setsid()  # the case and anything it starts are one group, killed together


def _error_lines(err: str) -> list[str]:
    lines = err.strip().splitlines()
    first = next((i for i, line in enumerate(lines) if ": error: " in line), len(lines))
    return lines[first:]


def classify(case: Case, code: int, out: str, err: str, killed: bool) -> tuple[str, str]:
    """The outcome of one run and a short detail."""
    tail = (err.strip().splitlines() or [""])[-1][:200]
    if "Traceback (most recent call last)" in out + err:
        return "traceback", tail
    if killed or code < 0 or "MemoryError" in err or "more than this machine can hold" in err:
        return "hang", f"exit {code}{' (killed)' if killed else ''}: {tail}"
    if code == 0:
        if case.status == 2:
            return "silent accept", out.strip().splitlines()[0][:200] if out.strip() else ""
        if "--json" in case.argv:
            try:
                json.loads(out, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))
            except ValueError as e:
                return "messy", f"--json output is not strict JSON: {e}"
        return "valid run", ""
    if code == 2:
        lines = _error_lines(err)
        if not 1 <= len(lines) <= 2 or any(len(x) > 420 for x in lines):
            return "messy", f"{len(lines)} error lines: {tail}"
        if case.status == 0:
            return "refused control", tail
        return ("big refused" if case.status is None else "clean refusal"), tail
    return "messy", f"exit {code}: {tail}"


def run_case(case: Case, cpu_s: int, memory: int, wall_s: float) -> Outcome:
    """Run one case in a fresh folder under the caps."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "CLUSTERSIM_TIME_LIMIT": str(cpu_s),
        "OPENBLAS_NUM_THREADS": "1",
        "PYTHONHASHSEED": "0",
    }
    env.pop("CLUSTERSIM_MEMORY_LIMIT", None)  # the address-space cap tells the estimator
    with tempfile.TemporaryDirectory(prefix="corpus-") as tmp:
        argv = materialise(case, Path(tmp))
        proc = subprocess.Popen(
            [sys.executable, "-m", "sim", *argv], cwd=tmp, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
            preexec_fn=lambda: _caps(cpu_s, memory),
        )  # fmt: skip
        killed = False
        try:
            out, err = proc.communicate(timeout=wall_s)
        except subprocess.TimeoutExpired:
            killed = True
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        code = proc.returncode
        if code in (-signal.SIGXCPU, -signal.SIGKILL):
            killed = True
    kind, detail = classify(case, code, out, err, killed)
    return Outcome(case.id, kind, code, detail)


def main() -> int:
    """Run the corpus; print the counts and every bad outcome; exit 1 if any."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2, help="cases run at once (default 2)")
    ap.add_argument("--cpu", type=int, default=20, help="CPU seconds per case (default 20)")
    ap.add_argument("--memory", type=float, default=3.0, help="GiB of address space per case")
    ap.add_argument("--wall", type=float, help="wall seconds per case (default 10x --cpu)")
    ap.add_argument("--only", help="run only the cases whose id starts with this")
    ap.add_argument("--no-big", action="store_true", help="leave out the big inputs")
    ap.add_argument("--verbose", action="store_true", help="print every case as it ends")
    args = ap.parse_args()
    cases = all_cases() + ([] if args.no_big else big_cases())
    if args.only:
        cases = [c for c in cases if c.id.startswith(args.only)]
    wall = args.wall or 10.0 * args.cpu
    memory = int(args.memory * 2**30)
    t0 = time.monotonic()
    outcomes: list[Outcome] = []
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for o in pool.map(lambda c: run_case(c, args.cpu, memory, wall), cases):
            outcomes.append(o)
            if args.verbose or o.kind in BAD:
                print(f"{o.kind:<16} {o.case:<44} {o.detail}", flush=True)
    counts = Counter(o.kind for o in outcomes)
    controls = sum(c.status == 0 for c in cases)
    big = sum(c.status is None for c in cases)
    print(f"\n{len(cases)} cases ({controls} valid controls, {big} big inputs), "
          f"caps {args.cpu} CPU s and {args.memory:g} GiB each, {time.monotonic() - t0:.0f} s")  # fmt: skip
    for kind in (*GOOD, *BAD):
        print(f"  {kind:<16} {counts.get(kind, 0):>5}")
    return 1 if any(counts.get(k) for k in BAD) else 0


if __name__ == "__main__":
    sys.exit(main())
