"""``clustersim run``: simulate one training step of a scenario.

The simulator is imported inside :func:`run`, so ``clustersim run --help`` starts fast.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from sim.cli.outputs import add_set_option
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
        "--links", type=int, metavar="N", default=0,
        help="list the N busiest links (utilisation, bytes, which collectives; flow network)",
    )  # fmt: skip
    p.set_defaults(handler=run)


def _write_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file, so a failure leaves nothing half-written."""
    target = Path(path)
    if target.parent and not target.parent.exists():
        raise ConfigError(f"--trace {path!r}: folder {str(target.parent)!r} does not exist")
    fd, tmp = tempfile.mkstemp(dir=target.parent or ".", prefix=".trace-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a trace is meant to be opened elsewhere
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run(args: argparse.Namespace) -> int:
    """Simulate and print a summary (or JSON or CSV); write the trace and figure if asked."""
    from dataclasses import replace

    from sim.cli.outputs import busiest_text, link_rows, plot
    from sim.profile_select import describe, resolve_profile, text_lines
    from sim.training.engine.setup import cached_topology
    from sim.training.layers import LayerScenario, load_any_scenario, simulate_layer_step
    from sim.training.step import run_step
    from sim.training.trace import trace_json

    if args.network is not None and args.network not in ("flow", "analytical"):
        raise ConfigError(f"--network {args.network!r} is unknown; allowed: flow, analytical")
    if args.links < 0:
        raise ConfigError(f"--links {args.links}: must be a number of links >= 1")
    scenario = load_any_scenario(args.scenario, args.sets)
    if args.links and (args.network or getattr(scenario, "network", "flow")) != "flow":
        raise ConfigError(
            "--links: per-link counters come from the flow network; add --network flow"
        )
    info: dict[str, Any] | None = None
    if isinstance(scenario, LayerScenario):
        if args.trace:
            raise ConfigError("--trace: not available for layer-list models (no per-pass timeline)")
        result = simulate_layer_step(scenario, args.network)
        record = result.to_dict()
    else:
        cluster = scenario.cluster
        topo = cached_topology(cluster.topology, cluster.nodes, scenario.seed)
        request = args.profile if args.profile is not None else scenario.profile
        resolved = resolve_profile(request, topo, force=args.force_profile)
        scenario = replace(scenario, profile=resolved.key)
        info = describe(resolved, topo)
        result, pipeline, setup = run_step(scenario, args.network, record=bool(args.trace))
        if args.trace:
            _write_atomic(args.trace, trace_json(setup, pipeline))
        record = {**result.to_dict(), "profile": info}
        links = link_rows(setup.topology, pipeline.network, result.step_time_s)
        if links:
            record["links"] = links
    if args.json:
        print(json.dumps(record, indent=1, sort_keys=True))
    elif args.csv:
        from sim.studies.files import csv_text

        flat = result.to_record()
        sys.stdout.write(csv_text([flat], list(flat)))
    else:
        print(result.summary())
        if info is not None:
            print("\n".join(text_lines(info)))
        if args.trace:
            print(f"trace written to {args.trace} (open in https://ui.perfetto.dev)")
        if args.links:
            print(busiest_text(record.get("links", []), args.links))
    if args.plot:
        plot([record], None, args.plot)
    return 0
