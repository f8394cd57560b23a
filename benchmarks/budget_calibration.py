"""Measure the commands whose cost :mod:`sim.budget` predicts, and compare with its estimate.

Every case runs ``python -m sim ...`` in its own subprocess; its CPU time (user + system,
``os.wait4``: the process's own, so other jobs on a shared host do not inflate it as they
do wall time) and peak resident memory (``ru_maxrss``) are printed beside the estimate
:func:`sim.budget.estimate_run` gives for the same command line, and their ratio. The
estimator's constants (``sim/budget.py``) were fitted to these rows (on the shared
2-core host; see its docstring for the fit); rerun this to check them on another machine.

Run: ``python benchmarks/budget_calibration.py [--only NAME] [--timeout S]``; ``--quick``
skips the cases over 30 s. The environment variable ``CLUSTERSIM_TIME_LIMIT=none`` is set
for the runs, so the guard does not refuse what is being measured.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.budget import Estimate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


@dataclass(frozen=True)
class Case:
    """One command line to time."""

    name: str
    argv: tuple[str, ...]
    quick: bool = True


def _gpt3(gpus: int, network: str) -> tuple[str, ...]:
    dp = gpus // 64
    return ("run", "gpt3-175b-1024", "--network", network, "--set", f"cluster.nodes={gpus // 8}",
            "--set", f"parallel.dp={dp}", "--set", f"training.global_batch={96 * dp}")  # fmt: skip


def _dp(gpus: int, network: str, topology: str = "h100-ib-ndr") -> tuple[str, ...]:
    return ("run", "llama3-8b-dgx", "--network", network, "--set", f"cluster.topology={topology}",
            "--set", f"cluster.nodes={gpus // 8}", "--set", f"parallel.dp={gpus}",
            "--set", f"training.global_batch={gpus}")  # fmt: skip


def _coll(gpus: int, network: str, size: str = "1K") -> tuple[str, ...]:
    return ("collective", "--topology", "h100-ib-ndr", "--nodes", str(gpus // 8), "--network",
            network, "-b", size, "-e", size)  # fmt: skip


def cases() -> list[Case]:
    """The measured cases, small to large."""
    out = [
        Case("gpt3-1k-analytical", _gpt3(1024, "analytical")),
        Case("gpt3-4k-analytical", _gpt3(4096, "analytical")),
        Case("gpt3-16k-analytical", _gpt3(16384, "analytical")),
        Case(
            "gpt3-16k-3tier-analytical",
            (*_gpt3(16384, "analytical"), "--set", "cluster.topology=h100-ib-ndr-3tier"),
        ),
        Case("gpt3-80k-analytical", _gpt3(80000, "analytical"), quick=False),
        Case("dp-1k-analytical", _dp(1024, "analytical")),
        Case("dp-16k-analytical", _dp(16384, "analytical")),
        Case("gpt3-1k-flow", _gpt3(1024, "flow")),
        Case("gpt3-4k-flow", _gpt3(4096, "flow")),
        Case("gpt3-16k-flow", _gpt3(16384, "flow"), quick=False),
        Case("dp-1k-flow", _dp(1024, "flow")),
        Case("dp-4k-flow", _dp(4096, "flow")),
        Case("dp-8k-flow", _dp(8192, "flow"), quick=False),
        Case("dp-32k-flow", _dp(32768, "flow"), quick=False),
        Case("dp-1k-roce-flow", _dp(1024, "flow", "h100-roce-400g")),
        Case("llama2-70b-256-roce-flow", ("run", "llama2-70b-256-roce")),
        Case(
            "llama2-70b-256-zero3-flow",
            (
                "run",
                "llama2-70b-256-roce",
                "--set",
                "parallel.zero=3",
                "--set",
                "parallel.pp=1",
                "--set",
                "parallel.dp=32",
            ),
        ),
        Case("coll-1k-1KiB-flow", _coll(1024, "flow")),
        Case("coll-8k-1KiB-flow", _coll(8192, "flow")),
        Case("coll-8k-1GiB-flow", _coll(8192, "flow", "1G")),
        Case("coll-80k-1KiB-analytical", _coll(80000, "analytical"), quick=False),
        Case("coll-80k-1KiB-flow", _coll(80000, "flow"), quick=False),
    ]
    return out


#: Address-space cap of each measured run (bytes): a case past it fails instead of
#: pushing a shared host into swap.
MEMORY_CAP = 8 * 2**30


def _cap_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def measure(argv: tuple[str, ...], timeout: float) -> tuple[float, float, float, int]:
    """(wall s, CPU s, peak RSS bytes, exit status) of ``python -m sim argv``."""
    env = {**os.environ, "CLUSTERSIM_TIME_LIMIT": "none", "CLUSTERSIM_MEMORY_LIMIT": "none",
           "PYTHONPATH": str(ROOT)}  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "sim", *argv], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=_cap_memory)  # fmt: skip
    deadline = t0 + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            proc.kill()
            pid, status, usage = os.wait4(proc.pid, 0)
            status = -9
            break
        time.sleep(0.05)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status) if status != -9 else -9
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024.0, code


def main() -> None:
    """Print one row per case: measured and estimated CPU time and memory."""

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="a case name or prefix")
    ap.add_argument("--quick", action="store_true", help="skip the cases over ~30 s")
    ap.add_argument("--timeout", type=float, default=600.0)
    args = ap.parse_args()
    print(f"{'case':<28} {'wall s':>8} {'cpu s':>8} {'est s':>8} {'cpu/est':>8} "
          f"{'RSS MB':>8} {'est MB':>8} {'RSS/est':>8}  exit")  # fmt: skip
    for c in cases():
        if (args.only and not c.name.startswith(args.only)) or (args.quick and not c.quick):
            continue
        est = estimate_argv(list(c.argv))
        wall, cpu, rss, code = measure(c.argv, args.timeout)
        print(f"{c.name:<28} {wall:8.1f} {cpu:8.1f} {est.time_s:8.1f} {cpu / est.time_s:8.2f} "
              f"{rss / 1e6:8.0f} {est.memory_bytes / 1e6:8.0f} {rss / est.memory_bytes:8.2f}  "
              f"{code}", flush=True)  # fmt: skip


def estimate_argv(argv: Sequence[str]) -> Estimate:
    """The estimate of a ``clustersim run`` or ``collective`` command line (here, not in
    :mod:`sim.budget`: reading a command line is the CLI's, above the budget)."""
    from sim.budget import cluster_shape, estimate_collective, estimate_step
    from sim.cli import _parser

    args = _parser(argv).parse_args(list(argv))
    if args.command == "collective":
        from sim.collectives.sizes import sweep_sizes
        from sim.units import parse_size

        gpus, tiers = cluster_shape(args.topology, args.nodes)
        sizes = sweep_sizes(
            parse_size(args.min_bytes, "-b"), parse_size(args.max_bytes, "-e"), args.step_factor
        )
        return estimate_collective(args.gpus or gpus, tiers, len(sizes), args.network)
    from sim.cli import variability
    from sim.scenario.layer_list import load_any_scenario

    scenario = load_any_scenario(args.scenario, variability.seed_override(args))
    return estimate_step(scenario, args.network)


if __name__ == "__main__":
    main()
