"""``clustersim topologies``: list presets, summarise one for a design review, or export it."""

from __future__ import annotations

import argparse
import sys

from sim.cli.outputs import count, positive_float
from sim.errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``topologies`` subcommand."""
    p = sub.add_parser(
        "topologies", help="list topology presets, summarise one (--show), or export one"
    )
    p.add_argument(
        "--show",
        metavar="TOPOLOGY",
        help="summarise this preset or file: switches per tier, cables and optics, bisection, "
        "ECMP paths, bill of materials with capex and power",
    )
    p.add_argument(
        "--export",
        metavar="TOPOLOGY",
        help="print this preset or file as an explicit graph (YAML) to edit for a design review",
    )
    p.add_argument("--nodes", type=count(1), help="with --show or --export: servers of a fabric")
    p.add_argument("--json", action="store_true", help="with --show: print the summary as JSON")
    p.add_argument("--draw", metavar="FILE", help="with --show: draw the tiers (.svg or .png)")
    p.add_argument(
        "--parts", metavar="FILE", help="with --show: your own parts catalog (prices, watts)"
    )
    p.add_argument(
        "--lifetime-years", type=positive_float, default=None,
        help="with --show: years the fabric's capex is spread over (default 5)",
    )  # fmt: skip
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Print one line per preset (name, GPUs, servers, GPU model, description), a summary,
    or an export."""
    from sim.topology.presets import load_topology, preset_names

    if args.show is not None and args.export is not None:
        raise ConfigError("--show and --export: give one")
    only_show = [o for o, v in (("--json", args.json), ("--draw", args.draw),
                                ("--parts", args.parts), ("--lifetime-years", args.lifetime_years))
                 if v]  # fmt: skip
    if only_show and args.show is None:
        raise ConfigError(f"{only_show[0]}: only with --show")
    built = args.show if args.show is not None else args.export
    if built is not None:  # refused with an estimate before the cluster is built
        from sim.budget import check_estimate, estimate_topology

        check_estimate(estimate_topology(built, args.nodes))
    if args.show is not None:
        return _show(args)
    if args.export is not None:
        return _export(args.export, args.nodes)
    if args.nodes is not None:
        raise ConfigError(
            "--nodes: only with --show or --export (the list shows each preset's size)"
        )
    print(f"{'preset':<22} {'GPUs':>6} {'servers':>8}  {'GPU':<14} description")
    for name in preset_names():
        t = load_topology(name)
        desc = t.description.splitlines()[0] if t.description else ""
        gpu = "mixed" if t.heterogeneous else t.gpu.name  # servers of several GPU models
        print(f"{name:<22} {t.num_gpus:>6} {t.nodes:>8}  {gpu:<14} {desc}")
    return 0


def _show(args: argparse.Namespace) -> int:
    from sim.cli.fabric_text import bom_lines, fabric_cost_line, summary_lines
    from sim.cost.bom import bill_of_materials
    from sim.cost.fabric import DEFAULT_LIFETIME_YEARS, fabric_cost
    from sim.files import check_output_path, dumps_json
    from sim.topology.parts import parts_catalog
    from sim.topology.presets import load_topology
    from sim.topology.summary import fabric_summary

    if args.draw is not None:
        check_output_path(args.draw, "--draw")
    catalog = parts_catalog(args.parts)
    topo = load_topology(args.show, nodes=args.nodes)
    summary = fabric_summary(topo, catalog)
    bom = bill_of_materials(topo, catalog)
    years = DEFAULT_LIFETIME_YEARS if args.lifetime_years is None else args.lifetime_years
    cost = fabric_cost(bom, lifetime_years=years) if bom.items else None
    record = {**summary, "bill_of_materials": bom.to_dict(),
              "fabric_cost": cost.to_dict() if cost else None}  # fmt: skip
    if args.draw is not None:
        from sim.report.fabric import write_fabric_drawing

        write_fabric_drawing(summary, args.draw)
    if args.json:
        print(dumps_json(record, indent=1, sort_keys=True))
    else:
        lines = summary_lines(summary) + bom_lines(record["bill_of_materials"])
        if cost is not None:
            lines.append(fabric_cost_line(record["fabric_cost"]))
        print("\n".join(lines))
    if args.draw is not None:
        print(f"drawing written to {args.draw}", file=sys.stderr)
    return 0


def _export(name: str, nodes: int | None) -> int:
    import yaml

    from sim.topology.export import graph_document
    from sim.topology.presets import load_topology

    doc = graph_document(load_topology(name, nodes=nodes))
    print(yaml.safe_dump(doc, default_flow_style=None, sort_keys=False, width=100), end="")
    return 0
