"""The simulator's model of a ``calibrate step`` job, and its error on the measured step.

A :class:`~calibrate.measurements.StepRecord` carries the exact GPT it trained (layers,
hidden, heads, ffn_hidden, vocab, seq, batch, dtype; GELU MLP with biases, layernorm,
learned positions, untied head, AdamW). :func:`step_scenario` writes that job as a
scenario (tp = pp = dp = 1, one micro-batch of the whole batch) on the shipped one-device
topology of the measured accelerator (:func:`one_device_topology`: ``single-h100`` for an
H100, ``cpu-single`` for a CPU run), and :func:`step_rows` simulates it with a profile's
compute parameters and reports the absolute percentage error per record.

Approximation: the simulator trains in bf16 or fp8 only; an fp32 job (the CPU default) is
simulated as bf16 and its row says so.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from calibrate.fit import sig
from calibrate.measurements import Measurements, StepRecord
from sim.errors import CalibrationError, ClusterSimError
from sim.topology.model import Topology
from sim.topology.presets import load_spec, preset_names
from sim.training.scenario import PRECISIONS, Scenario, scenario_from_dict
from sim.training.step import simulate_step

__all__ = ["one_device_topology", "step_rows", "step_scenario"]

_PRECISION = {"bfloat16": "bf16", "float16": "bf16", "float8_e4m3fn": "fp8"}


@cache
def _one_device_presets() -> dict[str, str]:
    """Accelerator -> name of the first shipped preset with exactly one GPU."""
    out: dict[str, str] = {}
    for name in preset_names():
        spec = load_spec(name)
        if not spec.multi_node and spec.gpus_per_node == 1 and spec.nodes == 1:
            out.setdefault(spec.gpu, name)
    return out


def one_device_topology(topology: Topology) -> str:
    """``topology``'s name if it has one GPU, else the shipped one-GPU preset of its
    accelerator.

    Raises
    ------
    CalibrationError
        No shipped one-GPU topology has that accelerator.

    Examples
    --------
    >>> from sim.topology.presets import load_topology
    >>> one_device_topology(load_topology("dgx-h100")), one_device_topology(load_topology("cpu-host"))
    ('single-h100', 'cpu-single')
    """
    if topology.num_gpus == 1:
        return topology.name
    found = _one_device_presets().get(topology.gpu.name)
    if found is None:
        raise CalibrationError(
            f"step jobs run on one device; no shipped one-GPU topology has {topology.gpu.name} "
            "(write one like topologies/single-h100.yaml and pass it as --topology)"
        )
    return found


def _precision(dtype: str) -> tuple[str, str]:
    """Scenario precision for a job's dtype, and a note when it is not the same thing."""
    if dtype in _PRECISION:
        return _PRECISION[dtype], ""
    if "fp32" in PRECISIONS:
        return "fp32", ""
    return (
        "bf16",
        f"{dtype} job simulated as bf16 (the simulator's precisions: {', '.join(PRECISIONS)})",
    )


def step_scenario(record: StepRecord, topology: str) -> tuple[Scenario, str]:
    """The scenario of ``record``'s exact job on one-GPU ``topology``, and a precision note."""
    c = record.model
    try:
        precision, note = _precision(str(c.get("dtype", "float32")))
        raw = {
            "model": {"layers": c["layers"], "hidden": c["hidden"], "heads": c["heads"],
                      "kv_heads": c["heads"], "ffn_hidden": c["ffn_hidden"], "vocab": c["vocab"],
                      "max_seq": c["seq"], "bias": bool(c.get("bias", True)),
                      "tied_embeddings": bool(c.get("tied_embeddings", False)),
                      "norm": c.get("norm", "layernorm"), "position": "learned", "gated_mlp": False},
            "cluster": {"topology": topology},
            "parallel": {"tp": 1, "pp": 1, "micro_batch": c["batch"]},
            "training": {"global_batch": c["batch"], "seq_len": c["seq"], "precision": precision,
                         "flash_attention": True},
            "profile": "none",
        }  # fmt: skip
        return scenario_from_dict(raw, f"step job {c['layers']}L h{c['hidden']}"), note
    except KeyError as err:
        raise CalibrationError(f"step record: model config lacks {err.args[0]!r}") from None
    except ClusterSimError as err:
        raise CalibrationError(f"step record cannot be simulated: {err}") from None


def step_rows(measurements: Sequence[Measurements], topology: Topology,
              compute: Mapping[str, Any]) -> list[dict[str, Any]]:  # fmt: skip
    """One row per step record: measured and predicted step time (us) and their APE (%)."""
    rows: list[dict[str, Any]] = []
    records = [(m, r) for m in measurements if m.kind == "step" for r in m.steps]
    if not records:
        return rows
    name = one_device_topology(topology)
    for m, r in records:
        scenario, note = step_scenario(r, name)
        try:
            predicted = simulate_step(
                scenario, network="analytical", compute=dict(compute)
            ).step_time_s
        except ClusterSimError as err:
            raise CalibrationError(
                f"{m.meta.source}: step job cannot be simulated: {err}"
            ) from None
        c = r.model
        rows.append({
            "kind": "step", "job": f"{c['layers']}L h{c['hidden']} s{c['seq']} b{c['batch']} {c.get('dtype')}",
            "topology": name, "source": os.path.basename(m.meta.source), "measured_us": sig(r.time_s * 1e6),
            "predicted_us": sig(predicted * 1e6), "ape_pct": sig(abs(predicted / r.time_s - 1) * 100),
            "note": note,
        })  # fmt: skip
    return rows
