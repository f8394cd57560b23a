"""Fit the power-limit GEMM clock model (:mod:`sim.training.compute.power`) to duty-cycle
measurements of one GPU (``calibrate.duty_cycle``), and check it on the traced steps.

The fit, in order, each step closed-form (least squares or a median):

1. **GEMM and idle power at full clock**: the idle sweep's phases that ran at the top SM
   clock (within 1%) draw ``d gemm_w + (1 - d) idle_w`` at GEMM duty ``d``: a line.
2. **Exponent**: each phase that ran below the top clock, with its GEMMs under 99% of
   their burst rate, is at the limit; its GEMMs, at the measured fraction ``r`` of their
   burst rate, then drew ``P = (W - (1 - d) idle_w) / d`` (``W`` the phase's measured mean
   power), so ``exponent = ln(P / gemm_w) / ln r``; the median over the idle sweep's
   throttled phases and every sweep's pure-GEMM phase.
3. **Other kernels' power**: each traced step at the limit (its GEMMs below their burst
   rate, ``r = 1 / in_step_over_burst``) gives ``other_w`` from its time shares
   (tensor-core kernels, other kernels, idle) read off its trace; the median over the
   steps. Attention kernels count with the GEMMs: FlashAttention keeps the tensor cores
   as busy (counted with the other kernels instead, the 1B step's measured draw, 689 W,
   came out 647 W and the leave-one-out errors 0.004-0.021 rather than 0.003-0.013).

A third check reads the draw of two steps measured directly (``power-1b.json``,
``power-8b.json``: ``duty_cycle power``) against the draw the model gives them.

The check predicts each step's ``r`` from its shares with the fitted model (leave one
out for ``other_w``: the step is left out of step 3) and prints predicted against
measured. The memory sweeps, whose other work is an HBM-saturating pass drawing more than
a step's kernels, are a second check: each unthrottled phase gives the memory pass's own
power, and their throttled phases' rates are predicted with it.

``python -m calibrate.power_fit calibrate/measurements/h200-2026-12-04 [--gemm fp8]``
(fp8: the GEMM draw and exponent from the fp8 sweeps, the other kernels' from the bf16
steps).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from sim.errors import CalibrationError, ConfigError
from sim.training.compute.power import PowerModel, average_power_w, gemm_rate

__all__ = [
    "StepShares",
    "check",
    "check_power",
    "check_sweep",
    "fit_power",
    "fitted",
    "load_folder",
    "main",
    "step_shares",
]

#: A phase "ran at the top clock" within this fraction of the highest SM clock seen.
TOP_CLOCK = 0.99


@dataclass(frozen=True)
class StepShares:
    """One traced step: time shares at its measured rates (``gemm``: tensor-core kernels,
    its GEMMs and attention kernels, which draw alike), and its GEMMs' rate ``r``."""

    name: str
    gemm: float
    other: float
    idle: float
    rate: float

    def at_full_clock(self) -> tuple[float, float]:
        """(GEMM share, other share) with the GEMMs at full clock (``gemm * r``)."""
        g = self.gemm * self.rate
        total = g + self.other + self.idle
        return g / total, self.other / total


def step_shares(replay_path: Path, trace_path: Path) -> StepShares:
    """A step's shares from its trace and its rate from its replay (``duty_cycle``)."""
    from calibrate.duty_cycle import step_gemms
    from calibrate.trace_reader import read_trace

    tr = read_trace(trace_path)
    doc = json.loads(replay_path.read_text())
    steps = len(tr.steps)
    span = sum(tr.step_times_s) / steps
    busy = sum(_union(tr, i) for i in range(steps)) / steps
    gemm = sum(sum(v) for v in step_gemms(tr).values()) / steps
    attn = sum(k.dur_s for k in tr.kernels if k.cls in ("attn_fwd", "attn_bwd")) / steps
    tensor = gemm + attn
    return StepShares(replay_path.stem, tensor / span, (busy - tensor) / span, 1 - busy / span,
                      1.0 / float(doc["in_step_over_burst"]))  # fmt: skip


