"""``calibrate compare``: the simulated step beside the measured one, kernel class by
kernel class and stream by stream.

Measured: a ``calibrate step`` record (the timed steps) and its profiler trace
(:mod:`calibrate.trace_reader`: kernels of one step, on a CPU each kernel group at its
minimum over every profiled instance). Simulated: the same job
(:func:`calibrate.step_model.step_scenario` on the one-device topology, an fp32 job at
fp32 rates) through :func:`calibrate.sim_timeline.simulated_timeline`, the one adapter
that reads the engine. What is set side by side (:func:`compare`):

- the step time: measured (the timed steps' median, or their minimum under
  ``--statistic min``: the step file's ``time_s``) and simulated;
- per kernel class (GEMM, attention forward/backward, elementwise, optimizer): kernel
  time per step, and the error; plus what is not kernels: framework overhead or idle
  gaps (measured: the trace's step less its kernels; simulated: the launch overhead the
  compute model charges per kernel);
- per op: GEMMs by (M, N, K) and attention by (b, heads, s, d), kernel time per step;
- per stream: busy time of the compute and communication streams, their overlap and the
  exposed communication (a one-device job has none; a multi-GPU trace would).

On a CPU the trace's step time is wall-clock time under the profiler (slower than the
timed steps, more so on a shared host): the framework-overhead row is only as good as
that clock, and the report says which clock each number comes from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calibrate.measurements import Measurements, StepRecord
from calibrate.sim_timeline import SimTimeline, simulated_timeline
from calibrate.step_model import fp32_as_bf16, step_scenario
from calibrate.trace_reader import (
    KernelRow,
    Trace,
    gemm_shape,
    kernel_samples,
    kernel_table,
    read_trace,
)
from sim.errors import CalibrationError
from sim.topology.model import Topology

__all__ = ["CLASSES", "Comparison", "class_seconds", "compare", "format_comparison"]

#: Kernel classes compared, in print order (trace classes; the simulator's ``stream``
#: kernels count as elementwise).
CLASSES = ("gemm", "attn_fwd", "attn_bwd", "memory", "optimizer", "comm")
_SIM_CLASS = {"gemm": "gemm", "attn_fwd": "attn_fwd", "attn_bwd": "attn_bwd",
              "memory": "memory", "stream": "memory"}  # fmt: skip


@dataclass(frozen=True)
class Comparison:
    """Everything ``calibrate compare`` prints (seconds per step)."""

    job: str
    measured_step_s: float
    simulated_step_s: float
    trace_step_s: float
    classes: dict[str, tuple[float, float]]
    ops: list[tuple[str, str, float, float, int, int]]
    streams: dict[str, dict[str, float]]
    notes: list[str]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (seconds; errors as simulated / measured - 1)."""

        def err(m: float, s: float) -> float | None:
            return round(s / m - 1, 4) if m > 0 else None

        return {
            "job": self.job,
            "step": {"measured_s": self.measured_step_s, "simulated_s": self.simulated_step_s,
                     "trace_s": self.trace_step_s,
                     "error": err(self.measured_step_s, self.simulated_step_s)},
            "classes": {k: {"measured_s": m, "simulated_s": s, "error": err(m, s)}
                        for k, (m, s) in self.classes.items()},
            "ops": [{"class": c, "shape": k, "measured_s": m, "simulated_s": s,
                     "measured_count": nm, "simulated_count": ns, "error": err(m, s)}
                    for c, k, m, s, nm, ns in self.ops],
            "streams": self.streams,
            "notes": self.notes,
        }  # fmt: skip


