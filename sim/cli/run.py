"""``clustersim run``: simulate one training step of a scenario.

The simulator is imported inside :func:`run`, so ``clustersim run --help`` starts fast.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from sim.cli import variability
from sim.cli.outputs import add_set_option, count
from sim.errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``run`` subcommand."""
    p = sub.add_parser("run", help="simulate one training step of a scenario")
    p.add_argument("scenario", help="scenario preset name or YAML file")
    add_set_option(p)
    p.add_argument("--network", choices=None, help="flow or analytical (default: the scenario's)")
    out = p.add_mutually_exclusive_group()
    out.add_argument(
        "--json", action="store_true", help="print the result as JSON (with per-link rows on flow)"
    )
    out.add_argument("--csv", action="store_true", help="print the result as one flat CSV row")
    p.add_argument("--trace", metavar="FILE", help="write a Chrome/Perfetto trace of the step")
    p.add_argument(
        "--profile",
        help="calibrated profile (name or YAML file), overriding the scenario's; default: the "
        "shipped profile measured on the topology's hardware; none: the shipped defaults",
    )
    p.add_argument(
        "--force-profile",
        action="store_true",
        help="use the profile even if measured on other hardware",
    )
    p.add_argument(
        "--plot", metavar="FILE", help="draw the step-time breakdown (.png or .svg; [plot] extra)"
    )
    p.add_argument(
        "--links", type=count(0), metavar="N", default=0,
        help="list the N busiest links (utilisation, bytes, which collectives; flow network)",
    )  # fmt: skip
    variability.add_options(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Simulate and print a summary (or JSON or CSV); write the trace and figure if asked."""
    from dataclasses import replace

    from sim.beyond import has_run_sections, whole_run, whole_run_text
    from sim.budget import guard_step
    from sim.cli.outputs import busiest_text, link_rows, plot
    from sim.collectives.algorithms import check_hardware
    from sim.files import check_output_path, dumps_json, write_atomic
    from sim.profile_select import describe, resolve_profile, text_lines
    from sim.training.engine.setup import cached_topology
    from sim.training.layers import LayerScenario, load_any_scenario, simulate_layer_step
    from sim.training.step import run_step
    from sim.training.trace import trace_json

    if args.network is not None and args.network not in ("flow", "analytical"):
        raise ConfigError(f"--network {args.network!r} is unknown; allowed: flow, analytical")
    if args.links < 0:
        raise ConfigError(f"--links {args.links}: must be a number of links >= 1")
    for option, path in (("--trace", args.trace), ("--plot", args.plot)):
        if path is not None:
            check_output_path(path, option)  # before the simulation, not after it
    scenario = load_any_scenario(args.scenario, variability.seed_override(args))
    guard_step(scenario, args.network)  # before anything is built: refused with an estimate
    variability.check(args, scenario)
    if args.links and (args.network or getattr(scenario, "network", "flow")) != "flow":
        raise ConfigError(
            "--links: per-link counters come from the flow network; add --network flow"
        )
    info: dict[str, Any] | None = None
    if isinstance(scenario, LayerScenario):
        if args.trace is not None:
            raise ConfigError("--trace: not available for layer-list models (no per-pass timeline)")
        result = simulate_layer_step(scenario, args.network)
        record = result.to_dict()
    else:
        topo = cached_topology(scenario.cluster.topology, scenario.cluster.nodes, scenario.seed)
        check_hardware(scenario.parallel.nccl_algo, topo, "parallel.nccl_algo")
        request = args.profile if args.profile is not None else scenario.profile
        resolved = resolve_profile(request, topo, force=args.force_profile)
        scenario = replace(scenario, profile=resolved.key)
        info = describe(resolved, topo)
        result, pipeline, setup = run_step(scenario, args.network, record=bool(args.trace))
        if args.trace:
            write_atomic(args.trace, trace_json(setup, pipeline), "--trace")
        record = {**result.to_dict(), "profile": info}
        links = link_rows(setup.topology, pipeline.network, result.step_time_s)
        if links:
            record["links"] = links
    sampled = variability.sample(args, scenario, result)
    if sampled is not None:
        record["variability"] = sampled.to_dict()
    run_layers = None
    if has_run_sections(scenario):  # the step's own topology (cached): its server size
        cluster = cached_topology(scenario.cluster.topology, scenario.cluster.nodes, scenario.seed)
        run_layers = whole_run(result, scenario, cluster.gpus_per_node)
    if run_layers is not None:
        record.update(run_layers.to_dict())
    if args.json:
        print(dumps_json(record, indent=1, sort_keys=True))
    elif args.csv:
        from sim.studies.files import csv_text

        flat = result.to_record()
        if sampled is not None:
            flat.update(sampled.to_record())
        if run_layers is not None:
            flat.update(run_layers.to_record())
        sys.stdout.write(csv_text([flat], list(flat)))
    else:
        print(result.summary())
        if info is not None:
            print("\n".join(text_lines(info)))
        if run_layers is not None:
            print(whole_run_text(run_layers))
        if args.trace:
            print(f"trace written to {args.trace} (open in https://ui.perfetto.dev)")
        if args.links:
            print(busiest_text(record.get("links", []), args.links))
        if sampled is not None:
            print(sampled.summary())
    if args.plot:
        plot([record], None, args.plot)
    return 0
