"""``clustersim topologies``: list presets and what they hold, or write one out as a graph."""

from __future__ import annotations

import argparse

from sim.cli.outputs import count


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``topologies`` subcommand."""
    p = sub.add_parser("topologies", help="list topology presets, or export one as a graph")
    p.add_argument(
        "--export",
        metavar="TOPOLOGY",
        help="print this preset or file as an explicit graph (YAML) to edit for a design review",
    )
    p.add_argument("--nodes", type=count(1), help="with --export: servers of a multi-node topology")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Print one line per preset (name, GPUs, servers, GPU model, description), or export."""
    from sim.topology.presets import load_topology, preset_names

    if args.export is not None:
        return _export(args.export, args.nodes)
    if args.nodes is not None:
        from sim.errors import ConfigError

        raise ConfigError("--nodes: only with --export (the list shows each preset's own size)")
    print(f"{'preset':<22} {'GPUs':>6} {'servers':>8}  {'GPU':<14} description")
    for name in preset_names():
        t = load_topology(name)
        desc = t.description.splitlines()[0] if t.description else ""
        gpu = "mixed" if t.heterogeneous else t.gpu.name  # servers of several GPU models
        print(f"{name:<22} {t.num_gpus:>6} {t.nodes:>8}  {gpu:<14} {desc}")
    return 0


def _export(name: str, nodes: int | None) -> int:
    import yaml

    from sim.topology.export import graph_document
    from sim.topology.presets import load_topology

    doc = graph_document(load_topology(name, nodes=nodes))
    print(yaml.safe_dump(doc, default_flow_style=None, sort_keys=False, width=100), end="")
    return 0
