"""Fit the shared H100 nccl-tests logs and print the parameters as JSON (a subprocess of
tests/test_fit_stability.py, so each run gets its own BLAS thread count).

Usage: python tests/fit_worker.py SEED START_JITTER
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from calibrate.fit import fit_points
from calibrate.model import points_from
from calibrate.nccl_tests import import_nccl_tests
from sim.collectives.params import default_params
from sim.topology.presets import load_topology

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "nccl-tests"
LOGS = {
    "dgx-h100-1node-8gpu-all_reduce.txt": ("dgx-h100", None, None),
    "h100-2node-16gpu-ib-all_reduce.txt": ("h100-ib-ndr", 2, 8),
}


def main() -> None:
    seed, jitter = int(sys.argv[1]), float(sys.argv[2])
    out = {}
    for name, (topo, nodes, gpus) in LOGS.items():
        m = import_nccl_tests([DATA / name], created="2025-01-01T00:00:00Z")
        points = points_from([m], load_topology(topo, nodes=nodes), nodes, gpus)
        _, report = fit_points(points, default_params(), seed=seed, start_jitter=jitter)
        out[name] = report.parameters
    json.dump(out, sys.stdout, sort_keys=True)


if __name__ == "__main__":
    main()
