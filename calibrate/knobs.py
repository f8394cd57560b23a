"""The knobs ``calibrate fit`` adjusts: one per parameter the measurements can identify.

A :class:`Knob` names a parameter of :class:`~sim.collectives.params.CollectiveParams`
(a path in its tree), its bounds and prior; :func:`default_knobs` chooses them from the
link classes, scopes and protocols the measured groups use (see :mod:`calibrate.fit`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from calibrate.points import Point, crossed_keys, step_scopes
from sim.collectives.algorithms import ALGORITHMS, applicable
from sim.collectives.links import LinkKey
from sim.collectives.params import PROTOCOLS, CollectiveParams
from sim.errors import CalibrationError

__all__ = [
    "FITTED",
    "F_SCALE",
    "IN_SWITCH",
    "NOT_SCALED",
    "Knob",
    "default_knobs",
    "knob_tree",
    "knob_values",
    "link_eff_knob",
    "only_protocols",
    "put_path",
    "select_knobs",
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


def put_path(tree: dict[str, Any], path: Sequence[str], value: object) -> None:
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value


def link_eff_knob(scope: str, base: CollectiveParams) -> Knob:
    def write(t: dict[str, Any], v: float) -> None:
        put_path(t, ("link_efficiency", scope), {"value": v, "source": FITTED})

    return Knob(
        f"link_efficiency.{scope}", 1e-3, 1.0, base.link_efficiency[scope], write, prior=0.025
    )


def _proto_eff(proto: str, base: CollectiveParams) -> Knob:
    def write(t: dict[str, Any], v: float) -> None:
        put_path(t, ("protocols", proto), {"efficiency": v, "source": FITTED})

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
        put_path(t, ("algorithms", algo, "efficiency"), v)

    return Knob(f"{algo}.efficiency", 0.05, 1.0, base.algorithm(algo).efficiency, write, prior=0.05)


def _switch_step(algo: str, scope: str, base: CollectiveParams) -> Knob:
    def write(t: dict[str, Any], v: float) -> None:
        put_path(t, ("algorithms", algo, "step_latency_us", scope, "simple"), v)

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
        put_path(t, ("channels", "bandwidth_GBps", proto), v)

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
                put_path(t, ("algorithms", name, "base_latency_us", proto), v * old)
            if kind in ("step", "latency"):
                old = spec["step_latency_us"][scope][proto]
                put_path(t, ("algorithms", name, "step_latency_us", scope, proto), v * old)

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
            names.setdefault(scope, link_eff_knob(scope, base))
        elif base.transports[transport].socket_Bps < float("inf") and at_nic:
            names.setdefault(f"{transport}.socket", _socket_rate(transport, base))
        else:
            names.setdefault(transport, _transport_eff(transport, base))
    return list(names.values())


def _transport_eff(transport: str, base: CollectiveParams) -> Knob:
    def write(t: dict[str, Any], v: float) -> None:
        put_path(t, ("transports", transport, "efficiency"), v)

    start = base.transports[transport].efficiency
    return Knob(f"transports.{transport}.efficiency", 1e-3, 1.0, start, write, prior=0.025)


def _socket_rate(transport: str, base: CollectiveParams) -> Knob:
    def write(t: dict[str, Any], v: float) -> None:
        put_path(t, ("transports", transport, "socket_GBps"), v)

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


def only_protocols(protocols: Sequence[str], base: CollectiveParams) -> dict[str, Any]:
    """Override tree restricting every algorithm to ``protocols`` (where it has them)."""
    tree: dict[str, Any] = {}
    for name, spec in base.raw["algorithms"].items():
        have = [p for p in spec.get("protocols", PROTOCOLS) if p in protocols]
        if have and tuple(have) != tuple(spec.get("protocols", PROTOCOLS)):
            put_path(tree, ("algorithms", name, "protocols"), have)
    return tree


def knob_tree(
    knobs: Sequence[Knob], values: Sequence[float], fixed: Mapping[str, Any]
) -> dict[str, Any]:
    """``fixed`` with every knob's value (not search coordinate) written in."""
    tree = copy.deepcopy(dict(fixed))
    for k, v in zip(knobs, values, strict=True):
        k.write(tree, float(v))
    return tree


def knob_values(knobs: Sequence[Knob], u: Sequence[float] | np.ndarray) -> list[float]:
    return [k.at_unit(float(v)) for k, v in zip(knobs, u, strict=True)]


def select_knobs(knobs: list[Knob], names: Sequence[str] | None) -> list[Knob]:
    if names is None:
        return knobs
    known = {k.name: k for k in knobs}
    bad = [n for n in names if n not in known]
    if bad:
        raise CalibrationError(
            f"parameter {bad[0]!r} cannot be fitted from this data; allowed: {', '.join(known)}"
        )
    return [known[n] for n in names]
