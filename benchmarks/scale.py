"""Scale and speed of the simulator at cluster sizes (issue 12 part 4).

Every case runs the command line (``python -m sim ...``) in its own subprocess, so its
peak resident memory is its own (GNU ``/usr/bin/time -f %M``); wall time is
``time.perf_counter`` around the subprocess, start-up included. Prints a table: case,
GPUs, backend, wall s, peak RSS MB, target, pass/fail; then the exponent of flow-mode
wall time in GPU count (least-squares fit of log t on log N over the ``flow-N`` cases).

Cases: ``--help``; the NCCL-like tuner (auto all-reduce of 1 GiB, 2,048 GPUs, analytical);
an 8 B-1 GiB all-reduce sweep on 4,096 GPUs (flow, the command's default network);
GPT-3 175B (``scenarios/gpt3-175b-1024.yaml``: TP 8, PP 8, 96 micro-batches per replica,
the data-parallel degree grown with ``--set cluster.nodes=N``) and Llama-3-405B as Meta
trained it on 16,384 H100 (``benchmarks/beyond_the_step.py``'s scenario, arXiv:2407.21783
Table 4: TP 8, PP 16, interleaved, 16 micro-batches per replica) at 16,384 and 65,536
GPUs; GPT-3 flow at 64...4,096 GPUs for the exponent; Llama-2-70B with ZeRO-3 on 256
GPUs, flow (``zero3-256``: the shipped RoCE scenario with ``parallel.zero=3``).

Run: ``python benchmarks/scale.py`` (about 10 minutes on one core), ``--quick`` (the
smaller cases only), ``--only CASE`` (a case name, or a prefix such as ``flow-``).
Targets are the issue's; the machine is shared, so compare rows of one run.

Measured on the shared 2-core host, ``--timeout 240`` (before: commit 658bba6):
tuner-2048 11.4 -> 1.7 s; sweep-4096 915 -> 206 s; GPT-3 16k analytical 6.5 -> 3.5 s
(431 -> 302 MB); Llama-3 16k analytical 12.7 -> 3.4 s; 64k analytical 49 -> 13 s and
34 -> 12 s; GPT-3 and Llama-3 16k flow > 240 s before and after; flow 4096 36 -> 33 s
(wall ~ N^0.79 over 64..4096, but N^1.6 from 1024 to 4096: the DP rings' solves grow
with DP degree and each solve with the flows in flight).

sweep-4096 after the solve cache (sim.network.solvecache) and block admission of batched
steps (same host, same output byte for byte): 264 -> 129 s; target 60 s still missed.

After link classes, route-numbered flows and shared step arrays (same outputs; host load
~2-3 from other jobs): sweep-4096 25 s; GPT-3 16k flow 38 s, 1.3 GB; flow-4096 6.3 s; flow
wall time ~ N^0.28 over 64..4096. Llama-3 16k flow (RoCE, ECMP) still over 400 s.

After coalesced ring phases in the training step (``benchmarks/coalesce.py``: within 0.3% of
lockstep) and the tuner's schedules kept per (group, op, size), one other job on the host:
Llama-3 16k flow 33 s, 641 MB; GPT-3 16k flow 38 -> 5.1 s, 459 MB; flow-4096 2.2 s; flow
wall time ~ N^0.13 over 64..4096; sweep-4096 16 s (its path is unchanged).

``zero3-256`` (Llama-2-70B with ZeRO-3 on 256 H100 over RoCE, flow: its per-layer gathers
and reductions make ~800,000 rate solves and landings): 234 -> 171 s after a landing of one
flow (or of one latency) skips its sorting passes (2026-12-04, run in turn with the code
before on the same host, same output).
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

# benchmarks/beyond_the_step.py's scenario, now a shipped preset (it loads it by name)
LLAMA3_405B = "llama3-405b-16k"

GPT3 = "gpt3-175b-1024"
GPT3_MICRO_BATCHES = 96  # per replica, as the shipped 1024-GPU scenario has
LLAMA_MICRO_BATCHES = 16  # per replica: 2048 sequences / DP 128 (arXiv:2407.21783)
TIME = "/usr/bin/time"  # GNU time, for the peak RSS of exactly one command


@dataclass(frozen=True)
class Case:
    """One benchmark row: a ``python -m sim`` command line and its targets."""

    name: str
    gpus: int
    backend: str
    argv: tuple[str, ...]
    target_s: float | None = None
    target_mb: float | None = None
    quick: bool = True


def gpt3(gpus: int, network: str) -> tuple[str, ...]:
    """``run`` argv of GPT-3 175B on ``gpus`` H100 (TP 8 x PP 8 x DP gpus/64)."""
    dp = gpus // 64
    return (
        "run", GPT3, "--network", network, "--set", f"cluster.nodes={gpus // 8}",
        "--set", f"parallel.dp={dp}", "--set", f"training.global_batch={GPT3_MICRO_BATCHES * dp}",
    )  # fmt: skip


def llama(path: Path, gpus: int, network: str) -> tuple[str, ...]:
    """``run`` argv of Llama-3-405B on ``gpus`` H100 (TP 8 x PP 16 x DP gpus/128)."""
    dp = gpus // 128
    return (
        "run", str(path), "--network", network, "--set", f"cluster.nodes={gpus // 8}",
        "--set", f"training.global_batch={LLAMA_MICRO_BATCHES * dp}",
    )  # fmt: skip


def cases(llama_file: Path) -> list[Case]:
    """Every case, in the order they run."""
    sweep = ("collective", "--topology", "h100-ib-ndr", "--op", "all_reduce")
    out = [
        Case("help", 0, "-", ("--help",), 0.3),
        Case("tuner-2048", 2048, "analytical",
             (*sweep, "--nodes", "256", "--network", "analytical", "-b", "1G", "-e", "1G"), 2.0),
        Case("sweep-4096", 4096, "flow",
             (*sweep, "--nodes", "512", "--network", "flow", "-b", "8", "-e", "1G", "-f", "2"),
             60.0, quick=False),
        Case("gpt3-16k", 16384, "analytical", gpt3(16384, "analytical"), 10.0, 2048),
        Case("llama3-16k", 16384, "analytical", llama(llama_file, 16384, "analytical"), 10.0, 2048),
        Case("gpt3-16k", 16384, "flow", gpt3(16384, "flow"), 60.0, 2048, quick=False),
        Case("llama3-16k", 16384, "flow", llama(llama_file, 16384, "flow"), 60.0, 2048,
             quick=False),
        Case("gpt3-64k", 65536, "analytical", gpt3(65536, "analytical"), 60.0, quick=False),
        Case("llama3-64k", 65536, "analytical", llama(llama_file, 65536, "analytical"), 60.0,
             quick=False),
    ]  # fmt: skip
    for n in (64, 256, 1024, 4096):
        out.append(Case(f"flow-{n}", n, "flow", gpt3(n, "flow"), quick=n <= 1024))
    zero3 = ("run", "llama2-70b-256-roce", "--set", "parallel.zero=3")
    out.append(Case("zero3-256", 256, "flow", zero3, 240.0, quick=False))
    return out


def run_case(case: Case, timeout_s: float) -> tuple[float, float, int, str]:
    """Run one case: (wall s, peak RSS MB, exit status, line of its output worth showing).

    Peak RSS comes from GNU time's ``%M`` (KiB): ``ru_maxrss`` of a child forked from
    this process would start at this process's own high-water mark, which survives exec.
    """
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss_file:
        argv = [TIME, "-f", "%M", "-o", rss_file.name, sys.executable, "-m", "sim", *case.argv]
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, start_new_session=True)  # fmt: skip
        try:
            out, _ = p.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:  # stop GNU time and the simulator under it
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            return time.perf_counter() - t0, float("nan"), 124, f"stopped after {timeout_s:g} s"
        wall = time.perf_counter() - t0
        rss_mb = float(rss_file.read().split()[-1]) / 1024
    lines = out.splitlines()
    step = next((ln for ln in lines if ln.startswith("step time")), lines[-1] if lines else "")
    return wall, rss_mb, p.returncode, step.strip()


def verdict(case: Case, wall: float, rss: float, rc: int) -> str:
    """pass / FAIL against the case's targets ("-" when it has none)."""
    if rc == 124:
        return "FAIL (timeout)"
    if rc != 0:
        return f"FAIL (exit {rc})"
    if case.target_s is None and case.target_mb is None:
        return "-"
    ok = (case.target_s is None or wall <= case.target_s) and (
        case.target_mb is None or rss <= case.target_mb
    )
    return "pass" if ok else "FAIL"


