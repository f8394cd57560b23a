"""``clustersim plan``: search the parallel layouts of a job; the fastest that fit, and why others fail.

The simulator is imported inside :func:`run`, so ``clustersim plan --help`` starts fast.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from sim.cli.outputs import add_profile_options, add_set_option, count, scenario_sets

if TYPE_CHECKING:
    from sim.studies.plan.search import PlanResult

GIB = 2**30


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
    add_profile_options(p)
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
    for key, what in (
        ("finetune", "fine-tuning: full, lora, qlora"),
        ("optimizer", "optimizers: adamw, adam, sgd, adafactor"),
        ("offload", "optimizer offload: none, cpu, nvme"),
    ):
        p.add_argument(
            f"--{key}",
            metavar="A,B|all",
            help=f"{what} to search every layout under (default: the scenario's; with --gpus 1 "
            "every fine-tuning and offload)",
        )
    p.add_argument(
        "--explain",
        action="store_true",
        help="compare the best configuration with the scenario's own, term by term",
    )
    p.add_argument("--json", action="store_true", help="print the ranked layouts as a JSON list")
    p.set_defaults(handler=run)


def _recipes(args: argparse.Namespace, scenario: Any) -> list[Any]:
    """The training recipes to search: the options given, else the scenario's own; on one
    GPU, every fine-tuning and offload (the question "is one GPU enough?")."""
    from sim.studies.plan.recipes import ALL, parse_choices, recipes

    t = scenario.training
    one = args.gpus == 1
    finetune = args.finetune or ("all" if one and not args.optimizer else None)
    offload = args.offload or ("all" if one and not args.optimizer else None)
    return recipes(
        parse_choices("finetune", finetune, t.finetune) if finetune != "all" else ALL["finetune"],
        parse_choices("optimizer", args.optimizer, t.optimizer),
        parse_choices("offload", offload, t.offload),
    )


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
    from sim.scenario.layer_list import LayerScenario, load_any_scenario
    from sim.studies.plan.search import merge, plan

    scenario = load_any_scenario(args.scenario, scenario_sets(args))
    if isinstance(scenario, LayerScenario):
        raise ConfigError(
            f"plan: {scenario.model.name} is a layer-list model, which runs data-parallel only: "
            "sweep parallel.micro_batch or the cluster instead"
        )
    _check_profile(scenario)
    cps = _cp_sizes(args.cp)
    recipes = _recipes(args, scenario)
    results = [
        plan(scenario, n, args.top, cps, recipes)
        for n in _gpu_counts(scenario, args.gpus, args.max_usd_per_hour)
    ]
    result = merge(results, args.top)
    if args.json:
        from sim.files import dumps_json

        print(dumps_json([c.record() for c in result.ranked], indent=1, sort_keys=True))
        return 0
    print(render(scenario.name, result, args.gpus == 1))
    if args.explain and result.ranked:
        from sim.studies.plan.explain import explain, render_explanation

        print(render_explanation(explain(scenario, result.ranked[0]), scenario.name))
    return 0


def _check_profile(scenario: Any) -> None:
    """Resolve the scenario's profile (``--profile``, its ``profile`` key or the automatic
    choice) on its cluster before the search: an unknown or unreadable profile, or one
    measured on other hardware, is one error, as ``run`` gives it, instead of a reason
    repeated on every rejected layout."""
    from sim.training.setup import cached_topology, resolve_step_profile

    topology = cached_topology(scenario.cluster.topology, scenario.cluster.nodes, scenario.seed)
    resolve_step_profile(scenario, topology)


def render(name: str, result: PlanResult, single_gpu: bool = False) -> str:
    """The plan as text: counts, the ranking, per recipe its best or why none fits, the
    cheapest that fits, the best rejected layouts, notes."""
    several = len(result.recipes) > 1
    lines = [
        f"plan for {name} on {result.gpus} GPU(s): {result.layouts} layouts in "
        f"{result.seconds:.1f} s; {result.simulated} steps simulated, {result.pruned} cut by "
        f"the step-time bound, {len(result.rejected)} rejected, "
        f"{sum(result.skipped.counts.values())} not dividing",
    ]
    width = 64 if several else 44
    if result.ranked:
        lines.append(
            f"{'#':>3}  {'layout':<{width}} {'GPUs':>5} {'step(s)':>9} {'tokens/s':>11} {'MFU':>6} "
            f"{'mem GiB':>8} {'$/step':>8}"
        )
        for i, c in enumerate(result.ranked, 1):
            lines.append(f"{i:>3}  {c.label(several):<{width}} " + _numbers(c.result))
    else:
        lines.append("no layout fits")
    if several:
        lines += _recipe_lines(result)
    cheapest = result.cheapest
    if cheapest is not None:
        lines.append(f"cheapest that fits: {_verdict(cheapest, several, result.capacity_bytes)}")
    if single_gpu:
        lines.append(_single_gpu_verdict(result, several))
    if result.rejected:
        lines.append("most promising rejected layouts (lowest step-time bound first):")
        for rej in result.rejected[:5]:
            tag = f"{rej.recipe.label()}: " if several else ""
            lines.append(f"  {tag}{rej.layout.label()}: {rej.reason}")
    if result.skipped.counts:
        lines.append("not dividing evenly (count: reason):")
        for reason, count in sorted(result.skipped.counts.items(), key=lambda x: (-x[1], x[0]))[:5]:
            lines.append(f"  {count}: {reason}")
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines)


def _numbers(r: Any) -> str:
    cost = "-" if r.cost_per_step_usd is None else f"{r.cost_per_step_usd:.4f}"
    return (
        f"{r.gpus:>5} {r.step_time_s:>9.4g} {r.tokens_per_s:>11,.0f} {r.mfu:>6.1%} "
        f"{r.memory_per_gpu_bytes / GIB:>8.1f} {cost:>8}"
    )


def _verdict(c: Any, several: bool, capacity_bytes: float) -> str:
    """``capacity_bytes``: what a GPU offers the step, as the search judged the fits."""
    r = c.result
    cost = "" if r.cost_per_step_usd is None else f", ${r.cost_per_step_usd:.4f} per step"
    return (
        f"{c.label(several)} on {r.gpus} GPU(s): {r.memory_per_gpu_bytes / GIB:.1f} of "
        f"{capacity_bytes / GIB:.1f} GiB, {r.step_time_s:.4g} s per step{cost}"
    )


def _recipe_lines(result: PlanResult) -> list[str]:
    """Per training recipe: its best configuration, or why none fits."""
    lines = [
        "per training recipe (fine-tuning, optimizer, offload): the best that fits, or why none does:"
    ]
    for o in result.recipes:
        if o.best is not None:
            lines.append(
                f"  {o.recipe.label():<28} fits: {_verdict(o.best, False, result.capacity_bytes)}"
            )
        else:
            lines.append(f"  {o.recipe.label():<28} does not fit: {o.reason}")
    return lines


def _single_gpu_verdict(result: PlanResult, several: bool) -> str:
    best = result.cheapest
    if best is not None:
        return f"one GPU is enough: {_verdict(best, several, result.capacity_bytes)}"
    least = min(
        (r for r in result.rejected if r.memory_bytes is not None),
        key=lambda r: r.memory_bytes or 0.0,
        default=None,
    )
    need = ""
    if least is not None:
        need_gib, hbm_gib = (least.memory_bytes or 0.0) / GIB, (least.hbm_bytes or 0.0) / GIB
        need = f" (the smallest configuration needs {need_gib:.1f} GiB of {hbm_gib:.1f})"
    searched = ", ".join(o.recipe.label() for o in result.recipes)
    return f"one GPU is not enough for any recipe searched ({searched}){need}"
