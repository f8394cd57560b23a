"""``plan --explain``: why the best layout beats the scenario's own, term by term.

Both are simulated on the same cluster (analytical network). The step times are compared
part by part (compute, exposed TP and DP communication, bubble...), then each setting in
which they differ is put back, one at a time, to the scenario's value on the best
configuration: what that costs is what the best's setting buys (``overlap_tp`` on,
a larger micro-batch, another recompute...). Settings that only make sense together
(the TP/PP/DP/CP/EP shape; the schedule and its virtual stages) are put back together.
One at a time is an attribution, not a decomposition: the parts need not add up to the
difference when settings interact, and the text says so.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from sim.errors import ClusterSimError
from sim.result import StepResult
from sim.scenario.load import Scenario
from sim.studies.plan.recipes import Recipe, own_recipe
from sim.studies.plan.search import Candidate
from sim.studies.plan.space import Layout

__all__ = ["GROUPS", "Attribution", "Explanation", "explain", "render_explanation"]

GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("layout", ("tp", "pp", "dp", "cp", "ep")),
    ("sp", ("sp",)),
    ("zero", ("zero",)),
    ("micro_batch", ("micro_batch",)),
    ("schedule", ("schedule", "virtual_stages")),
    ("recompute", ("recompute",)),
    ("overlap_tp", ("overlap_tp",)),
    ("overlap_dp", ("overlap_dp",)),
    ("finetune", ("finetune",)),
    ("optimizer", ("optimizer",)),
    ("offload", ("offload",)),
)
"""Settings put back together, by name, in the order the explanation lists them."""

_RECIPE_KEYS = ("finetune", "optimizer", "offload")


@dataclass(frozen=True)
class Attribution:
    """One setting in which the best differs from the scenario, and what it buys.

    Attributes
    ----------
    name : str
        The setting (or group), e.g. ``overlap_tp`` or ``layout``.
    yours, best : str
        Its value in the scenario and in the best configuration.
    seconds : float or None
        Step time of the best with this setting put back, minus the best's: what the
        best's setting buys per step (negative: it costs). None when that mix does not run.
    why_not : str
        Why the mix could not be simulated (it does not divide, does not fit...).
    """

    name: str
    yours: str
    best: str
    seconds: float | None
    why_not: str = ""


@dataclass(frozen=True)
class Explanation:
    """The scenario's own step against the best's, and the settings' attributions."""

    yours: StepResult | None
    yours_error: str
    best: StepResult
    attributions: list[Attribution]


def _own_settings(scenario: Scenario, own: StepResult | None) -> dict[str, Any]:
    """The scenario's parallel and training settings, as resolved by its own step."""
    par = dataclasses.asdict(scenario.parallel)
    if own is not None:
        par.update({k: v for k, v in own.plan.items() if k in par})
    return {**par, **own_recipe(scenario).settings()}


def _text(values: dict[str, Any], keys: tuple[str, ...]) -> str:
    return (
        " ".join(f"{k}={values.get(k)}" for k in keys)
        if len(keys) > 1
        else str(values.get(keys[0]))
    )


def _simulate(scenario: Scenario, layout: Layout, recipe: Recipe, cluster: Any) -> StepResult:
    from sim.training.step import simulate_step

    sc = recipe.applied(scenario)
    par = dataclasses.replace(sc.parallel, **layout.settings())
    r = simulate_step(dataclasses.replace(sc, parallel=par, cluster=cluster), "analytical")
    if not r.fits:
        raise ClusterSimError(f"does not fit ({r.memory_per_gpu_bytes / 2**30:.1f} GiB)")
    return r


def explain(scenario: Scenario, best: Candidate) -> Explanation:
    """Compare ``best`` with ``scenario`` as written, on the cluster ``best`` ran on."""
    from sim.studies.plan.cluster import cluster_for
    from sim.training.step import simulate_step

    with cluster_for(scenario, best.result.gpus) as (cluster, _topo, _notes):
        own: StepResult | None = None
        error = ""
        try:
            own = simulate_step(dataclasses.replace(scenario, cluster=cluster), "analytical")
        except ClusterSimError as e:
            error = str(e)
        mine = _own_settings(scenario, own)
        theirs = {**best.layout.settings(), **best.recipe.settings()}
        out = []
        for name, group in GROUPS:
            # sequence parallelism exists only with TP: your TP of 1 takes the SP off too
            keys = (*group, "sp") if name == "layout" and mine.get("tp") == 1 else group
            if all(mine.get(k) == theirs.get(k) for k in keys):
                continue
            back: dict[str, Any] = {k: mine.get(k) for k in keys}
            layout = dataclasses.replace(
                best.layout, **{k: v for k, v in back.items() if k not in _RECIPE_KEYS}
            )
            recipe = dataclasses.replace(
                best.recipe, **{k: v for k, v in back.items() if k in _RECIPE_KEYS}
            )
            try:
                t = _simulate(scenario, layout, recipe, cluster).step_time_s
                out.append(
                    Attribution(
                        name, _text(mine, keys), _text(theirs, keys), t - best.result.step_time_s
                    )
                )
            except ClusterSimError as e:
                out.append(Attribution(name, _text(mine, keys), _text(theirs, keys), None, str(e)))
    return Explanation(own, error, best.result, out)


def _row(name: str, a: float | None, b: float, fmt: str) -> str:
    yours = "-" if a is None else format(a, fmt)
    diff = 0.0 if a is None or abs(b - a) <= 1e-6 * max(abs(a), abs(b)) else b - a
    change = "" if a is None else format(diff, "+" + fmt)
    return f"  {name:<26} {yours:>12} {format(b, fmt):>12} {change:>12}"


def render_explanation(ex: Explanation, scenario_name: str) -> str:
    """The explanation as text: the two steps part by part, then each setting's share."""
    y, b = ex.yours, ex.best
    lines = [f"explain: the best configuration against {scenario_name} as written, on {b.gpus} GPU(s), "
             "analytical network"]  # fmt: skip
    if y is None:
        lines.append(f"  yours does not run here: {ex.yours_error}")
    lines.append(f"  {'':<26} {'yours':>12} {'best':>12} {'change':>12}")
    lines.append(_row("step time (s)", y.step_time_s if y else None, b.step_time_s, ".4g"))
    lines.append(_row("MFU (%)", 100 * y.mfu if y else None, 100 * b.mfu, ".1f"))
    gib = 2.0**30
    mem = y.memory_per_gpu_bytes / gib if y else None
    lines.append(_row("memory per GPU (GiB)", mem, b.memory_per_gpu_bytes / gib, ".1f"))
    for key in dict.fromkeys([*(y.breakdown if y else {}), *b.breakdown]):
        mine, best = (y.breakdown.get(key, 0.0) if y else None), b.breakdown.get(key, 0.0)
        if (mine or 0.0) > 0 or best > 0:
            lines.append(_row(f"{key} (s)", mine, best, ".4g"))
    if ex.attributions:
        lines.append("settings that differ, and what the best's value buys per step (the best with that "
                     "one setting put back to yours; interactions make these not add up exactly):")  # fmt: skip
        for a in ex.attributions:
            what = (
                (f"buys {a.seconds:.4g} s" if a.seconds >= 0 else f"costs {-a.seconds:.4g} s")
                if a.seconds is not None
                else f"cannot be put back alone: {a.why_not}"
            )
            lines.append(f"  {a.name:<12} yours {a.yours:<28} best {a.best:<28} {what}")
    else:
        lines.append("the best configuration is yours")
    return "\n".join(lines)