def exponent(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of log(wall) on log(GPUs)."""
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(t) for _, t in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx


def main() -> None:
    """Run the cases and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="run only cases whose name starts with this")
    ap.add_argument("--quick", action="store_true", help="only the smaller cases")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per case (default 900)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory():
        llama_file = Path(LLAMA3_405B)
        todo = [
            c
            for c in cases(llama_file)
            if (not args.quick or c.quick) and (not args.only or c.name.startswith(args.only))
        ]
        print(
            f"{'case':<12} {'GPUs':>6} {'backend':<10} {'wall s':>8} {'peak MB':>8} "
            f"{'target':>12} {'result':<8} output",
            flush=True,
        )
        flow: list[tuple[int, float]] = []
        for c in todo:
            wall, rss, rc, last = run_case(c, args.timeout)
            target = f"{c.target_s:g} s" if c.target_s is not None else "-"
            if c.target_mb is not None:
                target += f", {c.target_mb / 1024:g} GB"
            print(
                f"{c.name:<12} {c.gpus:>6} {c.backend:<10} {wall:>8.2f} {rss:>8.0f} "
                f"{target:>12} {verdict(c, wall, rss, rc):<8} {last[:60]}",
                flush=True,
            )
            if c.name.startswith("flow-") and rc == 0:
                flow.append((c.gpus, wall))
    if len(flow) >= 2:
        lo, hi = flow[0][0], flow[-1][0]
        print(f"flow wall time ~ N^{exponent(flow):.2f} over {lo}..{hi} GPUs (goal <= 1.2)")


if __name__ == "__main__":
    main()
