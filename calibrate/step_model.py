"""The simulator's model of a ``calibrate step`` job, and its error on the measured step.

A :class:`~calibrate.measurements.StepRecord` carries the exact GPT it trained (layers,
hidden, heads, ffn_hidden, vocab, seq, batch, dtype; GELU MLP with biases, layernorm,
learned positions, untied head, AdamW). :func:`step_scenario` writes that job as a
scenario (tp = pp = dp = 1, one micro-batch of the whole batch) on the shipped one-device
topology of the measured accelerator (:func:`one_device_topology`: ``single-h100`` for an
H100, ``cpu-single`` for a CPU run), and :func:`step_rows` simulates it with a profile's
compute parameters and reports the absolute percentage error per record.

Approximation: the simulator trains in bf16 or fp8 only; an fp32 job (the CPU default) is
simulated as bf16 and its row says so. Its rates are translated (:func:`fp32_as_bf16`):
GEMMs run at the profile's fp32 ceiling (``fp32_matmul_eff_max`` of the fp32 peak, as a
fraction of the bf16 peak), and elementwise kernels, which the bf16 scenario counts with
2-byte activations where the job moves 4, at half ``mem_eff`` (the cross-entropy too,
although the scenario already counts its logits in fp32: an approximation). Attention
and the optimizer (fp32 states) keep their rates.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from calibrate.fit import sig
from calibrate.measurements import Measurements, StepRecord
from sim.catalog import GpuSpec
from sim.errors import CalibrationError, ClusterSimError
from sim.scenario.load import PRECISIONS, Scenario, scenario_from_dict
from sim.topology.model import Topology
from sim.topology.presets import load_spec, preset_names
from sim.training.compute.params import ComputeParams, compute_params
from sim.training.step import simulate_step
from sim.workload.primitives import ACT_BYTES

__all__ = ["fp32_as_bf16", "one_device_topology", "step_rows", "step_scenario"]

#: Bytes of an fp32 activation element (the bf16 scenario's are ``ACT_BYTES``).
FP32_BYTES = 4
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


def fp32_as_bf16(compute: Mapping[str, Any], gpu: GpuSpec) -> tuple[dict[str, Any], str]:
    """Compute overrides that make a bf16 scenario run an fp32 job's kernels at fp32 rates
    (see the module docstring), and the note its row carries.

    >>> from sim.catalog import gpu_spec
    >>> fp32_as_bf16({"fp32_matmul_eff_max": 0.2, "mem_eff": 0.3}, gpu_spec("CPU-HOST"))[0]
    {'fp32_matmul_eff_max': 0.2, 'mem_eff': 0.15, 'matmul_eff_max': 0.2}
    """
    try:
        p = compute_params(gpu.name, compute)
    except ClusterSimError:
        p = ComputeParams(gpu=gpu.name).overridden(compute)
    out: dict[str, Any] = {**compute, "mem_eff": p.mem_eff * ACT_BYTES / FP32_BYTES}
    note = "float32 job simulated as bf16 with fp32 rates: elementwise kernels at half mem_eff"
    bf16, fp32 = gpu.peak_flops.get("bf16"), gpu.peak_flops.get("fp32")
    if p.fp32_matmul_eff_max > 0 and bf16 and fp32:
        out["matmul_eff_max"] = min(1.0, p.fp32_matmul_eff_max * fp32 / bf16)
        note += ", GEMMs at fp32_matmul_eff_max"
    else:
        note += "; the profile has no fp32 GEMM ceiling, so GEMMs run at the bf16 one"
    return out, note


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
        rates = dict(compute)
        if note and str(r.model.get("dtype")) == "float32":
            rates, note = fp32_as_bf16(compute, topology.gpu)
        try:
            predicted = simulate_step(scenario, network="analytical", compute=rates).step_time_s
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
