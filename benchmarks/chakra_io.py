"""Chakra ET files: encode, write, read and match speed for one rank's trace of n nodes.

The trace is shaped like an exported training step: per layer a forward and a backward
compute node, a tensor-parallel all-reduce after each, and a data-parallel reduce-scatter
after the backward (every node names its predecessor; collectives carry ``pg_name`` and
an extra ``involved_dim`` attribute). Times are the median of ``--repeat`` runs; the
file size is that of one rank. Needs the ``[chakra]`` extra.

Run: ``python benchmarks/chakra_io.py [--repeat 5]`` (about a minute).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sim.chakra import (
    Attr,
    Metadata,
    Node,
    Trace,
    TraceSet,
    decode_trace,
    encode_trace,
    match_collectives,
    read_trace,
    write_trace,
)


def step_trace(nodes: int) -> Trace:
    """A chain of ``nodes`` nodes: compute, TP all-reduce, ..., DP reduce-scatter."""
    dim = (Attr("involved_dim", "bool_list", (True, False, False)),)
    out: list[Node] = []
    for i in range(nodes):
        deps = (i - 1,) if i else ()
        kind = i % 5
        if kind in (0, 2):
            out.append(Node(i, f"layer{i // 5}.comp", "COMP_NODE", data_deps=deps,
                            duration_micros=120 + kind, is_cpu_op=False))  # fmt: skip
        else:
            comm = "REDUCE_SCATTER" if kind == 4 else "ALL_REDUCE"
            out.append(Node(i, f"layer{i // 5}.{comm.lower()}", "COMM_COLL_NODE", data_deps=deps,
                            is_cpu_op=False, comm_type=comm, comm_bytes=2**24,
                            pg_name="2" if kind == 4 else "1", attrs=dim))  # fmt: skip
    return Trace(Metadata("0.0.4"), tuple(out))


def median_s(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time of ``fn`` over ``repeat`` calls (seconds)."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    """Print one row per trace size."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=5, help="runs per timing (median)")
    args = ap.parse_args()
    print(f"{'nodes':>8} {'MB':>7} {'encode s':>9} {'write s':>8} {'read s':>8} "
          f"{'decode s':>9} {'match s':>8} {'read nodes/s':>13}")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "step.0.et"
        for n in (1_000, 10_000, 100_000):
            trace = step_trace(n)
            data = encode_trace(trace, str(path))
            encode = median_s(lambda t=trace: encode_trace(t, str(path)), args.repeat)
            write = median_s(lambda t=trace: write_trace(path, t), args.repeat)
            read = median_s(lambda: read_trace(path), args.repeat)
            decode = median_s(lambda d=data: decode_trace(d, str(path)), args.repeat)
            ts = TraceSet(str(Path(tmp) / "step"), (trace,))
            match = median_s(lambda s=ts: match_collectives(s), args.repeat)
            print(f"{n:>8,} {len(data) / 1e6:>7.2f} {encode:>9.3f} {write:>8.3f} {read:>8.3f} "
                  f"{decode:>9.3f} {match:>8.3f} {n / read:>13,.0f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
