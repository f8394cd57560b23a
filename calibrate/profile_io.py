"""Fit a whole profile from measurement files and write it as ``clustersim.profile/1`` YAML.

:func:`fit_profile` loads the topology, fits the ``collectives:`` section
(:mod:`calibrate.fit`) and the ``compute:`` section (:mod:`calibrate.fit_compute`), and
returns the profile tree: ``hardware`` (what it was measured on, :mod:`calibrate.hardware`),
``error_bars`` (hold-out and step errors, :mod:`calibrate.quality`) and provenance
(sources, measurement metadata, ``created``, fit quality with per-point residuals). It
refuses measurements that contradict the topology and poor fits unless ``force``. Step
files are predicted with the fitted compute section (:mod:`calibrate.step_model`).
:func:`write_profile` writes it and
reads it back with :func:`sim.profile.load_profile`, so a written profile always loads.
With a fixed ``created`` the bytes are deterministic.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from calibrate.fit import fit_collectives
from calibrate.fit_compute import fit_compute
from calibrate.hardware import contradictions, hardware_record
from calibrate.measurements import STATISTICS, Measurements, load_measurements, utc_now
from calibrate.model import points_from
from calibrate.quality import bars, fit_problems, holdout, step_summary
from calibrate.step_model import step_rows
from sim.collectives.params import default_params
from sim.errors import CalibrationError, ClusterSimError
from sim.files import check_output_path, write_atomic
from sim.profile import PROFILE_SCHEMA, load_profile
from sim.topology.model import Topology
from sim.topology.presets import load_spec, load_topology

__all__ = ["dump_profile", "fit_profile", "load_files", "topology_for", "write_profile"]


def load_files(paths: Sequence[str | os.PathLike[str]]) -> list[Measurements]:
    """Read measurement files a fit can use, and profiler traces (``calibrate step
    --trace``) as ``compute`` files of their kernels
    (:func:`calibrate.trace_reader.trace_measurements`); CalibrationError naming the first
    it cannot.

    Besides what :func:`~calibrate.measurements.load_measurements` checks, each file must
    hold records, and collective records must come from 2 or more ranks (one rank moves
    no data: there is nothing to fit).
    """
    from calibrate.trace_reader import is_chrome_trace, trace_measurements

    if not paths:
        raise CalibrationError("no measurement files given")
    files = [trace_measurements(p) if is_chrome_trace(p) else load_measurements(p) for p in paths]
    for path, m in zip(paths, files, strict=True):
        if not m.records:
            raise CalibrationError(f"{path}: no records ({m.kind}); nothing to fit or validate")
        lone = next((i for i, r in enumerate(m.collectives) if r.n_ranks < 2), None)
        if lone is not None:
            raise CalibrationError(
                f"{path}: records[{lone}].n_ranks is 1: a collective on one rank moves no "
                "data; measure 2 or more ranks"
            )
    return files


def topology_for(name: str, measurements: Sequence[Measurements], nodes: int | None = None,
                 gpus: int | None = None) -> Topology:  # fmt: skip
    """Load preset/file ``name``, sized (for multi-node ones) to the measured servers."""
    spec = load_spec(name)
    if not spec.multi_node:
        return load_topology(name)
    need = nodes or 1
    for m in measurements:
        ranks = max((r.n_ranks for r in m.collectives), default=1)
        gpn = m.meta.gpus_per_node or gpus or spec.gpus_per_node
        need = max(need, m.meta.nodes or nodes or math.ceil(ranks / gpn))
    return load_topology(name, nodes=need)


def _meta(m: Measurements) -> dict[str, Any]:
    meta = m.meta
    out = {"source": meta.source, "kind": m.kind, "records": len(m.records), "created": meta.created,
           "backend": meta.backend, "gpu_model": meta.gpu_model, "hosts": list(meta.hosts),
           "world_size": meta.world_size, "nodes": meta.nodes, "gpus_per_node": meta.gpus_per_node,
           "nccl_version": meta.nccl_version, "torch_version": meta.torch_version,
           "driver": meta.driver, "time_statistic": meta.time_statistic}  # fmt: skip
    return {k: v for k, v in out.items() if v not in (None, [], ())}


def fit_profile(
    measurements: Sequence[Measurements],
    topology: Topology,
    *,
    name: str,
    nodes: int | None = None,
    gpus: int | None = None,
    created: str | None = None,
    notes: Sequence[str] = (),
    force: bool = False,
    params: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Fit every section the measurements allow; return the profile tree (see module doc).

    ``params`` limits the collectives fit to those knobs (:func:`calibrate.fit.default_knobs`
    names); the others keep their defaults.

    ``step`` files are predicted with the fitted compute section (provenance and error
    bar). Unless ``force``, refuses measurements that contradict ``topology``'s hardware
    (:func:`calibrate.hardware.contradictions`) and poor fits
    (:func:`calibrate.quality.fit_problems`); with ``force`` the reasons become notes.

    Raises
    ------
    CalibrationError
        Nothing to fit, contradicting hardware, a poor fit, or a section's fit failed
        (too few points, bad values).
    """
    kinds = {m.kind for m in measurements}
    if not kinds & {"collectives", "compute"}:
        raise CalibrationError(
            f"nothing to fit: files of kind {sorted(kinds)}; need collectives or compute "
            "(step files are predicted with the compute fit, so give compute files with them)"
        )
    notes = list(notes) + _mixed_statistics(measurements)
    clash = contradictions(measurements, topology)
    _refuse_or_note(clash, "the measurements contradict the topology", force, notes)
    fit: dict[str, Any] = {}
    profile: dict[str, Any] = {"schema": PROFILE_SCHEMA, "name": name}
    points: list[Any] = []
    if "collectives" in kinds:
        sizes = {r.size_bytes for m in measurements for r in m.collectives}
        if len(sizes) < 2:
            raise CalibrationError(
                f"every collective record has size {min(sizes, default=0):,} B; a fit needs "
                "2 or more sizes to tell latency from bandwidth"
            )
        tree, report = fit_collectives(
            measurements, topology, nodes=nodes, gpus=gpus, params_to_fit=params
        )
        profile["collectives"] = tree
        fit["collectives"] = {**report.summary(), "residuals": _residuals(report.rows)}
        hold = holdout(measurements, topology, nodes, gpus, params)
        if hold:
            fit["collectives"]["holdout"] = hold
        points = points_from(measurements, topology, nodes, gpus, default_params().merged(tree))
    if "compute" in kinds:
        tree, info = fit_compute(measurements, topology.gpu)
        profile["compute"] = tree
        fit["compute"] = info
    if "step" in kinds:
        fit["step"] = step_summary(step_rows(measurements, topology, profile.get("compute", {})))
    _refuse_or_note(fit_problems(fit), "the fit is poor", force, notes)
    profile["hardware"] = hardware_record(measurements, topology, points)
    profile["error_bars"] = bars(fit, measurements)
    gpus_seen = sorted({m.meta.gpu_model for m in measurements if m.meta.gpu_model})
    profile["provenance"] = {
        "source": f"clustersim calibrate fit of {', '.join(m.meta.source for m in measurements)}",
        "sources": [m.meta.source for m in measurements],
        "hardware": ", ".join(gpus_seen) or topology.gpu.name,
        "topology": topology.name,
        "created": utc_now(created),
        "measurements": [_meta(m) for m in measurements],
        "notes": notes,
        "fit": fit,
    }
    order = ("schema", "name", "hardware", "error_bars", "provenance", "collectives", "compute")
    return {k: profile[k] for k in order if k in profile}


