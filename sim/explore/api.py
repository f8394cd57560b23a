"""What the explorer's page asks for: the options of its controls and one simulated step.

Everything goes through the simulator's public entry points (a scenario in, a
:class:`~sim.StepResult` out), on the analytical network, so a view updates in well under
a second for the shipped scenarios.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from sim.explore.state import ExploreState
from sim.explore.timeline import stage_timeline

__all__ = ["evaluate", "options"]

PRECISIONS = ("bf16", "fp16", "fp8", "fp32")


def options() -> dict[str, Any]:
    """The choices of the page's lists: scenarios, studies, fabrics, precisions, ZeRO."""
    from sim.scenario.load import scenario_names
    from sim.studies.grid import study_names
    from sim.topology.presets import preset_names

    return {
        "scenarios": scenario_names(),
        "studies": study_names(),
        "fabrics": preset_names(),
        "precisions": list(PRECISIONS),
        "zero": [0, 1, 2, 3],
    }


def _base(source: str) -> tuple[dict[str, Any], str, Any]:
    """The scenario as parsed YAML, its name and folder; a study gives its base scenario."""
    from sim.scenario.load import read_raw
    from sim.studies.grid import read_study, sweep_spec

    if read_study(source) is not None:
        spec = sweep_spec(source)
        return spec.raw, spec.name, spec.folder
    raw, name = read_raw(source)
    return raw, name, None


def evaluate(state: ExploreState) -> dict[str, Any]:
    """Simulate the view ``state`` describes; the step, its timeline and what the page shows.

    Raises
    ------
    ConfigError, TopologyError
        A control the scenario cannot take (the message names it).

    Examples
    --------
    >>> out = evaluate(ExploreState("gpt2-1gpu", mb=4))
    >>> out["result"]["plan"]["micro_batch"], len(out["timeline"]), out["query"]
    (4, 1, 'scenario=gpt2-1gpu&mb=4')
    """
    from sim.catalog import gpu_spec
    from sim.scenario.layer_list import LayerScenario, any_scenario_from_dict
    from sim.scenario.load import apply_overrides
    from sim.studies.plan.cluster import cluster_for
    from sim.training.layers import simulate_any
    from sim.training.step import run_step

    start = time.perf_counter()
    raw, name, folder = _base(state.scenario)
    scenario = any_scenario_from_dict(apply_overrides(raw, state.overrides()), name, folder)
    with cluster_for(scenario, state.gpus) as (cluster, topo, notes):  # type: ignore[arg-type]
        sc = dataclasses.replace(scenario, cluster=cluster, network="analytical")
        if isinstance(sc, LayerScenario):
            result, timeline = simulate_any(sc, "analytical"), []
        else:
            result, run, _ = run_step(sc, "analytical")
            timeline = stage_timeline(run)
        per_node = int(topo.gpus_per_node)
    return {
        "query": state.query(),
        "scenario": name,
        "result": result.to_dict(),
        "throughput_unit": "images/s" if isinstance(scenario, LayerScenario) else "tokens/s",
        "hbm_bytes": float(gpu_spec(result.gpu).hbm_bytes),
        "gpus_per_node": per_node,
        "timeline": timeline,
        "notes": notes,
        "seconds": time.perf_counter() - start,
    }
