"""``clustersim plan``: search the parallel layouts of a job; the fastest that fit, and why others fail.

The simulator is imported inside :func:`run`, so ``clustersim plan --help`` starts fast.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from sim.cli.outputs import add_set_option, count

if TYPE_CHECKING:
    from sim.studies.plan.search import PlanResult

GIB = 2**30
SINGLE_GPU_MISSING = (
    "not modelled yet on one GPU: LoRA, QLoRA and optimizer/parameter offload "
    "(only full fine-tuning with recompute is searched)"
)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``plan`` subcommand."""
    p = sub.add_parser(
        "plan",
        help="search TP/PP/DP/ZeRO/micro-batch/recompute layouts; rank those that fit",
        description="Search the parallel layouts of a scenario's job (TP, PP, DP, EP, "
        "virtual stages, ZeRO, micro-batch, recompute, SP, overlap) on the analytical "
        "network; print the fastest that fit and why the most promising others fail.",
    )
    p.add_argument(
        "scenario", help="scenario preset or YAML file (its parallel section is replaced)"
    )
    add_set_option(p, "override a scenario field first")
    p.add_argument("--gpus", type=count(1), help="plan for N GPUs of the scenario's topology")
    p.add_argument(
        "--max-usd-per-hour",
        type=float,
        metavar="X",
        help="only clusters whose GPUs cost at most X USD per hour (needs price.gpu_hour_usd)",
    )
    p.add_argument("--top", type=count(1), default=10, help="how many layouts to rank (default 10)")
    p.add_argument(
        "--cp",
        default="1",
        metavar="N,N",
        help="context-parallel sizes to search, e.g. 1,2,4 (default 1: no context parallelism)",
    )
    p.add_argument("--json", action="store_true", help="print the ranked layouts as a JSON list")
    p.set_defaults(handler=run)


def _gpu_counts(scenario: Any, gpus: int | None, budget: float | None) -> list[int | None]:
    """GPU counts to plan: the scenario's (or --gpus), or those the budget affords."""
    from sim.errors import ConfigError
    from sim.topology.presets import load_topology

    if budget is None:
        return [gpus]
    price = scenario.price.gpu_hour_usd
    if price is None:
        raise ConfigError("--max-usd-per-hour needs price.gpu_hour_usd in the scenario (or --set)")
    if price == 0:
        return [gpus]
    topo = load_topology(scenario.cluster.topology, nodes=scenario.cluster.nodes)
    if gpus is not None:
        counts = [gpus]
    else:
        per, nodes = topo.gpus_per_node, topo.nodes
        counts = sorted(
            {per * n for n in [2**k for k in range(nodes.bit_length())] + [nodes] if n <= nodes}
        )
    affordable = [n for n in counts if n * price <= budget + 1e-12]
    if not affordable:
        raise ConfigError(
            f"--max-usd-per-hour {budget:g}: {counts[0]} GPU(s) at ${price:g}/GPU-hour cost "
            f"${counts[0] * price:g} per hour; no cluster in budget"
        )
    return list(reversed(affordable))


def _cp_sizes(text: str) -> list[int]:
    """``--cp 1,2,4`` -> [1, 2, 4]; ConfigError naming the bad value."""
    from sim.errors import ConfigError

    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise ConfigError(f"--cp {text!r}: expected context-parallel sizes >= 1, e.g. 1,2,4")
    return sizes


def run(args: argparse.Namespace) -> int:
    """Search, then print the ranking (or JSON)."""
    from sim.errors import ConfigError
    from sim.studies.plan.search import merge, plan
    from sim.training.layers import LayerScenario, load_any_scenario

    scenario = load_any_scenario(args.scenario, args.sets)
    if isinstance(scenario, LayerScenario):
        raise ConfigError(
            f"plan: {scenario.model.name} is a layer-list model, which runs data-parallel only: "
            "sweep parallel.micro_batch or the cluster instead"
        )
    cps = _cp_sizes(args.cp)
    results = [
        plan(scenario, n, args.top, cps)
        for n in _gpu_counts(scenario, args.gpus, args.max_usd_per_hour)
    ]
    result = merge(results, args.top)
    if args.json:
        from sim.files import dumps_json

        print(dumps_json([c.record() for c in result.ranked], indent=1, sort_keys=True))
        return 0
    print(render(scenario.name, result, args.gpus == 1))
    return 0


def render(name: str, result: PlanResult, single_gpu: bool = False) -> str:
    """The plan as text: counts, the ranking, the best rejected layouts, notes."""
    lines = [
        f"plan for {name} on {result.gpus} GPU(s): {result.layouts} layouts in "
        f"{result.seconds:.1f} s; {result.simulated} steps simulated, {result.pruned} cut by "
        f"the step-time bound, {len(result.rejected)} rejected, "
        f"{sum(result.skipped.counts.values())} not dividing",
    ]
    if result.ranked:
        lines.append(
            f"{'#':>3}  {'layout':<44} {'GPUs':>5} {'step(s)':>9} {'tokens/s':>11} {'MFU':>6} "
            f"{'mem GiB':>8} {'$/step':>8}"
        )
        for i, c in enumerate(result.ranked, 1):
            r = c.result
            cost = "-" if r.cost_per_step_usd is None else f"{r.cost_per_step_usd:.4f}"
            lines.append(
                f"{i:>3}  {c.layout.label():<44} {r.gpus:>5} {r.step_time_s:>9.4g} "
                f"{r.tokens_per_s:>11,.0f} {r.mfu:>6.1%} {r.memory_per_gpu_bytes / GIB:>8.1f} {cost:>8}"
            )
    else:
        lines.append("no layout fits")
    if single_gpu:
        lines.append(_single_gpu_verdict(result))
    if result.rejected:
        lines.append("most promising rejected layouts (lowest step-time bound first):")
        for rej in result.rejected[:5]:
            lines.append(f"  {rej.layout.label()}: {rej.reason}")
    if result.skipped.counts:
        lines.append("not dividing evenly (count: reason):")
        for reason, count in sorted(result.skipped.counts.items(), key=lambda x: (-x[1], x[0]))[:5]:
            lines.append(f"  {count}: {reason}")
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines)


def _single_gpu_verdict(result: PlanResult) -> str:
    if result.ranked:
        best = result.ranked[0]
        return (
            f"one GPU is enough: {best.layout.label()} needs "
            f"{best.result.memory_per_gpu_bytes / GIB:.1f} GiB, {best.result.step_time_s:.4g} s per step; "
            + SINGLE_GPU_MISSING
        )
    least = min(
        (r for r in result.rejected if r.memory_bytes is not None),
        key=lambda r: r.memory_bytes or 0.0,
        default=None,
    )
    need = ""
    if least is not None:
        need_gib, hbm_gib = (least.memory_bytes or 0.0) / GIB, (least.hbm_bytes or 0.0) / GIB
        need = f" (the smallest layout needs {need_gib:.1f} GiB of {hbm_gib:.1f})"
    return f"one GPU is not enough for full fine-tuning{need}; " + SINGLE_GPU_MISSING