def _union(tr: Any, step: int) -> float:
    """Seconds of step ``step`` during which some kernel ran (overlaps counted once)."""
    spans = sorted((k.start_s, k.start_s + k.dur_s) for k in tr.kernels if k.step == step)
    total, end = 0.0, float("-inf")
    for a, b in spans:
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def _phases(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in doc["phases"] if p.get("power_w") and p.get("sm_mhz")]


def _line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares ``y = x A + (1 - x) B``: (A, B)."""
    if len(xs) < 2:
        raise CalibrationError("power fit: fewer than two unthrottled idle-sweep phases")
    slope, b = np.polyfit(xs, ys, 1)  # y = b + slope x = x (b + slope) + (1 - x) b
    return float(b + slope), float(b)


def fit_power(idle_sweep: dict[str, Any], sweeps: Sequence[dict[str, Any]],
              steps: Sequence[StepShares], cap_w: float) -> PowerModel:  # fmt: skip
    """The model fitted as the module docstring says (``steps`` may be empty: then
    ``other_w`` is the idle power, a lower bound)."""
    phases = _phases(idle_sweep)
    top = max(p["sm_mhz"] for p in phases)
    free = [p for p in phases if p["sm_mhz"] >= TOP_CLOCK * top]
    gemm_w, idle_w = _line([p["duty"] for p in free], [p["power_w"] for p in free])
    exponents = []
    for doc in (idle_sweep, *sweeps):
        for p in _phases(doc):
            pure = p["duty"] > 0.99
            if (
                p["sm_mhz"] < TOP_CLOCK * top
                and p["of_burst"] < TOP_CLOCK
                and (pure or doc is idle_sweep)
            ):
                drawn = (p["power_w"] - (1 - p["duty"]) * idle_w) / p["duty"]
                exponents.append(math.log(drawn / gemm_w) / math.log(p["of_burst"]))
    if not exponents:
        raise CalibrationError("power fit: no phase ran below the top clock (no limit seen)")
    base = PowerModel(cap_w, gemm_w, max(1.0, statistics.median(exponents)), idle_w, idle_w)
    others = [_other_w(base, s) for s in steps if s.rate < 0.995]
    return replace(base, other_w=statistics.median(others)) if others else base


def _other_w(m: PowerModel, s: StepShares) -> float:
    """Other kernels' power that puts step ``s`` exactly at the limit at its rate."""
    drawn = m.gemm_w * s.rate**m.exponent
    return (m.cap_w - s.gemm * drawn - s.idle * m.idle_w) / s.other


def check(model: PowerModel, steps: Sequence[StepShares],
          full: Sequence[StepShares]) -> list[dict[str, Any]]:  # fmt: skip
    """Each step of ``steps`` predicted with ``other_w`` refitted without it (from
    ``full``, the steps the fit used)."""
    rows = []
    for s in steps:
        rest = [_other_w(model, x) for x in full if x.name != s.name and x.rate < 0.995]
        m = replace(model, other_w=statistics.median(rest)) if rest else model
        g, k = s.at_full_clock()
        rows.append({"step": s.name, "tensor_share": round(s.gemm, 3), "other_share": round(s.other, 3),
                     "idle_share": round(s.idle, 3), "measured_r": round(s.rate, 3),
                     "predicted_r": round(gemm_rate(m, g, k), 3)})  # fmt: skip
    return rows


def check_sweep(model: PowerModel, doc: dict[str, Any], top: float) -> list[dict[str, Any]]:
    """A memory sweep's phases predicted with the memory pass's power, itself fitted from
    the sweep's unthrottled phases (the median of ``(W - d gemm_w) / (1 - d)``)."""
    phases = _phases(doc)
    free = [p for p in phases if p["sm_mhz"] >= TOP_CLOCK * top and p["duty"] < 0.99]
    if not free:
        return []
    mem_w = statistics.median((p["power_w"] - p["duty"] * model.gemm_w) / (1 - p["duty"])
                              for p in free)  # fmt: skip
    m = replace(model, other_w=mem_w)
    rows = []
    for p in phases:
        g = p["duty"] * p["of_burst"] / (p["duty"] * p["of_burst"] + 1 - p["duty"])
        rows.append({"duty": p["duty"], "memory_w": round(mem_w, 1),
                     "measured_r": round(p["of_burst"], 3),
                     "predicted_r": round(gemm_rate(m, g, 1 - g), 3)})  # fmt: skip
    return rows