def _union(spans: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _length(spans: Sequence[tuple[float, float]]) -> float:
    return sum(b - a for a, b in spans)


def _overlap(x: Sequence[tuple[float, float]], y: Sequence[tuple[float, float]]) -> float:
    total, j = 0.0, 0
    for a, b in x:
        while j < len(y) and y[j][1] <= a:
            j += 1
        k = j
        while k < len(y) and y[k][0] < b:
            total += max(0.0, min(b, y[k][1]) - max(a, y[k][0]))
            k += 1
    return total


def _stream_summary(compute: Sequence[tuple[float, float]],
                    comm: Sequence[tuple[float, float]]) -> dict[str, float]:  # fmt: skip
    c, m = _union(compute), _union(comm)
    both = _overlap(c, m)
    return {"compute_busy_s": _length(c), "comm_busy_s": _length(m), "overlap_s": both,
            "exposed_comm_s": _length(m) - both}  # fmt: skip


def _measured(trace: Trace) -> tuple[list[KernelRow], float, list[str]]:
    rows, step_s, how = kernel_table(trace)
    notes = [f"measured kernels: {how}"]
    if trace.device == "cpu":
        samples = kernel_samples(trace)
        rows = [r if r.cls == "optimizer" else
                KernelRow(r.name, r.op, r.cls, r.stream, min(samples.get((r.op or r.name, r.dims),
                          [r.time_s])), r.start_s, r.dims, r.dtypes, r.concrete)
                for r in rows]  # fmt: skip
        notes.append("CPU trace: each kernel group at its minimum over every profiled "
                     "instance; the trace's step is wall time under the profiler")  # fmt: skip
    return rows, step_s, notes


def _op_key(cls: str, shape: Sequence[float]) -> str | None:
    """GEMMs by (M, N, K) with M <= N (a weight gradient is computed either way round),
    attention by (b, heads, s, d)."""
    if cls == "gemm" and len(shape) >= 3:
        m, n, k = (int(v) for v in shape[:3])
        return f"{min(m, n)}x{max(m, n)}x{k}"
    if cls in ("attn_fwd", "attn_bwd") and len(shape) >= 4:
        return "x".join(str(int(v)) for v in shape[:4])
    return None


def _per_op(
    rows: Sequence[KernelRow], sim: SimTimeline
) -> list[tuple[str, str, float, float, int, int]]:
    acc: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        shape: Sequence[float] = ()
        if r.cls == "gemm":
            shape = gemm_shape(r) or ()
        elif r.cls in ("attn_fwd", "attn_bwd") and r.dims:
            shape = r.dims[0]
        key = _op_key(r.cls, shape)
        if key is not None:
            a = acc.setdefault((r.cls, key), [0.0, 0.0, 0, 0])
            a[0] += r.time_s
            a[2] += 1
    for o in sim.ops:
        cls = _SIM_CLASS.get(o.cls, o.cls)
        key = _op_key(cls, o.shape)
        if key is not None:
            a = acc.setdefault((cls, key), [0.0, 0.0, 0, 0])
            a[1] += (o.time_s - sim.launch_overhead_s) * sim.microbatches
            a[3] += sim.microbatches
    return [(c, k, v[0], v[1], int(v[2]), int(v[3])) for (c, k), v in sorted(acc.items())]


def class_seconds(rows: Sequence[KernelRow], sim: SimTimeline) -> dict[str, tuple[float, float]]:
    """Kernel seconds of one step per class (:data:`CLASSES`), (measured, simulated): the
    trace's kernel rows, and the simulated kernels without their launch overhead (the
    optimizer: its step). Classes neither side has are left out."""
    classes: dict[str, tuple[float, float]] = {}
    for cls in CLASSES:
        measured = sum(r.time_s for r in rows if r.cls == cls)
        simulated = sim.microbatches * sum(o.time_s - sim.launch_overhead_s for o in sim.ops
                                           if _SIM_CLASS.get(o.cls) == cls)  # fmt: skip
        if cls == "optimizer":
            simulated = sim.optimizer_s
        if measured or simulated:
            classes[cls] = (measured, simulated)
    return classes


def compare(step: Measurements, trace_path: str | Path, topology: Topology,
            compute: Mapping[str, Any], reader: str = "json") -> Comparison:  # fmt: skip
    """Measured against simulated, for the first step record of ``step``.

    Raises
    ------
    CalibrationError
        No step record, an unreadable trace, or a job the simulator cannot run.
    """
    from calibrate.step_model import one_device_topology

    if not step.steps:
        raise CalibrationError("calibrate compare needs a calibrate step file (kind step)")
    record: StepRecord = step.steps[0]
    scenario, note = step_scenario(record, one_device_topology(topology))
    rates = dict(compute)
    notes = [note] if note else []
    if note and str(record.model.get("dtype")) == "float32":
        rates, note = fp32_as_bf16(compute, topology.gpu)
        notes = [note]
    sim = simulated_timeline(scenario, rates)
    trace = read_trace(trace_path, reader)
    rows, trace_step, more = _measured(trace)
    notes += more
    classes = class_seconds(rows, sim)
    kernels = sum(r.time_s for r in rows)
    launches = sim.microbatches * len(sim.ops) * sim.launch_overhead_s
    classes["overhead"] = (max(0.0, trace_step - kernels), launches)
    compute_spans = [(r.start_s, r.start_s + r.time_s) for r in rows if r.cls != "comm"]
    comm_spans = [(r.start_s, r.start_s + r.time_s) for r in rows if r.cls == "comm"]
    sim_comm = [s[:2] for name, spans in sim.streams.items() if name != "compute" for s in spans]
    streams = {
        "measured": _stream_summary(compute_spans, comm_spans),
        "simulated": _stream_summary([s[:2] for s in sim.streams.get("compute", [])], sim_comm),
    }
    c = record.model
    job = (
        f"{c.get('layers')}L h{c.get('hidden')} s{c.get('seq')} b{c.get('batch')} {c.get('dtype')}"
    )
    return Comparison(job, record.time_s, sim.step_time_s, trace_step, classes,
                      _per_op(rows, sim), streams, notes)  # fmt: skip


def _ms(x: float) -> str:
    return f"{x * 1e3:10.3f}"


def _err(m: float, s: float) -> str:
    return f"{s / m - 1:>+8.1%}" if m > 0 else f"{'-':>8}"


def format_comparison(c: Comparison) -> str:
    """The text report of :func:`compare`."""
    out = [f"step job {c.job}",
           f"{'':<24} {'measured ms':>11} {'simulated ms':>12} {'error':>8}",
           f"{'step (timed steps)':<24} {_ms(c.measured_step_s)} {_ms(c.simulated_step_s):>12} "
           f"{_err(c.measured_step_s, c.simulated_step_s)}",
           f"{'step (trace, profiled)':<24} {_ms(c.trace_step_s)}", "",
           "per kernel class (kernel time per step; overhead: what is not kernels)"]  # fmt: skip
    for cls, (m, s) in c.classes.items():
        out.append(f"{cls:<24} {_ms(m)} {_ms(s):>12} {_err(m, s)}")
    out += ["", f"per op {'':<17} {'measured ms':>11} {'simulated ms':>12} {'error':>8}  count m/s"]
    for cls, key, m, s, nm, ns in c.ops:
        out.append(f"{cls + ' ' + key:<24} {_ms(m)} {_ms(s):>12} {_err(m, s)}  {nm}/{ns}")
    out += ["", "streams (ms per step)      compute busy   comm busy   overlap   exposed comm"]
    for who, st in c.streams.items():
        out.append(f"{who:<24} {_ms(st['compute_busy_s'])}  {_ms(st['comm_busy_s'])} "
                   f"{_ms(st['overlap_s'])} {_ms(st['exposed_comm_s'])}")  # fmt: skip
    out += [""] + [f"note: {n}" for n in c.notes]
    return "\n".join(out)
