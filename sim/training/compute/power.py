"""The GEMM clock under a board power limit, from how a step divides its time.

A Hopper GPU at its power limit (700 W for the H100 and H200 SXM) lowers its clock until
the power averaged over the limiter's window is at the limit. That window is long against
a training step's kernels, so what sets the clock is the time-weighted mix of what the GPU
does: tensor-core kernels (GEMMs, and fused attention, which draws alike) the most (more
than the limit at full clock), a step's other kernels (elementwise, norms, the
optimizer) less, and idle time (waiting on the network, pipeline bubbles, host gaps)
least.

With shares of the step's time at full clock ``g`` (tensor-core kernels), ``k`` (other
kernels) and ``i = 1 - g - k`` (idle), tensor-core kernels running at a fraction ``r``
of their full-clock rate draw ``P_g(r) = gemm_w r^exponent``; the other kernels and idle
time are taken as unaffected by the clock (they are memory-, latency- or host-bound). The average power is

    (g/r P_g(r) + k other_w + i idle_w) / (g/r + k + i)

and ``r`` is the largest value in (0, 1] that keeps it at or under ``cap_w``: the root of
``g (gemm_w r^(exponent-1) - cap_w / r) = k (cap_w - other_w) + i (cap_w - idle_w)``,
increasing in ``r`` for ``exponent >= 1`` (found by bisection; for ``exponent`` 2 it is
the positive root of a quadratic). A pure GEMM stream (``g = 1``) runs at
``(cap_w / gemm_w)^(1/exponent)``. ``calibrate.power_fit`` fits the model to the H200's
duty-cycle sweeps and traced steps (``calibrate/measurements/h200-2026-12-04``): the
exponent comes out near 2 (dynamic power ~ f V^2 with the voltage falling with the clock,
and a GEMM's rate rising less than its clock).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.errors import ConfigError

__all__ = ["PowerModel", "average_power_w", "gemm_rate"]

#: Halvings of the bracket [0, 1] (the rate to 1e-15).
_BISECTIONS = 50


@dataclass(frozen=True)
class PowerModel:
    """A GPU's power draw by activity (W) and its board limit.

    Attributes
    ----------
    cap_w : float
        Board power limit (W).
    gemm_w : float
        A GEMM stream's draw at full clock (W; above ``cap_w`` where the limit binds).
    exponent : float
        A GEMM stream's power goes as its rate to this power (no units; at least 1).
    other_w : float
        Draw while the GPU runs a training step's non-GEMM kernels (W).
    idle_w : float
        Draw while it waits (W).
    """

    cap_w: float
    gemm_w: float
    exponent: float
    other_w: float
    idle_w: float

    def __post_init__(self) -> None:
        for name in ("cap_w", "gemm_w", "other_w", "idle_w"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"power model: {name} must be > 0, got {getattr(self, name)!r}")
        if not self.exponent >= 1:
            raise ConfigError(f"power model: exponent must be >= 1, got {self.exponent!r}")


def gemm_rate(model: PowerModel, gemm_share: float, other_share: float) -> float:
    """Fraction of its full-clock rate a GEMM keeps under the power limit (no units).

    Parameters
    ----------
    model : PowerModel
    gemm_share : float
        Tensor-core kernels' (GEMMs' and attention's) share of the step's time at full
        clock, in [0, 1].
    other_share : float
        The other kernels' share; the rest of the step (``1 - gemm_share - other_share``)
        is idle.

    >>> m = PowerModel(cap_w=700, gemm_w=967, exponent=2, other_w=480, idle_w=127)
    >>> round(gemm_rate(m, 1.0, 0.0), 4)  # a pure GEMM stream: sqrt(700 / 967)
    0.8508
    >>> round(gemm_rate(m, 0.55, 0.43), 3), gemm_rate(m, 0.3, 0.6)
    (0.956, 1.0)
    """
    g, k = gemm_share, other_share
    if not (0 <= g <= 1 and 0 <= k <= 1 and g + k <= 1 + 1e-9):
        raise ConfigError(f"power model: shares {g!r} (GEMM) and {k!r} (other) must lie in "
                          "[0, 1] and sum to at most 1")  # fmt: skip
    m = model
    headroom = k * (m.cap_w - m.other_w) + max(0.0, 1.0 - g - k) * (m.cap_w - m.idle_w)

    def excess(r: float) -> float:  # average power over the cap, times the step's time
        return g * (m.gemm_w * r ** (m.exponent - 1) - m.cap_w / r) - headroom

    if g == 0 or excess(1.0) <= 0:
        return 1.0
    lo, hi = 1e-6, 1.0
    for _ in range(_BISECTIONS):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if excess(mid) <= 0 else (lo, mid)
    return lo


def average_power_w(model: PowerModel, gemm_share: float, other_share: float) -> float:
    """The step's time-averaged draw (W) with its GEMMs at :func:`gemm_rate` (shares as
    there: at full clock): ``cap_w`` where the limit binds, less where it does not.

    >>> m = PowerModel(cap_w=700, gemm_w=967, exponent=2, other_w=480, idle_w=127)
    >>> round(average_power_w(m, 0.55, 0.43)), round(average_power_w(m, 0.3, 0.6), 1)
    (700, 590.8)
    """
    r = gemm_rate(model, gemm_share, other_share)
    g, k = gemm_share, other_share
    i = max(0.0, 1.0 - g - k)
    drawn = (g / r) * model.gemm_w * r**model.exponent + k * model.other_w + i * model.idle_w
    return drawn / (g / r + k + i)
