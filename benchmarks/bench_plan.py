"""Speed of the layout search (``clustersim plan``).

Rows: shipped scenarios planned in-process, as ``clustersim plan NAME [--gpus N] --top K``
does (analytical network): layouts considered, steps simulated, layouts cut by the
step-time bounds, CPU seconds (``time.process_time``: on a shared host CPU time moves less
than wall time) and wall seconds. Each row runs in a fresh process, so none reuses
another's caches. Run: ``python benchmarks/bench_plan.py [--runs N]``; with several runs
the medians are printed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

CASES = [
    ("llama2-70b-256-ib", 256, 10),
    ("llama2-70b-256-ib", 32, 5),
    ("llama3-8b-dgx", None, 5),
]

_ONE = """
import json, sys, time
from sim.scenario.load import load_scenario
from sim.studies.plan.search import plan
name, gpus, top = sys.argv[1], (int(sys.argv[2]) or None), int(sys.argv[3])
scenario = load_scenario(name)
cpu, wall = time.process_time(), time.perf_counter()
r = plan(scenario, gpus, top)
print(json.dumps([r.layouts, r.simulated, r.pruned, time.process_time() - cpu,
                  time.perf_counter() - wall]))
"""


def one(name: str, gpus: int | None, top: int) -> list[float]:
    """[layouts, simulated, pruned, cpu s, wall s] of one search in a fresh process."""
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-c", _ONE, name, str(gpus or 0), str(top)],
        capture_output=True, text=True, check=True, cwd=root,
    )  # fmt: skip
    return [float(x) for x in json.loads(out.stdout.strip().splitlines()[-1])]


def main() -> None:
    """Print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1, help="runs per row (medians printed)")
    args = ap.parse_args()
    print(
        f"{'case':<40} {'layouts':>8} {'simulated':>10} {'cut':>6} {'CPU (s)':>8} {'wall (s)':>9}"
    )
    for name, gpus, top in CASES:
        runs = [one(name, gpus, top) for _ in range(args.runs)]
        n, sim, cut = runs[0][:3]
        cpu = statistics.median(r[3] for r in runs)
        wall = statistics.median(r[4] for r in runs)
        label = f"{name} --gpus {gpus or '-'} --top {top}"
        print(f"{label:<40} {n:>8.0f} {sim:>10.0f} {cut:>6.0f} {cpu:>8.2f} {wall:>9.2f}")


if __name__ == "__main__":
    main()