def _mixed_statistics(measurements: Sequence[Measurements]) -> list[str]:
    """A note when the live compute and step files summarise their iterations differently
    (``--statistic``; trace files, read as compute files, keep their own wording).

    >>> from calibrate.measurements import Meta
    >>> def m(kind, stat):
    ...     return Measurements(kind, Meta("live run", "2025-01-01T00:00:00Z",
    ...                                    time_statistic=stat), ())
    >>> _mixed_statistics([m("compute", "min"), m("step", "median")])[0][:46]
    'step files give the median of their iterations'
    >>> _mixed_statistics([m("compute", "min"), m("step", "min")])
    []
    """

    def stats(kind: str) -> set[str]:
        return {m.meta.time_statistic for m in measurements
                if m.kind == kind and m.meta.time_statistic in STATISTICS}  # fmt: skip

    step, compute = stats("step"), stats("compute")
    if not step or not compute or step == compute:
        return []
    return [
        f"step files give the {'/'.join(sorted(step))} of their iterations, compute files the "
        f"{'/'.join(sorted(compute))}: the step error mixes two estimators (give calibrate "
        "compute and step the same --statistic)"
    ]


def _refuse_or_note(problems: Sequence[str], what: str, force: bool, notes: list[str]) -> None:
    """Raise naming ``problems`` (none written), or with ``force`` keep them as notes."""
    if not problems:
        return
    if not force:
        raise CalibrationError(
            f"{what}: {'; '.join(problems)}; nothing written (--force writes it anyway)"
        )
    notes += [f"written with --force although {what}: {p}" for p in problems]


_COLUMNS = ("op", "size_bytes", "in_place", "measured_us", "predicted_us", "ape_pct", "algorithm")


def _residuals(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per-point rows as a compact table (one flow-style list per point)."""
    return {"columns": list(_COLUMNS), "rows": [[r[c] for c in _COLUMNS] for r in rows]}


def dump_profile(profile: dict[str, Any], schema_ref: str | None = None) -> str:
    """Deterministic YAML text of a profile tree; ``schema_ref`` (a path or URL to
    ``profile.schema.json``) becomes a ``yaml-language-server`` first line for editors."""
    head = f"# {profile.get('name', 'profile')}: written by clustersim calibrate fit; do not edit by hand.\n"
    if schema_ref:
        head = f"# yaml-language-server: $schema={schema_ref}\n" + head
    return head + yaml.safe_dump(profile, sort_keys=False, default_flow_style=None, width=100)


def _schema_ref(out: Path) -> str:
    """The installed profile schema, relative to the folder ``out`` is written to."""
    schema = Path(str(resources.files("sim.schemas").joinpath("profile.schema.json")))
    return Path(os.path.relpath(schema.resolve(), out.resolve().parent)).as_posix()


def write_profile(profile: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write ``profile`` to ``path`` and check that ``load_profile`` reads it back."""
    out = check_output_path(path, "--out")
    text = dump_profile(profile, _schema_ref(out))
    # Check the text loads before it replaces anything: a sibling temporary .yaml file.
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name[:200]}-", suffix=".yaml")
    os.close(fd)
    try:
        write_atomic(tmp, text, "--out")
        load_profile(tmp)
    except ClusterSimError as err:
        raise CalibrationError(
            f"{out}: the fitted profile does not load ({err}); not written"
        ) from None
    finally:
        Path(tmp).unlink(missing_ok=True)
    return write_atomic(out, text, "--out")
