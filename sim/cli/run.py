"""``clustersim run``: simulate one training step of a scenario.

The simulator is imported inside :func:`run`, so ``clustersim run --help`` starts fast.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from sim.errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``run`` subcommand."""
    p = sub.add_parser("run", help="simulate one training step of a scenario")
    p.add_argument("scenario", help="scenario preset name or YAML file")
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario field, e.g. parallel.tp=4 (repeatable)",
    )
    p.add_argument("--network", choices=None, help="flow or analytical (default: the scenario's)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
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
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run(args: argparse.Namespace) -> int:
    """Simulate and print a summary (or JSON); write the trace if asked."""
    from dataclasses import replace

    from sim.profile_select import describe, resolve_profile, text_lines
    from sim.topology.presets import load_topology
    from sim.training.scenario import load_scenario
    from sim.training.step import run_step
    from sim.training.trace import trace_json

    if args.network is not None and args.network not in ("flow", "analytical"):
        raise ConfigError(f"--network {args.network!r} is unknown; allowed: flow, analytical")
    scenario = load_scenario(args.scenario, args.sets)
    cluster = scenario.cluster
    topo = load_topology(cluster.topology, nodes=cluster.nodes, seed=scenario.seed)
    request = args.profile if args.profile is not None else scenario.profile
    resolved = resolve_profile(request, topo, force=args.force_profile)
    scenario = replace(scenario, profile=resolved.key)
    info = describe(resolved, topo)
    result, pipeline, setup = run_step(scenario, args.network, record=bool(args.trace))
    if args.trace:
        _write_atomic(args.trace, trace_json(setup, pipeline))
    if args.json:
        print(json.dumps({**result.to_dict(), "profile": info}, indent=1, sort_keys=True))
    else:
        print(result.summary())
        print("\n".join(text_lines(info)))
        if args.trace:
            print(f"trace written to {args.trace} (open in https://ui.perfetto.dev)")
    return 0
