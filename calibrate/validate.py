"""The simulator's prediction beside every measurement, with its error.

:func:`validate` runs ``simulate_collective(..., network="analytical")`` (``auto``
algorithm and protocol) with a profile's parameters for each measured collective and
reports the absolute percentage error (APE) per case, then the median, mean and max.
With ``holdout`` it first refits the profile on every other message size (even indices of
each file's sorted sizes) and predicts only the remaining ones: an honest out-of-sample
check of the fitted model, not of one parameter file.

Step measurements (``calibrate step``) are predicted too: the simulator's model of the
exact job (:mod:`calibrate.step_model`) with the profile's compute section, one row each
(``kind: step``) beside the collective rows (``kind: collective``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from calibrate.fit import FitReport, fit_points, measured_backend, quality, sig
from calibrate.measurements import Measurements
from calibrate.model import Point, points_from
from calibrate.step_model import step_rows
from sim.errors import CalibrationError
from sim.profile import Profile
from sim.topology.model import Topology

__all__ = ["Validation", "holdout_split", "validate"]


@dataclass(frozen=True)
class Validation:
    """Rows (one dict per case: op, size_bytes, in_place, measured_us, predicted_us,
    algorithm, ape_pct) and the summary: cases, median/mean/max APE (percent)."""

    rows: tuple[dict[str, Any], ...]
    summary: dict[str, Any]
    refit: FitReport | None = None


def holdout_split(points: Sequence[Point]) -> tuple[list[Point], list[Point]]:
    """(fit, test): sizes at even indices of each (file, op)'s sorted sizes fit; odd ones test.

    >>> holdout_split([])
    ([], [])
    """
    sizes: dict[tuple[str, str], list[int]] = {}
    for p in points:
        sizes.setdefault((p.source, p.op), []).append(p.size_bytes)
    index = {key: {s: i for i, s in enumerate(sorted(set(v)))} for key, v in sizes.items()}
    fit = [p for p in points if index[(p.source, p.op)][p.size_bytes] % 2 == 0]
    test = [p for p in points if index[(p.source, p.op)][p.size_bytes] % 2 == 1]
    return fit, test


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Cases and median/mean/max APE (percent) of ``rows``."""
    apes = np.array([r["ape_pct"] for r in rows], dtype=float)
    if not len(apes):
        raise CalibrationError("nothing to validate: no measured case left after filtering")
    return {
        "cases": len(apes),
        "median_ape_pct": sig(float(np.median(apes))),
        "mean_ape_pct": sig(float(apes.mean())),
        "max_ape_pct": sig(float(apes.max())),
    }


def validate(
    profile: Profile,
    measurements: Sequence[Measurements],
    topology: Topology,
    *,
    nodes: int | None = None,
    gpus: int | None = None,
    holdout: bool = False,
    min_bytes: int = 0,
) -> Validation:
    """Predict every measured collective and step job with ``profile``; report the errors.

    Parameters
    ----------
    profile : Profile
        Parameters to validate (``sim.profile.load_profile``).
    measurements : sequence of Measurements
        Collective and step measurement files (compute files are ignored).
    topology : Topology
        The measured cluster; ``nodes``/``gpus`` (per server) where a file's meta is silent.
        Step jobs run on its one-GPU counterpart (:func:`calibrate.step_model.one_device_topology`).
    holdout : bool
        Refit on even-indexed sizes (starting from ``profile``), predict the odd ones
        (collectives only: a step job is predicted from the profile's compute section).
    min_bytes : int
        Report only collective cases of at least this many bytes (the fit still sees all).

    Returns
    -------
    Validation
        Per-case rows (collectives, then ``kind: step`` rows) and the summary (median,
        mean, max APE in percent over all rows; ``by_kind`` per kind).

    Raises
    ------
    CalibrationError
        Bad measurements, a group that does not fit the topology, nothing left to report.
    """
    base = profile.collectives
    rows: list[dict[str, Any]] = []
    refit = None
    if any(m.kind == "collectives" for m in measurements):
        points = points_from(measurements, topology, nodes, gpus, base)
        if holdout:
            train, points = holdout_split(points)
            tree, refit = fit_points(train, base, None, backend=measured_backend(measurements))
            base = base.merged(tree)
        points = [p for p in points if p.size_bytes >= min_bytes]
        if not points:
            raise CalibrationError(f"no measured case of at least {min_bytes} bytes to validate")
        rows += [{"kind": "collective", **r} for r in quality(points, base)[1]]
    rows += step_rows(measurements, topology, profile.compute)
    if not rows:
        raise CalibrationError("nothing to validate: give collectives or step measurement files")
    summary = summarize(rows)
    kinds = sorted({r["kind"] for r in rows})
    if len(kinds) > 1:
        summary["by_kind"] = {k: summarize([r for r in rows if r["kind"] == k]) for k in kinds}
    return Validation(tuple(rows), summary, refit)


def format_table(v: Validation) -> str:
    """A plain-text table of the rows and the summary line."""
    lines = []
    coll = [r for r in v.rows if r["kind"] == "collective"]
    if coll:
        lines.append(f"# {'op':<14} {'size (B)':>12} {'inplace':>7} {'measured us':>12} "
                     f"{'predicted us':>12} {'APE %':>7}  algorithm")  # fmt: skip
    for r in coll:
        lines.append(
            f"  {r['op']:<14} {r['size_bytes']:>12} {int(r['in_place']):>7} {r['measured_us']:>12.4g} "
            f"{r['predicted_us']:>12.4g} {r['ape_pct']:>7.2f}  {r['algorithm']}"
        )
    steps = [r for r in v.rows if r["kind"] == "step"]
    if steps:
        lines.append(
            f"# {'step job':<36} {'measured us':>12} {'predicted us':>12} {'APE %':>7}  topology"
        )
    for r in steps:
        lines.append(f"  {r['job']:<36} {r['measured_us']:>12.4g} {r['predicted_us']:>12.4g} "
                     f"{r['ape_pct']:>7.2f}  {r['topology']}" + (f"  ({r['note']})" if r["note"] else ""))  # fmt: skip
    s = v.summary
    lines.append(f"# cases {s['cases']}: median APE {s['median_ape_pct']:.3g}%, "
                 f"mean {s['mean_ape_pct']:.3g}%, max {s['max_ape_pct']:.3g}%")  # fmt: skip
    return "\n".join(lines)
