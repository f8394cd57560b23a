"""Small builders shared by tests (hand-made topologies with known closed forms)."""

from __future__ import annotations

from pathlib import Path

import networkx as nx

from sim.catalog import GpuSpec
from sim.topology.model import Topology

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

FAKE_GPU = GpuSpec(
    name="TEST-GPU",
    peak_flops={"bf16": 1e15},
    hbm_bytes=80e9,
    hbm_Bps=3e12,
    tdp_w=700.0,
    nvlink="nvlink4",
    pcie="pcie-gen5",
)


def star(
    n: int,
    bandwidth_Bps: float = 100e9,
    latency_s: float = 1e-6,
    scope: str = "nvlink",
    switch_kind: str = "nvswitch",
) -> Topology:
    """``n`` GPUs on one non-blocking switch, every GPU link ``bandwidth_Bps`` each way."""
    g = nx.DiGraph()
    g.add_node("sw", kind=switch_kind)
    gpus = []
    for i in range(n):
        name = f"gpu{i}"
        g.add_node(name, kind="gpu", node=0)
        for u, v in ((name, "sw"), ("sw", name)):
            g.add_edge(
                u, v, capacity_Bps=bandwidth_Bps, latency_s=latency_s, kind="test", scope=scope
            )
        gpus.append(name)
    return Topology(
        name=f"star{n}", graph=g, gpus=tuple(gpus), gpu=FAKE_GPU, nodes=1, gpus_per_node=n
    )
