"""Fit the simulator's collective parameters to measured times (robust, in log time).

The parameter vector is small and chosen from what the data can identify (a
:class:`Knob` each, see :func:`default_knobs`):

- per link class the measured routes cross: ``link_efficiency.<scope>`` for NVLink and
  PCIe, ``transports.<transport>.efficiency`` for network links (InfiniBand, RoCE, EFA,
  TCPX/TCPXO), and ``transports.tcp.socket_GBps`` for NCCL's CPU-bound socket transport
  on a host's NIC;
- ``step_latency_scale.<scope>.<protocol>`` of the widest scope the groups cross: one
  factor on every algorithm's default step latency (keeps NCCL's ratios between them);
- ``base_latency_scale.<protocol>``: one factor on every algorithm's base latency;
- ``protocols.<ll|ll128>.efficiency``: where the tuner switches protocol;
- where NVLink SHARP applies (``nvls`` on one NVSwitch, ``nvls_tree`` across servers with
  one NVSwitch each), that algorithm's efficiency and step latency per scope.

Gloo measurements have no NCCL protocols: their profile restricts every algorithm to
``simple`` and fits only that protocol's knobs. Residuals are ``log(predicted) -
log(measured)`` under scipy's ``least_squares`` with a soft-L1 loss (``f_scale`` 3% in log time), so
a few noisy points (nccl-tests' first sizes, a hiccup) do not steer the fit. Predictions
come from :class:`~calibrate.model.FastModel`, the simulator's own ``auto`` cost model
compiled once, which equals ``simulate_collective(..., network="analytical")``; the fit
quality is then computed with the real simulator on the rounded parameters.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from calibrate.knobs import (
    F_SCALE,
    Knob,
    default_knobs,
    knob_tree,
    knob_values,
    only_protocols,
    select_knobs,
    sig,
)
from calibrate.measurements import Measurements
from calibrate.model import (
    FastModel,
    Point,
    points_from,
    simulate_points,
)
from calibrate.solver import solve
from sim.collectives.params import PROTOCOLS, CollectiveParams, default_params
from sim.errors import CalibrationError, ConfigError
from sim.topology.model import Topology

__all__ = [
    "FitReport",
    "Knob",
    "default_knobs",
    "fit_collectives",
    "fit_points",
    "measured_backend",
    "quality",
    "sig",
]


@dataclass(frozen=True)
class FitReport:
    """What a fit did and how well the result matches (APE in percent).

    ``rows`` holds one dict per point: op, size_bytes, in_place, measured_us,
    predicted_us, algorithm, ape_pct, log_residual.
    """

    parameters: dict[str, float]
    at_bound: tuple[str, ...]
    points: int
    r2_log: float
    mape_pct: float
    median_ape_pct: float
    max_ape_pct: float
    rows: tuple[dict[str, Any], ...] = field(repr=False)
    message: str = ""
    converged: bool = True
    evaluations: int = 0
    starts: int = 1
    runner_up_gap: float = float("inf")

    def summary(self) -> dict[str, Any]:
        """Rounded, YAML-ready fit quality (no per-point rows)."""
        return {
            "points": self.points, "r2_log_time": sig(self.r2_log), "mape_pct": sig(self.mape_pct),
            "median_ape_pct": sig(self.median_ape_pct), "max_ape_pct": sig(self.max_ape_pct),
            "parameters": dict(self.parameters), "at_bound": list(self.at_bound),
            "search": {"converged": self.converged, "starts": self.starts,
                       "runner_up_gap": sig(self.runner_up_gap)
                       if math.isfinite(self.runner_up_gap) else "none"},
        }  # fmt: skip


def quality(
    points: Sequence[Point], params: CollectiveParams
) -> tuple[float, list[dict[str, Any]]]:
    """R² of log time and one row per point, using the real simulator (analytical)."""
    sims = simulate_points(points, params)
    rows = []
    for p, (t, algo) in zip(points, sims, strict=True):
        rows.append({
            "op": p.op, "size_bytes": p.size_bytes, "in_place": p.in_place,
            "measured_us": sig(p.time_s * 1e6), "predicted_us": sig(t * 1e6), "algorithm": algo,
            "ape_pct": sig(abs(t / p.time_s - 1) * 100), "log_residual": sig(math.log(t / p.time_s)),
        })  # fmt: skip
    if not points:  # nothing left to score (a hold-out of one size): no R^2, no warning
        return 1.0, rows
    y = np.log([p.time_s for p in points])
    res = np.array([r["log_residual"] for r in rows])
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum(res**2)) / ss_tot if ss_tot > 0 else 1.0
    return r2, rows


def fit_points(points: Sequence[Point], base: CollectiveParams, params_to_fit: Sequence[str] | None = None,
               *, backend: str = "nccl", seed: int = 0, start_jitter: float = 0.0,
               max_nfev: int | None = None) -> tuple[dict[str, Any], FitReport]:  # fmt: skip
    """Fit :func:`default_knobs` (or the named subset) to ``points``; see :func:`fit_collectives`.

    ``backend`` "gloo" restricts every algorithm to the ``simple`` protocol and fits no
    NCCL channel rates. ``seed`` and ``start_jitter`` change where the search starts (not
    the objective; see :func:`calibrate.solver.solve`); ``max_nfev`` caps each local run.

    Raises
    ------
    CalibrationError
        The search stopped at ``max_nfev`` without meeting its tolerances.
    """
    gloo = backend == "gloo"
    protocols: tuple[str, ...] = ("simple",) if gloo else PROTOCOLS
    fixed = only_protocols(protocols, base)
    if gloo:  # gloo's own algorithms and cost model (calibrate.fit_gloo)
        from calibrate.fit_gloo import GLOO_FIXED, gloo_knobs

        fixed.update(GLOO_FIXED)
    base = base.merged(fixed) if fixed else base
    knobs = gloo_knobs(points, base) if gloo else default_knobs(points, base, protocols)
    knobs = select_knobs(knobs, params_to_fit)
    _check_points(points, len(knobs))
    model = FastModel(points)
    y = np.log([p.time_s for p in points])

    def residuals(u: np.ndarray, tau: float) -> np.ndarray:
        params = base.merged(knob_tree(knobs, knob_values(knobs, u), fixed))
        return np.log(model.predict(params, softness=tau)) - y

    sol = solve(residuals, np.array([k.unit_start for k in knobs]),
                prior_width=np.array([k.prior_unit for k in knobs]), f_scale=F_SCALE, seed=seed,
                start_jitter=start_jitter, max_nfev=max_nfev)  # fmt: skip
    if not sol.converged:
        raise CalibrationError(
            f"fit did not converge: stopped after {sol.nfev} evaluations ({sol.message}); "
            "the parameters would depend on where the search stopped"
        )
    values = [sig(v) for v in knob_values(knobs, sol.u)]
    tree = knob_tree(knobs, values, fixed)
    r2, rows = quality(points, base.merged(tree))
    apes = np.array([r["ape_pct"] for r in rows])
    bound = tuple(k.name for k, u in zip(knobs, sol.u, strict=True) if min(u, 1 - u) < 1e-3)
    report = FitReport(
        parameters={k.name: v for k, v in zip(knobs, values, strict=True)}, at_bound=bound,
        points=len(points), r2_log=r2, mape_pct=float(apes.mean()),
        median_ape_pct=float(np.median(apes)), max_ape_pct=float(apes.max()), rows=tuple(rows),
        message=sol.message, converged=sol.converged, evaluations=sol.nfev, starts=sol.starts,
        runner_up_gap=sol.runner_up_gap,
    )  # fmt: skip
    return tree, report


def measured_backend(measurements: Sequence[Measurements]) -> str:
    """``"gloo"`` when every collective file was measured with gloo, else ``"nccl"``."""
    files = [m for m in measurements if m.kind == "collectives"]
    return "gloo" if files and all(m.meta.backend == "gloo" for m in files) else "nccl"


def _check_points(points: Sequence[Point], n_params: int) -> None:
    if len(points) < n_params + 2:
        raise CalibrationError(
            f"too few points to fit: {len(points)} measured cases for {n_params} parameters "
            f"(need at least {n_params + 2})"
        )


def fit_collectives(
    measurements: Sequence[Measurements],
    topology: Topology,
    *,
    nodes: int | None = None,
    gpus: int | None = None,
    params_to_fit: Sequence[str] | None = None,
    base: CollectiveParams | None = None,
) -> tuple[dict[str, Any], FitReport]:
    """Fit collective parameters so the simulator reproduces measured times.

    Parameters
    ----------
    measurements : sequence of Measurements
        Files of kind ``collectives`` (others are ignored).
    topology : Topology
        The cluster the measurements ran on (line rates; efficiencies are fitted).
    nodes, gpus : int, optional
        Servers and GPUs per server of the measured group, where a file's meta does not say.
    params_to_fit : sequence of str, optional
        A subset of :func:`default_knobs` names; default all of them.
    base : CollectiveParams, optional
        Parameters the fit starts from and leaves unfitted; default the shipped defaults.

    Returns
    -------
    (dict, FitReport)
        The profile's ``collectives:`` override tree, and the fit's quality.

    Raises
    ------
    CalibrationError
        No collective records, NaN or non-positive times, sizes < 1, fewer points than
        parameters + 2, a group that does not fit the topology.

    Examples
    --------
    >>> from calibrate.measurements import CollectiveRecord, Meta
    >>> from sim.topology.presets import load_topology
    >>> steps = lambda s: max(4, -(-s // 2**20))  # gloo's ring messages on 2 ranks
    >>> recs = tuple(CollectiveRecord("all_reduce", s, s // 4, "float32",
    ...              6e-5 + 2.5e-5 * steps(s) + s / 2e9, None, 0.0, 0.0, False, 2, None)
    ...              for s in (2**k for k in range(10, 24)))
    >>> m = Measurements("collectives", Meta("example", "2025-01-01T00:00:00Z", backend="gloo"), recs)
    >>> tree, report = fit_collectives([m], load_topology("cpu-host"))
    >>> report.median_ape_pct < 10
    True
    """
    base = base or default_params()
    if measured_backend(measurements) == "gloo":  # points must see gloo's algorithms
        base = base.merged({"backend": "gloo"})
    points = points_from(measurements, topology, nodes, gpus, base)
    if not points:
        raise CalibrationError(
            "no collective measurements to fit (give files of kind 'collectives')"
        )
    try:
        return fit_points(points, base, params_to_fit, backend=measured_backend(measurements))
    except ConfigError as err:
        raise CalibrationError(f"fit: {err}") from None
