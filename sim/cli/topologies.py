"""``clustersim topologies``: list presets and what they hold."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``topologies`` subcommand."""
    p = sub.add_parser("topologies", help="list topology presets")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Print one line per preset: name, GPUs, servers, GPU model, description."""
    from sim.topology.presets import load_topology, preset_names

    print(f"{'preset':<22} {'GPUs':>6} {'servers':>8}  {'GPU':<14} description")
    for name in preset_names():
        t = load_topology(name)
        desc = t.description.splitlines()[0] if t.description else ""
        print(f"{name:<22} {t.num_gpus:>6} {t.nodes:>8}  {t.gpu.name:<14} {desc}")
    return 0
