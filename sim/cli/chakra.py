"""``clustersim chakra``: MLCommons Chakra execution traces out of and into the simulator.

``chakra export SCENARIO --out DIR`` writes a scenario's simulated step as one ET file per
rank (``DIR/NAME.RANK.et``, as ASTRA-sim names them) and the communicator groups
(``DIR/NAME.groups.json``); ``chakra run PREFIX_OR_DIR --topology T`` simulates a trace
set on one of clustersim's topologies. docs/chakra.md describes both. The simulator is
imported inside the handlers, so ``--help`` starts fast.
"""

from __future__ import annotations

import argparse
import time

from sim.cli.outputs import add_profile_options, add_set_option, scenario_sets
from sim.errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``chakra`` subcommand and its ``export`` and ``run`` commands."""
    p = sub.add_parser("chakra", help="export or simulate MLCommons Chakra execution traces")
    cmds = p.add_subparsers(dest="chakra_command", required=True, metavar="COMMAND")

    e = cmds.add_parser(
        "export", help="write a scenario's simulated step as Chakra traces, one file per rank"
    )
    e.add_argument("scenario", help="scenario preset name or YAML file")
    e.add_argument("--out", required=True, metavar="DIR", help="folder for the files (made)")
    e.add_argument("--name", help="file name prefix (default: the scenario's name)")
    add_set_option(e)
    e.add_argument(
        "--network", help="network backend: flow or analytical (default: the scenario's)"
    )
    add_profile_options(e)
    e.set_defaults(handler=export)

    r = cmds.add_parser("run", help="simulate a set of Chakra traces on a topology")
    r.add_argument("traces", metavar="PREFIX_OR_DIR",
                   help="DIR/NAME (files DIR/NAME.0.et ...), a folder of one set, or one file")  # fmt: skip
    r.add_argument("--topology", required=True, help="preset name or YAML file")
    r.add_argument("--nodes", type=int, help="override the number of servers of the topology")
    r.add_argument("--network", default="flow", help="flow (max-min sharing) or analytical")
    r.add_argument(
        "--profile",
        help="calibrated profile (name or YAML file); default: the shipped profile measured on "
        "this topology's hardware; none: the shipped defaults",
    )
    r.add_argument("--force-profile", action="store_true",
                   help="use --profile even if measured on other hardware")  # fmt: skip
    r.add_argument("--comm-groups", metavar="FILE",
                   help="ASTRA-sim's communicator-group JSON (default: PREFIX.groups.json if there)")  # fmt: skip
    r.add_argument("--no-fold", action="store_true",
                   help="simulate every rank, even data-parallel replicas that mirror replica 0")  # fmt: skip
    r.add_argument("--seed", type=int, default=0, help="seed of ECMP hashing")
    r.add_argument(
        "--json", action="store_true", help="print the result as JSON (time_s: the time)"
    )
    r.set_defaults(handler=run)


def export(args: argparse.Namespace) -> int:
    """Simulate the scenario's step and write its traces."""
    from pathlib import Path

    from sim.budget import check_estimate, estimate_export
    from sim.chakra.export import StepTraces, write_step_traces
    from sim.chakra.messages import message_classes
    from sim.network import backend
    from sim.scenario.layer_list import LayerScenario, load_any_scenario
    from sim.training.hetero.replicas import mixed_path
    from sim.training.setup import prepare_step, resolve_step_profile
    from sim.training.step import run_step

    started = time.perf_counter()
    message_classes()  # the [chakra] extra, before minutes of simulation
    if args.network is not None:
        backend(args.network, "--network")
    scenario = load_any_scenario(args.scenario, scenario_sets(args))
    if isinstance(scenario, LayerScenario):
        raise ConfigError(
            f"chakra export: {args.scenario!r} is a layer-list scenario; it has no step task "
            "graph to export (only transformer scenarios do)"
        )
    name = args.name or scenario.name
    if not name or "/" in name or name in (".", ".."):
        raise ConfigError(f"--name {name!r}: a file name prefix without '/'")
    out = Path(args.out)
    prefix = str(out / name)
    if "empty" in prefix:
        raise ConfigError(
            f"--out/--name {prefix!r}: ASTRA-sim skips a communicator-group file whose path "
            "contains 'empty'; choose another folder or name"
        )
    check_estimate(estimate_export(scenario, args.network))  # before anything is built
    setup = prepare_step(scenario, args.network)
    if mixed_path(setup):
        raise ConfigError(
            "chakra export: replicas of this scenario run different steps (mixed GPU models "
            "or a speed-based batch or stage split); only equal replicas are exported"
        )
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {args.out!r}: not a folder")
    result, run_, setup = run_step(scenario, args.network)
    simulated = time.perf_counter()
    info: dict[str, str | float] = {
        "scenario": scenario.name,
        "topology": setup.topology.name,
        "network": setup.network,
        "profile": resolve_step_profile(scenario, setup.topology).key,
        "step_time_s": result.step_time_s,
    }
    traces = StepTraces(setup, run_, info)
    out.mkdir(parents=True, exist_ok=True)
    summary = write_step_traces(traces, prefix)
    done = time.perf_counter()
    print(
        f"{summary.ranks:,} ranks written to {summary.prefix}.RANK.et ({summary.distinct:,} "
        f"distinct traces, {summary.nodes:,} nodes, {summary.bytes / 1e6:,.1f} MB)"
    )
    print(f"communicator groups ({summary.groups}): {summary.groups_path}")
    print(
        f"step {result.step_time_s:.6f} s on {setup.topology.name} ({setup.network} network, "
        f"profile {info['profile'] or 'none'}); simulated in {simulated - started:.1f} s, "
        f"written in {done - simulated:.1f} s"
    )
    if traces.dropped_deps:
        print(f"note: {traces.dropped_deps} dependencies on other ranks' tasks have no node here")
    nodes = f" --nodes {scenario.cluster.nodes}" if scenario.cluster.nodes else ""
    print(
        f"simulate it again: clustersim chakra run {summary.prefix} --topology "
        f"{scenario.cluster.topology}{nodes} --network {setup.network}"
    )
    return 0


def run(args: argparse.Namespace) -> int:
    """Simulate the traces and print the time (or JSON)."""
    from sim.chakra.run import run_traces
    from sim.files import dumps_json

    if args.nodes is not None and args.nodes < 1:
        raise ConfigError(f"--nodes {args.nodes}: must be an integer >= 1")
    if args.seed < 0:
        raise ConfigError(f"--seed {args.seed}: must be an integer >= 0")
    result = run_traces(
        args.traces, args.topology, nodes=args.nodes, network=args.network,
        profile=args.profile, force_profile=args.force_profile, comm_groups=args.comm_groups,
        fold=not args.no_fold, seed=args.seed,
    )  # fmt: skip
    if args.json:
        print(dumps_json(result.to_dict(), indent=1, sort_keys=True))
    else:
        print(result.summary())
    return 0
