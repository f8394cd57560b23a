"""``clustersim run --samples N [--seed S]``: the Monte Carlo over step times (sim.variability).

Only the standard library at import time (the commands' ``--help`` stays fast).
"""

from __future__ import annotations

import argparse
from typing import Any

from sim.errors import ConfigError

__all__ = ["add_options", "check", "sample", "seed_override"]


def add_options(p: argparse.ArgumentParser) -> None:
    """Add ``--samples`` and ``--seed`` to ``run``."""
    p.add_argument(
        "--samples", type=int, metavar="N",
        help="sample N steps under the scenario's variability: section (jitter, stragglers, "
        "throttling, network tails, imbalance) and print their distribution",
    )  # fmt: skip
    p.add_argument(
        "--seed", type=int, metavar="S",
        help="seed, overriding the scenario's (as --set seed=S: also reseeds ECMP hashing)",
    )  # fmt: skip


def seed_override(args: argparse.Namespace) -> list[str]:
    """``--set`` items (with ``--profile``/``--force-profile``) and ``--seed`` appended (it
    wins over the file and ``--set seed=``)."""
    from sim.cli.outputs import scenario_sets

    sets = scenario_sets(args)
    return [*sets, f"seed={args.seed}"] if args.seed is not None else sets


def check(args: argparse.Namespace, scenario: Any) -> None:
    """Refuse ``--samples`` below 1, or without a ``variability:`` section, before simulating."""
    if args.samples is None:
        return
    if args.samples < 1:
        raise ConfigError(f"--samples {args.samples}: expected a number of sampled steps >= 1")
    if getattr(scenario, "variability", None) is None:
        raise ConfigError(
            "--samples: the scenario has no variability: section; add one to the file or "
            "with --set, e.g. --set variability.compute_cv=0.03"
        )
    from sim.budget import check_estimate, cluster_shape, estimate_samples

    gpus, _ = cluster_shape(scenario.cluster.topology, scenario.cluster.nodes)
    check_estimate(estimate_samples(args.samples, gpus))


def sample(args: argparse.Namespace, scenario: Any, result: Any) -> Any:
    """The :class:`~sim.variability.VariabilityResult` of ``--samples`` (None without it)."""
    if args.samples is None:
        return None
    from sim.scenario.load import Scenario
    from sim.variability import expert_compute_share, sample_step_times

    share = expert_compute_share(scenario.model) if isinstance(scenario, Scenario) else 0.0
    return sample_step_times(result, scenario.variability, args.samples, scenario.seed, share)
