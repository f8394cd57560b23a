"""What-if study: one Llama-2-70B training step on 256 H100 over different fabrics.

Same model, plan and batch (scenario ``llama2-70b-256-roce``, optionally a DP-heavy plan
with ``--fsdp``); only the cluster changes: NDR InfiniBand rail-optimized, 400G RoCE
leaf-spine at 1:1 and 2:1, and one 100G TCP NIC per server. Flow network (max-min
sharing, ECMP by seeded hash). Run: ``python benchmarks/study_fabrics.py [--fsdp]``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import yaml

from sim.scenario.load import load_scenario
from sim.topology.presets import load_spec
from sim.training.step import simulate_step

FABRICS = [
    ("NDR IB, rail-optimized", "h100-ib-ndr", None),
    ("400G RoCE, leaf-spine 1:1", "h100-roce-400g", None),
    ("400G RoCE, leaf-spine 2:1", "h100-roce-400g", 2.0),
    ("100G TCP, 1 NIC/server", "h100-tcp-100g", None),
]


def _topology_file(preset: str, oversubscription: float | None, folder: Path) -> str:
    """The preset itself, or a copy with another oversubscription ratio."""
    if oversubscription is None:
        return preset
    spec = load_spec(preset).model_dump(exclude_none=True)
    spec["network"]["oversubscription"] = oversubscription
    path = folder / f"{preset}-{oversubscription:g}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def main() -> None:
    """Print the table."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument(
        "--fsdp", action="store_true", help="ZeRO-3, TP 8, DP 32, 64 sequences per step"
    )
    args = ap.parse_args()
    sets = ["parallel.pp=1", "parallel.dp=32", "parallel.zero=3", "training.global_batch=64",
            "parallel.recompute=full"] if args.fsdp else []  # fmt: skip
    print(f"{'fabric':<28} {'step (s)':>9} {'MFU':>6} {'DP exposed':>11} {'ZeRO-3 exp.':>12} "
          f"{'PP exposed':>11} {'$/M tokens':>11}")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for label, preset, ratio in FABRICS:
            topo = _topology_file(preset, ratio, Path(tmp))
            sc = load_scenario("llama2-70b-256-roce", [f"cluster.topology={topo}", *sets])
            r = simulate_step(sc, network="flow")
            b = r.breakdown
            cost = r.cost_per_million_tokens_usd or 0.0
            print(f"{label:<28} {r.step_time_s:>9.3f} {r.mfu:>6.1%} {b['dp_comm_exposed']:>11.3f} "
                  f"{b['zero3_gather_exposed']:>12.3f} {b['pp_comm_exposed']:>11.3f} {cost:>11.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
