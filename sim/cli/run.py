"""``clustersim run``: simulate one training step of a scenario.

The simulator is imported inside :func:`run`, so ``clustersim run --help`` starts fast.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from sim.cli import long_lived, variability
from sim.cli.outputs import (
    Heartbeat,
    add_profile_options,
    add_set_option,
    check_plot_path,
    count,
)
from sim.errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``run`` subcommand."""
    p = sub.add_parser("run", help="simulate one training step of a scenario")
    p.add_argument("scenario", help="scenario preset name or YAML file")
    add_set_option(p)
    p.add_argument(
        "--network",
        choices=None,
        help="network backend: flow or analytical (default: the scenario's)",
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument(
        "--json", action="store_true", help="print the result as JSON (with per-link rows on flow)"
    )
    out.add_argument("--csv", action="store_true", help="print the result as one flat CSV row")
    p.add_argument("--trace", metavar="FILE", help="write a Chrome/Perfetto trace of the step")
    add_profile_options(p)
    p.add_argument(
        "--plot", metavar="FILE", help="draw the step-time breakdown (.png or .svg; [plot] extra)"
    )
    p.add_argument(
        "--links", type=count(0), metavar="N", default=0,
        help="list the N busiest links (utilisation, bytes, which collectives; flow network)",
    )  # fmt: skip
    p.add_argument(
        "--parts", metavar="FILE", help="your own parts catalog for the fabric's cost and power"
    )
    variability.add_options(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Simulate and print a summary (or JSON or CSV); write the trace and figure if asked."""

    with long_lived():  # the simulator's modules
        from sim.beyond import has_run_sections, whole_run, whole_run_text
        from sim.budget import guard_step
        from sim.cli.outputs import busiest_text, link_rows, link_tiers, plot, tiers_text
        from sim.files import check_output_path, dumps_json, write_atomic
        from sim.network import BACKENDS, backend
        from sim.profile_select import text_lines
        from sim.scenario.layer_list import LayerScenario, load_any_scenario
        from sim.topology.presets import nodes_override_note
        from sim.training.layers import simulate_layer_step
        from sim.training.setup import cached_topology
        from sim.training.step import run_step
        from sim.training.trace import trace_json
    if args.network is not None:
        backend(args.network, "--network")
    if args.links < 0:
        raise ConfigError(f"--links {args.links}: must be a number of links >= 1")
    if args.trace is not None:  # before the simulation, not after it
        check_output_path(args.trace, "--trace")
    if args.plot is not None:
        check_plot_path(args.plot)
    scenario = load_any_scenario(args.scenario, variability.seed_override(args))
    guard_step(scenario, args.network)  # before anything is built: refused with an estimate
    variability.check(args, scenario)
    if args.links and backend(args.network or scenario.network).closed_form:
        simulated = [n for n, b in BACKENDS.items() if not b.closed_form]
        raise ConfigError(
            f"--links: per-link counters come from a simulated network; add --network {simulated[0]}"
        )
    trace: str | None = None
    with Heartbeat("simulating the step") as beat:
        if isinstance(scenario, LayerScenario):
            if args.trace is not None:
                raise ConfigError(
                    "--trace: not available for layer-list models (no per-pass timeline)"
                )
            result = simulate_layer_step(scenario, args.network)
            record = result.to_dict()
        else:
            result, pipeline, setup = run_step(
                scenario, args.network, record=bool(args.trace) or bool(args.links),
                progress=Ticker(beat), whole=bool(args.trace),
            )  # fmt: skip
            trace = trace_json(setup, pipeline) if args.trace else None
            record = result.to_dict()
            override = nodes_override_note(scenario.cluster.topology, scenario.cluster.nodes)
            if override is not None:
                record["notes"] = [*record["notes"], override]
            links = link_rows(setup.topology, pipeline.network, result.step_time_s)
            if links:
                record["links"] = links
            if args.links:
                record["link_tiers"] = link_tiers(setup.topology, pipeline.network,
                                                  result.step_time_s, result.link_bytes_by_scope)  # fmt: skip
            fabric = _fabric(setup.topology, result, scenario, args.parts)
            if fabric is not None:
                record["fabric"] = fabric
        sampled = variability.sample(args, scenario, result)
        if sampled is not None:
            record["variability"] = sampled.to_dict()
    run_layers = None
    if has_run_sections(scenario):  # the step's own topology (cached): its server size
        cluster = cached_topology(scenario.cluster.topology, scenario.cluster.nodes, scenario.seed)
        fabric_w = record["fabric"]["power_per_gpu_w"] if "fabric" in record else None
        run_layers = whole_run(result, scenario, cluster.gpus_per_node, fabric_w)
    if run_layers is not None:
        record.update(run_layers.to_dict())
    if trace is not None:  # written once nothing can fail any more: no stale file on error
        write_atomic(args.trace, trace, "--trace")
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
        shown = set(result.notes)
        for note in record.get("notes", []):
            if note not in shown:
                print(f"note: {note}")
        if "fabric" in record:
            from sim.cli.fabric_text import fabric_step_lines

            print("\n".join(fabric_step_lines(record["fabric"])))
        share = result.breakdown.get("compute", 0.0) / result.step_time_s
        print("\n".join(text_lines(result.profile, result.compute_params, share)))
        if run_layers is not None:
            print(whole_run_text(run_layers))
        if args.trace:
            print(f"trace written to {args.trace} (open in https://ui.perfetto.dev)")
        if args.links:
            print(tiers_text(record.get("link_tiers", []), result.step_time_s))
            print(busiest_text(record.get("links", []), args.links))
        if sampled is not None:
            print(sampled.summary())
    if args.plot:
        plot([record], None, args.plot)
    return 0


def _fabric(topology: Any, result: Any, scenario: Any, parts: str | None) -> dict[str, Any] | None:
    """The fabric layer of the step (:func:`sim.cost.fabric.fabric_record`) at the
    scenario's GPU price."""
    from sim.cost import PriceConfig, resolve_price
    from sim.cost.fabric import fabric_record
    from sim.topology.parts import parts_catalog

    quote = resolve_price(PriceConfig(gpu_hour_usd=scenario.price.gpu_hour_usd,
                                      preset=scenario.price.preset), result.gpu)  # fmt: skip
    tr = scenario.training
    return fabric_record(
        topology, step_time_s=result.step_time_s, gpus=result.gpus,
        tokens_per_step=float(tr.global_batch * tr.seq_len),
        gpu_hour_usd=None if quote is None else quote.usd_per_gpu_hour,
        catalog=parts_catalog(parts),
    )  # fmt: skip


class Ticker:
    """Progress of a long simulated step on stderr, so a flow run is never silent for
    long: a line every :data:`TICK_S` seconds once the run has taken that long (the graph's
    executor calls it every ``PROGRESS_EVERY_S`` of wall time; stdout stays the result)."""

    TICK_S = 5.0

    def __init__(self, beat: Heartbeat | None = None) -> None:
        self.start = self.last = time.monotonic()
        self.beat = beat

    def __call__(self, simulated_s: float, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last < self.TICK_S:
            return
        self.last = now
        print(f"clustersim: {done:,} of {total:,} tasks simulated ({simulated_s:.3f} s of the "
              f"step), {now - self.start:.0f} s elapsed", file=sys.stderr, flush=True)  # fmt: skip
        if self.beat is not None:
            self.beat.touch()
