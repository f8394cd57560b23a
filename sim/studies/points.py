"""One sweep point: the scenario with the point's overrides in, one flat row out.

The point runs through the simulator's entry points only (a scenario of either kind in,
:func:`sim.training.layers.simulate_any`, a StepResult out), as a user would. A point whose scenario is invalid (a
plan that does not divide, an unknown preset) becomes a row with a ``reason``; a plan
that does not fit in memory is simulated and flagged ``fits = False``.

A row keeps the story of its step: the step-time breakdown (``breakdown.*``, seconds),
the fullest GPU's memory by kind (``memory_breakdown.*``, bytes) and its HBM capacity,
bytes on the wire per link scope (``link_bytes_by_scope.*``), the GPU model, what the
throughput counts (tokens or images) and the parameter profile the step used (resolved as
every entry point resolves it: :func:`sim.training.setup.prepare_step`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sim.errors import ClusterSimError
from sim.result import StepResult
from sim.scenario.load import apply_overrides
from sim.studies.columns import SWEEP_METRICS, SWEEP_PARTS
from sim.studies.grid import override_items

__all__ = ["METRICS", "evaluate_point", "metrics_of"]

METRICS = tuple(k for k in SWEEP_METRICS if k != "point")
"""The columns after the grid keys, in order (the ``scaling_*`` ones are filled at the end)."""


def _parts(field: str, values: Mapping[str, float]) -> dict[str, float]:
    """``FIELD.NAME`` columns of one nested field; names not listed are summed into other."""
    names = SWEEP_PARTS[field]
    out = dict.fromkeys((f"{field}.{n}" for n in names), 0.0)
    for name, value in values.items():
        column = f"{field}.{name}" if name in names else f"{field}.other"
        out[column] += float(value)
    return out


def _hbm_bytes(gpu: str) -> float | None:
    from sim.catalog import gpu_spec

    try:
        return float(gpu_spec(gpu).hbm_bytes)
    except ClusterSimError:
        return None


def metrics_of(result: StepResult, scenario: Any = None) -> dict[str, Any]:
    """The sweep columns of one simulated step (the ``scaling_*`` columns left empty).

    ``scenario`` (the one simulated) gives what throughput counts: images per second for a
    layer-list model (a CNN), tokens otherwise.
    """
    from sim.scenario.layer_list import LayerScenario

    rec = result.to_dict()
    out: dict[str, Any] = dict.fromkeys(METRICS)
    out.update({k: rec[k] for k in METRICS if k in rec})
    for field in SWEEP_PARTS:
        out.update(_parts(field, rec[field]))
    out["hbm_bytes"] = _hbm_bytes(result.gpu)
    images = isinstance(scenario, LayerScenario)
    out["throughput_unit"] = "images/s" if images else "tokens/s"
    out["profile"] = result.profile.get("name")
    return out


def _gpus_of(raw: Mapping[str, Any]) -> int | None:
    """GPU count of a scenario that failed validation (or was refused by its estimate),
    when its cluster's description still loads: read from the description, never built
    (building 80,000 GPUs to fill one cell took 9 CPU s and 850 MB)."""
    from sim.budget import cluster_shape

    cluster = raw.get("cluster") or {}
    if not isinstance(cluster, Mapping):
        return None
    try:
        return cluster_shape(str(cluster.get("topology")), cluster.get("nodes"))[0]
    except (ClusterSimError, TypeError, ValueError):
        return None


def evaluate_point(
    raw: Mapping[str, Any],
    name: str,
    point: Mapping[str, Any],
    network: str | None = None,
    folder: Path | None = None,
) -> dict[str, Any]:
    """Simulate ``raw`` with ``point``'s overrides; return its row (point keys, then metrics).

    Parameters
    ----------
    raw : mapping
        The base scenario as parsed YAML.
    name : str
        Scenario name.
    point : mapping
        Scenario key -> value.
    network : str, optional
        Network backend for every point (default: the scenario's).
    folder : Path, optional
        Where files the scenario names relatively (a layer list) are found.

    Examples
    --------
    >>> from sim.scenario.load import read_raw
    >>> raw, name = read_raw("gpt2-1gpu")
    >>> row = evaluate_point(raw, name, {"parallel.micro_batch": 3}, "analytical")
    >>> row["reason"]
    'training.global_batch: 64 must be a multiple of parallel.micro_batch x parallel.dp = 3 x 1 = 3'
    """
    from sim.budget import guard_step
    from sim.scenario.layer_list import any_scenario_from_dict
    from sim.training.layers import simulate_any

    row: dict[str, Any] = dict(point)
    scenario_raw = apply_overrides(raw, override_items(point))
    try:
        scenario = any_scenario_from_dict(scenario_raw, name, folder)
        guard_step(scenario, network)  # a point over the limits is a row with the estimate
        result = simulate_any(scenario, network)
    except ClusterSimError as e:
        empty = dict.fromkeys(METRICS)
        return {**row, **empty, "gpus": _gpus_of(scenario_raw), "reason": str(e)}
    return {**row, **metrics_of(result, scenario)}
