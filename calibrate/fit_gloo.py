"""The parameters a gloo measurement fits: gloo's own cost model, not NCCL's.

Gloo runs one algorithm per op (:mod:`sim.collectives.gloo`); its time on ``n`` ranks is
``base + sum over steps (step latency + wire time) + local bytes / local rate``. So
the knobs are:

- ``link_efficiency.<scope>`` of every scope a step of the measured groups crosses (the
  transport's achieved fraction of the link's line rate);
- ``gloo.base_latency_us``: one call's overhead (torch dispatch, ProcessGroupGloo's work
  queue, wake-ups);
- ``gloo.step_latency_us.<scope>``: one message round of gloo's transport, for the widest
  scope the groups cross;
- ``gloo.local_GBps``: the rate of a rank's local memory work (gloo's reductions, torch's
  copies), fitted when the data hold an op that has any.

Base and step latency are identified separately even on one group size: the ops differ
in step count (all_reduce ``2(n-1)k``, all_gather ``2(n-1)``, broadcast ``ceil(log2 n)``)
and all_reduce's ``k`` grows past ``n`` MiB. Priors are wide (the defaults are stated
orders of magnitude, not measurements).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from calibrate.knobs import FITTED, Knob, link_eff_knob, put_path
from calibrate.model import Point, step_scopes
from sim.collectives.gloo import local_bytes, local_rate_Bps
from sim.collectives.params import CollectiveParams

__all__ = ["GLOO_FIXED", "gloo_knobs"]

#: Written into every gloo profile: the tuner runs gloo's algorithms, with no NCCL protocols.
GLOO_FIXED: dict[str, Any] = {"backend": "gloo"}
_ORDER = ("nvlink", "pcie", "net")


def _log_knob(name: str, path: Sequence[str], start: float, lo: float, hi: float) -> Knob:
    def write(t: dict[str, Any], v: float) -> None:
        put_path(t, path, v)

    return Knob(name, math.log10(lo), math.log10(hi), math.log10(start), write, True, prior=1.0)


def _local_knob(base: CollectiveParams) -> Knob:
    def write(t: dict[str, Any], v: float) -> None:
        put_path(t, ("gloo",), {"local_GBps": v, "source": FITTED})

    start = local_rate_Bps(base) / 1e9
    return Knob("gloo.local_GBps", -1.0, 2.0, math.log10(start), write, True, prior=1.0)


def gloo_knobs(points: Sequence[Point], base: CollectiveParams) -> list[Knob]:
    """The identifiable gloo parameters for ``points`` (see the module docstring)."""
    setups = {id(p.setup): p.setup for p in points}.values()
    scopes = sorted({s for setup in setups for s in step_scopes(setup)}, key=_ORDER.index)
    algo = base.algorithm("gloo")
    widest = scopes[-1]
    knobs = [link_eff_knob(s, base) for s in scopes]
    knobs.append(_log_knob("gloo.base_latency_us", ("algorithms", "gloo", "base_latency_us",
                           "simple"), max(algo.base_latency_s["simple"] * 1e6, 0.1), 0.1, 1e4))  # fmt: skip
    knobs.append(_log_knob(f"gloo.step_latency_us.{widest}", ("algorithms", "gloo",
                           "step_latency_us", widest, "simple"),
                           max(algo.step_latency_s[widest]["simple"] * 1e6, 0.1), 0.1, 1e4))  # fmt: skip
    if any(local_bytes(p.op, p.setup.n, p.size_bytes) > 0 for p in points):
        knobs.append(_local_knob(base))
    return knobs
