"""Measured torchtitan-shaped steps beside the simulator: ``python -m calibrate.titan_compare``.

Reads the records ``calibrate/titan_step.py`` writes on a lent GPU (the device script's
``titan`` pieces) and sets each beside the simulator's prediction of the same job: Llama 3
of the record's sizes on one GPU of the record's kind (``single-h100``, ``single-h200``;
``cpu-single`` for a CPU dry run), the ``torchtitan`` preset, the record's checkpointing
(``op`` -> ``recompute: selective``, its early stop or not) and attention backend
(``flash`` -> ``fa2``,
``cudnn`` -> ``cudnn``, the others the parametric ``fitted`` model). Printed per record:
tokens/s measured and simulated, and the peak memory PyTorch allocated against the
simulator's memory per GPU. Two records that differ only in their layer count give the
time of one layer by difference, measured and simulated. With ``--trace`` (a record's
Kineto trace) the kernel time of one step per class (GEMM, attention forward and
backward, elementwise, optimizer), measured (:mod:`calibrate.trace_reader`) and simulated
(:func:`calibrate.sim_timeline.simulated_timeline`).

What differs by construction: the simulator's memory is its whole per-GPU estimate
(allocator fragmentation and workspace included), PyTorch's the peak of live tensors.

Run: ``python -m calibrate.titan_compare titan-flash.json titan-flash-8.json
titan-cudnn.json --trace titan-flash_trace.json [--profile NAME|FILE|none]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from calibrate.compare import class_seconds
from calibrate.hardware import catalog_gpu
from calibrate.sim_timeline import simulated_timeline
from calibrate.trace_reader import kernel_table, read_trace
from sim.errors import CalibrationError, ConfigError
from sim.scenario.load import Scenario, scenario_from_dict
from sim.training.step import StepResult, simulate_step

__all__ = ["class_times", "main", "record_scenario"]

_KERNEL = {"flash": "fa2", "cudnn": "cudnn"}
_RECOMPUTE = {"op": "selective", "full": "full", "none": "none"}
_TOPOLOGY = {"H100-SXM": "single-h100", "H200": "single-h200"}


def record_scenario(rec: Mapping[str, Any], profile: str | None = None) -> Scenario:
    """The simulator's scenario of one titan_step record (see the module docstring)."""
    c = rec["config"]
    if str(rec.get("device", "cpu")).startswith("cpu"):
        topology = "cpu-single"
    else:
        gpu = catalog_gpu(str(rec.get("gpu", "")))
        if gpu not in _TOPOLOGY:
            raise CalibrationError(f"titan record: no one-GPU topology for {rec.get('gpu')!r}; "
                                   f"known: {', '.join(_TOPOLOGY)}")  # fmt: skip
        topology = _TOPOLOGY[gpu]
    raw: dict[str, Any] = {
        "model": {"preset": "llama3-8b", "layers": c["layers"], "hidden": c["dim"],
                  "heads": c["heads"], "kv_heads": c["kv_heads"], "ffn_hidden": c["ffn_dim"],
                  "vocab": c["vocab"], "max_seq": c["seq"]},
        "cluster": {"topology": topology},
        "parallel": {"dp": 1, "micro_batch": c["batch"], "recompute": _RECOMPUTE[c["ac"]]},
        "training": {"global_batch": c["batch"], "seq_len": c["seq"], "precision": "bf16",
                     "framework": "torchtitan",
                     "attention_kernel": _KERNEL.get(c["attention"], "fitted"),
                     "flash_attention": c["attention"] != "math"},
        "network": "analytical",
    }  # fmt: skip
    raw["framework"] = {"recompute_early_stop": bool(c.get("early_stop", True))}
    if profile is not None:
        raw["profile"] = profile
    return scenario_from_dict(raw, f"titan-{c['layers']}-{c['attention']}-{c['ac']}")


def class_times(trace: str | Path, scenario: Scenario) -> dict[str, tuple[float, float]]:
    """Kernel seconds of one step per class: (measured, simulated), as ``calibrate
    compare`` sets them (:func:`calibrate.compare.class_seconds`)."""
    rows, _, _ = kernel_table(read_trace(trace))
    return class_seconds(rows, simulated_timeline(scenario))


def _err(measured: float, simulated: float) -> str:
    return f"{simulated / measured - 1:+.1%}" if measured else "-"


def _row(path: str, rec: Mapping[str, Any], res: StepResult) -> str:
    c, gib = rec["config"], 2.0**30
    peak = rec.get("peak_allocated_bytes")
    measured = f"{peak / gib:8.1f}" if peak else f"{'-':>8}"
    mem = f"{measured} {res.memory_per_gpu_bytes / gib:8.1f}"
    return (f"{Path(path).name:<24}{c['layers']:>4} {c['attention']:<6}{c['ac']:<5}"
            f"{rec['tokens_per_s']:>11.0f}{float(res.tokens_per_s):>11.0f}"
            f"{_err(rec['tokens_per_s'], float(res.tokens_per_s)):>8} {mem}")  # fmt: skip


def _per_layer(recs: Sequence[tuple[Mapping[str, Any], StepResult]]) -> list[str]:
    """One layer's seconds by difference, for pairs that differ only in ``layers``."""
    out = []
    for i, (a, ra) in enumerate(recs):
        for b, rb in recs[i + 1 :]:
            ca, cb = dict(a["config"]), dict(b["config"])
            la, lb = ca.pop("layers"), cb.pop("layers")
            if ca == cb and la != lb:
                m = (a["median_s"] - b["median_s"]) / (la - lb)
                s = (ra.step_time_s - rb.step_time_s) / (la - lb)
                out.append(f"one layer ({la} vs {lb} layers, {ca['attention']}, {ca['ac']}): "
                           f"measured {m * 1e3:.2f} ms, simulated {s * 1e3:.2f} ms "
                           f"({_err(m, s)})")  # fmt: skip
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m calibrate.titan_compare")
    ap.add_argument("records", nargs="+", help="titan_step --out files")
    ap.add_argument("--trace", help="the first record's titan_step --trace file")
    ap.add_argument("--profile", help="a profile (name, file or none) instead of the automatic")
    a = ap.parse_args(argv)
    try:
        recs = [(p, json.loads(Path(p).read_text())) for p in a.records]
        scenarios = [record_scenario(r, a.profile) for _, r in recs]
        results = [simulate_step(sc, network="analytical") for sc in scenarios]
        print(f"{'record':<24}{'L':>4} {'attn':<6}{'ac':<5}{'tok/s meas':>11}{'sim':>11}"
              f"{'error':>8} {'GiB meas':>8} {'sim':>8}")  # fmt: skip
        for (path, rec), res in zip(recs, results, strict=True):
            print(_row(path, rec, res))
        for line in _per_layer([(r, res) for (_, r), res in zip(recs, results, strict=True)]):
            print(line)
        if a.trace:
            print(f"kernel seconds per step by class ({Path(a.trace).name}): measured, "
                  "simulated, error")  # fmt: skip
            for cls, (m, s) in class_times(a.trace, scenarios[0]).items():
                print(f"  {cls:<10}{m:>10.4f}{s:>10.4f}{_err(m, s):>9}")
    except (OSError, ValueError, KeyError, CalibrationError, ConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
