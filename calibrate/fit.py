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

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from calibrate.measurements import Measurements
from calibrate.model import (
    FastModel,
    Point,
    crossed_keys,
    points_from,
    simulate_points,
    step_scopes,
)
from calibrate.solver import solve
from sim.collectives.algorithms import ALGORITHMS, applicable
from sim.collectives.links import LinkKey
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

FITTED = "fitted by clustersim calibrate fit (see provenance)"
#: Soft-L1 scale of the log-time residuals: errors well under 5% count quadratically.
F_SCALE = 0.05
#: In-switch (NVLink SHARP) algorithms: their own efficiency and step latencies are fitted.
IN_SWITCH = ("nvls", "nvls_tree")
#: Algorithms the NCCL latency factors leave alone: in-switch ones (own knobs) and gloo's.
NOT_SCALED = (*IN_SWITCH, "gloo")


def sig(x: float, digits: int = 4) -> float:
    """``x`` rounded to ``digits`` significant digits (a plain float; 0 stays 0).

    >>> sig(0.123456)
    0.1235
    """
    return 0.0 if x == 0 else float(f"{x:.{digits - 1}e}")


@dataclass(frozen=True)
class Knob:
    """One fitted parameter: a name, bounds, a start, and how it writes the override tree."""

    name: str
    lo: float
    hi: float
    start: float
    write: Callable[[dict[str, Any], float], None]
    log10: bool = False  # searched as log10 of the value (factors spanning decades)
    prior: float = 0.05  # prior width in search coordinates (value, or decades if log10)

    def value(self, x: float) -> float:
        """The parameter's value at search coordinate ``x``."""
        return float(10**x) if self.log10 else float(x)

    def at_unit(self, u: float) -> float:
        """The parameter's value at unit-box coordinate ``u`` (0: ``lo``, 1: ``hi``)."""
        return self.value(self.lo + float(u) * (self.hi - self.lo))

    @property
    def prior_unit(self) -> float:
        """The prior's width in the unit box."""
        return self.prior / (self.hi - self.lo)

    @property
    def unit_start(self) -> float:
        """The default's unit-box coordinate (the prior's centre)."""
        return min(1.0, max(0.0, (self.start - self.lo) / (self.hi - self.lo)))


def _put(tree: dict[str, Any], path: Sequence[str], value: object) -> None:
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value


def _link_eff(scope: str, base: CollectiveParams) -> Knob:
    def write(t: dict[str, Any], v: float) -> None:
        _put(t, ("link_efficiency", scope), {"value": v, "source": FITTED})

    return Knob(
        f"link_efficiency.{scope}", 1e-3, 1.0, base.link_efficiency[scope], write, prior=0.025
    )


def _proto_eff(proto: str, base: CollectiveParams) -> Knob:
    def write(t: dict[str, Any], v: float) -> None:
        _put(t, ("protocols", proto), {"efficiency": v, "source": FITTED})

    return Knob(
        f"protocols.{proto}.efficiency",
        0.05,
        1.0,
        base.protocol_efficiency[proto],
        write,
        prior=0.05,
    )


def _switch_eff(algo: str, base: CollectiveParams) -> Knob:
    def write(t: dict[str, Any], v: float) -> None:
        _put(t, ("algorithms", algo, "efficiency"), v)

    return Knob(f"{algo}.efficiency", 0.05, 1.0, base.algorithm(algo).efficiency, write, prior=0.05)


def _switch_step(algo: str, scope: str, base: CollectiveParams) -> Knob:
    def write(t: dict[str, Any], v: float) -> None:
        _put(t, ("algorithms", algo, "step_latency_us", scope, "simple"), v)

    start = max(base.algorithm(algo).step_latency_s[scope]["simple"] * 1e6, 0.01)
    return Knob(
        f"{algo}.step_latency_us.{scope}",
        -2.0,
        math.log10(200.0),
        math.log10(start),
        write,
        log10=True,
        prior=0.15,
    )


def _channel_bw(proto: str, base: CollectiveParams) -> Knob:
    def write(t: dict[str, Any], v: float) -> None:
        _put(t, ("channels", "bandwidth_GBps", proto), v)

    start = math.log10(base.channels.bandwidth_Bps[proto] / 1e9)
    return Knob(f"channels.bandwidth_GBps.{proto}", -2.0, 3.0, start, write, log10=True, prior=0.15)


def _latency_scale(kind: str, scope: str, proto: str, base: CollectiveParams) -> Knob:
    """Factor on every NCCL non-NVLS algorithm's ``base`` latency, ``step`` latency in ``scope``,
    or (``kind`` "latency") both at once."""
    raw = base.raw["algorithms"]

    def write(t: dict[str, Any], v: float) -> None:
        for name, spec in raw.items():
            if name in NOT_SCALED or proto not in spec.get("protocols", PROTOCOLS):
                continue
            if kind in ("base", "latency"):
                old = spec["base_latency_us"][proto]
                _put(t, ("algorithms", name, "base_latency_us", proto), v * old)
            if kind in ("step", "latency"):
                old = spec["step_latency_us"][scope][proto]
                _put(t, ("algorithms", name, "step_latency_us", scope, proto), v * old)

    where = "" if kind == "base" else f"{scope}."
    name = f"{kind}_latency_scale.{where}{proto}".removeprefix("latency_")
    return Knob(name, -3.0, math.log10(50.0), 0.0, write, log10=True, prior=0.15)