_STEPS = ("replay-1b", "replay-8b", "replay", "replay-70b")


def check_power(model: PowerModel, folder: Path,
                steps: Sequence[StepShares]) -> list[dict[str, Any]]:  # fmt: skip
    """Each step whose draw was read directly (``power-SIZE.json``: ``duty_cycle power``
    around 60 steps) against the draw the model gives it from its traced shares."""
    rows = []
    for s in steps:
        size = s.name.removeprefix("replay").removeprefix("-")
        path = folder / f"power-{size}.json"
        if not size or not path.is_file():
            continue
        doc = json.loads(path.read_text())
        g, k = s.at_full_clock()
        rows.append({"step": s.name, "measured_w": doc["busy_power_w"],
                     "measured_sm_mhz": doc["busy_sm_mhz"],
                     "predicted_w": round(average_power_w(model, g, k), 1)})  # fmt: skip
    return rows


def load_folder(folder: Path, gemm: str = "bf16") -> tuple[dict[str, Any], list[dict[str, Any]],
                                                    list[StepShares]]:  # fmt: skip
    """The idle sweep, the memory sweeps and the traced steps of ``folder`` (the sweeps of
    ``gemm`` GEMMs: ``duty-idle.json`` and ``duty-memory-*.json`` for bf16, ``...-fp8``
    for fp8; the steps are bf16)."""

    def doc(name: str) -> dict[str, Any]:
        p = folder / name
        if not p.is_file():
            raise CalibrationError(f"power fit: {p} is missing (calibrate.duty_cycle writes it)")
        return dict(json.loads(p.read_text()))

    suffix = "-fp8" if gemm == "fp8" else ""
    sweeps = [doc(p.name) for p in sorted(folder.glob("duty-memory-*.json"))
              if p.stem.endswith("-fp8") == (gemm == "fp8")]  # fmt: skip
    steps = [step_shares(folder / f"{n}.json", folder / f"step{n.removeprefix('replay')}"
                         "_trace.json.gz") for n in _STEPS if (folder / f"{n}.json").is_file()]  # fmt: skip
    return doc(f"duty-idle{suffix}.json"), sweeps, steps


def fitted(folder: Path, gemm: str = "bf16", cap_w: float = 700.0) -> PowerModel:
    """The model of ``gemm`` GEMMs fitted to ``folder``. For fp8 the GEMM draw and exponent
    come from the fp8 sweeps and the other kernels' draw from the bf16 fit (the traced
    steps run bf16 GEMMs)."""
    idle, sweeps, steps = load_folder(folder)
    model = fit_power(idle, sweeps, steps, cap_w)
    if gemm == "bf16":
        return model
    idle8, sweeps8, _ = load_folder(folder, "fp8")
    return replace(fit_power(idle8, sweeps8, [], cap_w), other_w=model.other_w)


def main(argv: Sequence[str] | None = None) -> int:
    """Fit, print the model and its checks (JSON lines)."""
    ap = argparse.ArgumentParser(prog="python -m calibrate.power_fit", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    ap.add_argument("folder", help="measurements of calibrate.duty_cycle (sweeps, replays, traces)")
    ap.add_argument("--cap-w", type=float, default=700.0, help="the board's power limit (W)")
    ap.add_argument("--gemm", default="bf16", choices=("bf16", "fp8"), help="the sweeps' GEMMs")
    args = ap.parse_args(argv)
    try:
        folder = Path(args.folder)
        model = fitted(folder, args.gemm, args.cap_w)
        idle, sweeps, steps = load_folder(folder, args.gemm)
    except (CalibrationError, ConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps({"model": {k: round(v, 3) for k, v in asdict(model).items()}}))
    for row in check(model, steps, steps) if args.gemm == "bf16" else []:
        print(json.dumps(row))
    for row in check_power(model, folder, steps) if args.gemm == "bf16" else []:
        print(json.dumps(row))
    top = max(p["sm_mhz"] for p in _phases(idle))
    for doc in sweeps:
        for row in check_sweep(model, doc, top):
            print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
