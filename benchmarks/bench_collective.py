"""Speed of the flow-level simulator: ring all-reduce of 1 GiB on a rail-optimized fat-tree.

Prints a table: GPUs, servers, build time (topology + routes), simulation wall time per
backend, simulated time and busbw. Run: ``python benchmarks/bench_collective.py``
(add ``--max-gpus 1024`` for a shorter run). One process, one core.
"""

from __future__ import annotations

import argparse
import time

from sim.collectives.simulate import CollectiveSetup, simulate_collective
from sim.topology.presets import load_topology


def bench(gpus: int, size: float) -> dict[str, float]:
    """Time topology build, then a flow and an analytical ring all-reduce of ``size`` bytes."""
    t0 = time.perf_counter()
    topo = load_topology("h100-ib-ndr", nodes=gpus // 8)
    setup = CollectiveSetup(topo)
    t_build = time.perf_counter() - t0
    row = {"gpus": gpus, "servers": gpus // 8, "build_s": t_build}
    for net in ("flow", "analytical"):
        t0 = time.perf_counter()
        r = simulate_collective(
            setup, "all_reduce", size, algorithm="ring", protocol="simple", network=net
        )
        row[f"{net}_s"] = time.perf_counter() - t0
        row[f"{net}_busbw"] = r.busbw_Bps / 1e9
        row["sim_ms"] = r.time_s * 1e3
    return row


def main() -> None:
    """Print the benchmark table."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--max-gpus", type=int, default=4096)
    args = ap.parse_args()
    print(
        f"{'GPUs':>6} {'servers':>8} {'build(s)':>9} {'flow(s)':>9} {'analyt(s)':>10} "
        f"{'sim time(ms)':>13} {'busbw flow':>11} {'busbw ana':>10}"
    )
    for n in (64, 256, 1024, 4096):
        if n > args.max_gpus:
            break
        r = bench(n, 2**30)
        print(
            f"{r['gpus']:>6} {r['servers']:>8} {r['build_s']:>9.3f} {r['flow_s']:>9.3f} {r['analytical_s']:>10.3f} "
            f"{r['sim_ms']:>13.3f} {r['flow_busbw']:>11.1f} {r['analytical_busbw']:>10.1f}"
        )


if __name__ == "__main__":
    main()