def _link_knobs(keys: set[LinkKey], base: CollectiveParams) -> list[Knob]:
    """A knob per link class the measured routes cross: the scope's link efficiency for
    NVLink and PCIe, the transport's efficiency for network links (for NCCL's socket
    transport on a host's NIC, the rate per socket, which is what limits it)."""
    names: dict[str, Knob] = {}
    for scope, transport, _line, at_nic in sorted(keys):
        if scope != "net" or transport not in base.transports:
            names.setdefault(scope, _link_eff(scope, base))
        elif base.transports[transport].socket_Bps < float("inf") and at_nic:
            names.setdefault(f"{transport}.socket", _socket_rate(transport, base))
        else:
            names.setdefault(transport, _transport_eff(transport, base))
    return list(names.values())


def _transport_eff(transport: str, base: CollectiveParams) -> Knob:
    def write(t: dict[str, Any], v: float) -> None:
        _put(t, ("transports", transport, "efficiency"), v)

    start = base.transports[transport].efficiency
    return Knob(f"transports.{transport}.efficiency", 1e-3, 1.0, start, write, prior=0.025)


def _socket_rate(transport: str, base: CollectiveParams) -> Knob:
    def write(t: dict[str, Any], v: float) -> None:
        _put(t, ("transports", transport, "socket_GBps"), v)

    start = math.log10(base.transports[transport].socket_Bps / 1e9)
    return Knob(f"transports.{transport}.socket_GBps", -2.0, 3.0, start, write, log10=True,
                prior=0.3)  # fmt: skip


def default_knobs(
    points: Sequence[Point],
    base: CollectiveParams,
    protocols: Sequence[str],
    channels: bool = True,
) -> list[Knob]:
    """The identifiable parameters for ``points`` (see the module docstring)."""
    setups = list({id(p.setup): p.setup for p in points}.values())
    scopes = sorted({s for setup in setups for s in step_scopes(setup)})
    if not scopes:
        ranks = sorted({setup.n for setup in setups})
        raise CalibrationError(
            f"the measured groups have {ranks} rank(s): no data crosses a link, nothing to "
            "fit; measure 2 or more ranks"
        )
    knobs = _link_knobs({k for setup in setups for k in crossed_keys(setup)}, base)
    widest = max(scopes, key=("nvlink", "pcie", "net").index)
    for algo in (a for a in IN_SWITCH if a in ALGORITHMS):
        if any(applicable(algo, p.op, p.setup.layout) for p in points):
            knobs += [_switch_eff(algo, base)] + [_switch_step(algo, s, base) for s in scopes]
    # One group size fixes every algorithm's step count: base and step latency then trade
    # off one for one, so only their common factor is identifiable.
    sizes = {p.setup.n for p in points}
    for proto in protocols:
        if len(sizes) > 1:
            knobs.append(_latency_scale("step", widest, proto, base))
            knobs.append(_latency_scale("base", widest, proto, base))
        else:
            knobs.append(_latency_scale("latency", widest, proto, base))
    knobs += [_proto_eff(p, base) for p in protocols if p != "simple"]
    if channels:
        knobs += [_channel_bw(p, base) for p in protocols]
    return knobs


def _only_protocols(protocols: Sequence[str], base: CollectiveParams) -> dict[str, Any]:
    """Override tree restricting every algorithm to ``protocols`` (where it has them)."""
    tree: dict[str, Any] = {}
    for name, spec in base.raw["algorithms"].items():
        have = [p for p in spec.get("protocols", PROTOCOLS) if p in protocols]
        if have and tuple(have) != tuple(spec.get("protocols", PROTOCOLS)):
            _put(tree, ("algorithms", name, "protocols"), have)
    return tree


def _tree(
    knobs: Sequence[Knob], values: Sequence[float], fixed: Mapping[str, Any]
) -> dict[str, Any]:
    """``fixed`` with every knob's value (not search coordinate) written in."""
    tree = copy.deepcopy(dict(fixed))
    for k, v in zip(knobs, values, strict=True):
        k.write(tree, float(v))
    return tree


def _values(knobs: Sequence[Knob], u: Sequence[float] | np.ndarray) -> list[float]:
    return [k.at_unit(float(v)) for k, v in zip(knobs, u, strict=True)]


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
    fixed = _only_protocols(protocols, base)
    if gloo:  # gloo's own algorithms and cost model (calibrate.fit_gloo)
        from calibrate.fit_gloo import GLOO_FIXED, gloo_knobs

        fixed.update(GLOO_FIXED)
    base = base.merged(fixed) if fixed else base
    knobs = gloo_knobs(points, base) if gloo else default_knobs(points, base, protocols)
    knobs = _select(knobs, params_to_fit)
    _check_points(points, len(knobs))
    model = FastModel(points)
    y = np.log([p.time_s for p in points])

    def residuals(u: np.ndarray, tau: float) -> np.ndarray:
        params = base.merged(_tree(knobs, _values(knobs, u), fixed))
        return np.log(model.predict(params, softness=tau)) - y

    sol = solve(residuals, np.array([k.unit_start for k in knobs]),
                prior_width=np.array([k.prior_unit for k in knobs]), f_scale=F_SCALE, seed=seed,
                start_jitter=start_jitter, max_nfev=max_nfev)  # fmt: skip
    if not sol.converged:
        raise CalibrationError(
            f"fit did not converge: stopped after {sol.nfev} evaluations ({sol.message}); "
            "the parameters would depend on where the search stopped"
        )
    values = [sig(v) for v in _values(knobs, sol.u)]
    tree = _tree(knobs, values, fixed)
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


def _select(knobs: list[Knob], names: Sequence[str] | None) -> list[Knob]:
    if names is None:
        return knobs
    known = {k.name: k for k in knobs}
    bad = [n for n in names if n not in known]
    if bad:
        raise CalibrationError(
            f"parameter {bad[0]!r} cannot be fitted from this data; allowed: {', '.join(known)}"
        )
    return [known[n] for n in names]


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
