"""Micro benchmark of the max-min solver and of the flow backend's synchronous steps.

Run ``python benchmarks/bench_maxmin.py`` (``--quick`` for a short run). Prints two
tables: solver time for 1k/8k/32k flows (a leaf-spine fabric under random pairs, and
random 6-hop paths with 4 capacity classes, the many-levels worst case); and wall time
of one synchronous step (start N same-size transfers at one instant, wait for all) on a
star of n GPUs, ring pattern with k transfers per GPU (GPU i to i+1 .. i+k).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable, Generator

import networkx as nx
import numpy as np
import simpy

from sim.catalog import GpuSpec
from sim.network import AnalyticalNetwork, FlowNetwork
from sim.network.maxmin import pad_paths, progressive_fill
from sim.topology.model import Topology

SPEC = GpuSpec("X", {"bf16": 1e15}, 8e10, 3e12, 700, None, "pcie-gen5")


def _link(g: nx.DiGraph, u: str, v: str, cap: float, scope: str) -> None:
    for a, b in ((u, v), (v, u)):
        g.add_edge(a, b, capacity_Bps=cap, latency_s=1e-6, kind="bench", scope=scope)


def leaf_spine(n: int, per_leaf: int = 32, spines: int = 16) -> Topology:
    """8-GPU servers on an NVSwitch (450 GB/s); 50 GB/s GPU NICs on leaves of
    ``per_leaf`` GPUs; each leaf has one 50 GB/s up-link per spine (2:1 oversubscribed)."""
    g = nx.DiGraph()
    for s in range(spines):
        g.add_node(f"spine{s}", kind="spine")
    for leaf in range(n // per_leaf):
        g.add_node(f"leaf{leaf}", kind="leaf")
        for s in range(spines):
            _link(g, f"leaf{leaf}", f"spine{s}", 50e9, "net")
    for i in range(n):
        gpu, sw = f"gpu{i}", f"nvs{i // 8}"
        g.add_node(gpu, kind="gpu", node=i // 8)
        g.add_node(sw, kind="nvswitch", node=i // 8)
        _link(g, gpu, sw, 450e9, "nvlink")
        _link(g, gpu, f"leaf{i // per_leaf}", 50e9, "net")
    gpus = tuple(f"gpu{i}" for i in range(n))
    return Topology("leaf-spine", g, gpus, SPEC, nodes=n // 8, gpus_per_node=8)


def star(n: int, cap: float = 100e9) -> Topology:
    """``n`` GPUs on one switch, ``cap`` B/s per GPU link and direction."""
    g = nx.DiGraph()
    g.add_node("sw", kind="nvswitch")
    for i in range(n):
        g.add_node(f"g{i}", kind="gpu", node=0)
        _link(g, f"g{i}", "sw", cap, "nvlink")
    return Topology("star", g, tuple(f"g{i}" for i in range(n)), SPEC, nodes=1, gpus_per_node=n)


def best_of(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time of ``fn`` in seconds (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def solver_table(sizes: list[int], repeat: int) -> None:
    rng = np.random.default_rng(0)
    topo = leaf_spine(4096)
    cap = topo.capacity_Bps
    print(f"max-min solver (median of {repeat})")
    print(f"{'flows':>7} {'case':<26} {'levels':>6} {'solve ms':>9}")
    for n in sizes:
        pairs = rng.integers(0, topo.num_gpus, size=(n, 2))
        paths = [topo.route(topo.gpus[a], topo.gpus[b]) for a, b in pairs]
        hops = pad_paths(paths, cap.size)
        rnd = rng.integers(0, 3000, size=(n, 6))
        rcap = rng.choice([25e9, 50e9, 100e9, 400e9], size=3000)
        for name, h, c in (
            ("leaf-spine 4096, random", hops, cap),
            ("random 6-hop, 3k links", rnd, rcap),
        ):
            levels = np.unique(progressive_fill(h, c)).size
            t = best_of(functools.partial(progressive_fill, h, c), repeat)
            print(f"{n:>7} {name:<26} {levels:>6} {t * 1e3:>9.2f}")


def step_time(cls: type, n: int, k: int, steps: int) -> float:
    """Mean wall seconds per synchronous step of ``n * k`` transfers on a star of ``n``."""
    topo = star(n)
    env = simpy.Environment()
    net = cls(env, topo)
    pairs = [(f"g{i}", f"g{(i + j) % n}") for i in range(n) for j in range(1, k + 1)]
    for s, d in pairs:  # routes are computed once per topology and cached: not timed
        topo.route(s, d)

    def proc() -> Generator[simpy.Event, object, None]:
        for _ in range(steps):
            yield env.all_of([net.transfer(s, d, 1e6) for s, d in pairs])

    env.process(proc())
    t0 = time.perf_counter()
    env.run()
    return (time.perf_counter() - t0) / steps


def step_table(ns: list[int], ks: list[int], steps: int) -> None:
    print(f"\nsynchronous step on a star, ring pattern (mean of {steps} steps)")
    head = ("GPUs", "per GPU", "flows", "flow ms", "analytical ms", "solves/step")
    print(" ".join(f"{h:>{w}}" for h, w in zip(head, (6, 7, 7, 9, 13, 11), strict=True)))
    for n in ns:
        for k in ks:
            flow = step_time(FlowNetwork, n, k, steps)
            ana = step_time(AnalyticalNetwork, n, k, steps)
            env = simpy.Environment()
            net = FlowNetwork(env, star(n))
            env.run(env.all_of([net.transfer(f"g{i}", f"g{(i + 1) % n}", 1e6) for i in range(n)]))
            print(
                f"{n:>6} {k:>7} {n * k:>7} {flow * 1e3:>9.2f} {ana * 1e3:>13.2f} {net.solves:>11}"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats and steps")
    args = ap.parse_args()
    solver_table([1_000, 8_000, 32_000], repeat=3 if args.quick else 9)
    step_table([64, 256, 1024, 4096], [1, 8], steps=2 if args.quick else 5)


if __name__ == "__main__":
    main()
