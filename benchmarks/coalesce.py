"""Coalesced ring phases against strict lockstep on the flow network: step time and wall time.

The flow training step runs each uniform phase of a collective (a ring's ``n - 1``
steps) as one step of all its bytes (``sim.training.graph.simulate.COALESCE``).
This prints, per case, the step time with lockstep steps and with coalesced phases,
their difference and each one's wall time, so the approximation's cost and gain are
measured on the cases where lockstep still finishes: Llama-3 405B (``llama3-405b-16k``'s
plan, RoCE with ECMP) at 1,024 and 2,048 GPUs, and ZeRO-3 Llama-2-70B on RoCE at 128 GPUs
(DP 4; at 64 GPUs DP 2 has one-step phases, nothing to coalesce).

Run: ``python benchmarks/coalesce.py [--quick]`` (about 20 minutes on one core; ``--quick``
skips the 128-GPU case, which takes about 13 of them in lockstep). Rows print as they finish.
"""

from __future__ import annotations

import argparse
import time

import sim.training.graph.simulate as engine
from sim.scenario.load import load_scenario
from sim.training.step import simulate_step


def llama2_zero3(nodes: int) -> tuple[str, tuple[str, ...]]:
    """Llama-2-70B ZeRO-3 on ``nodes`` RoCE servers (TP 8, PP 4, 128 micro-batches)."""
    dp = nodes // 4
    sets = ("parallel.zero=3", f"cluster.nodes={nodes}", f"parallel.dp={dp}",
            f"training.global_batch={128 * dp}")  # fmt: skip
    return "llama2-70b-256-roce", sets


def llama3(gpus: int) -> tuple[str, tuple[str, ...]]:
    """Llama-3 405B as planned for 16,384 GPUs, on ``gpus`` (16 micro-batches per replica)."""
    dp = gpus // 128
    return "llama3-405b-16k", (f"cluster.nodes={gpus // 8}", f"training.global_batch={16 * dp}")


def main() -> None:
    """Print the table, one row per case as it finishes."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="skip the 128-GPU ZeRO-3 case")
    args = ap.parse_args()
    cases = [("llama3-405b", 1024, llama3(1024)), ("llama3-405b", 2048, llama3(2048))]
    if not args.quick:
        cases.append(("llama2-70b zero3", 128, llama2_zero3(16)))
    print(f"{'case':<18} {'GPUs':>5} {'lockstep s':>11} {'coalesced s':>12} {'diff':>7} "
          f"{'wall lock':>10} {'wall coal':>10}", flush=True)  # fmt: skip
    for label, gpus, (name, sets) in cases:
        sc = load_scenario(name, sets)
        out = []
        for coalesce in (False, True):
            engine.COALESCE = coalesce
            t0 = time.perf_counter()
            step = simulate_step(sc, network="flow").step_time_s
            out.append((step, time.perf_counter() - t0))
        (lock, w_lock), (coal, w_coal) = out
        print(f"{label:<18} {gpus:>5} {lock:>11.4f} {coal:>12.4f} {coal / lock - 1:>+7.2%} "
              f"{w_lock:>9.1f}s {w_coal:>9.1f}s", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
