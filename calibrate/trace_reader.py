"""Per-kernel times from a PyTorch profiler (Kineto) trace: the Chrome trace-event JSON that
``torch.profiler.profile(...).export_chrome_trace`` writes (``calibrate step --trace``).

What is read (:func:`read_trace`):

- **steps**: the ``user_annotation`` spans named :data:`STEP_ANNOTATION` (the step job
  wraps every profiled step in one), and inside each the optimizer's span
  (``Optimizer.step#...``);
- **kernels**: on a GPU every ``kernel``/``gpu_memcpy``/``gpu_memset`` event, attributed
  to the innermost ``cpu_op`` that launched it (the ``cuda_runtime`` or ``cuda_driver`` launch with the same
  ``correlation``) and to the step whose span holds that launch; on a CPU, where the ops
  run on the calling thread, every *leaf* ``cpu_op`` (no ``cpu_op`` inside it) that does
  work (not a view, reshape or transpose: :data:`METADATA_OPS`);
- each kernel's **class** (:func:`classify`): ``gemm``, ``attn_fwd``, ``attn_bwd``,
  ``optimizer`` (inside the optimizer's span), ``comm`` (NCCL/gloo kernels), else
  ``memory`` (elementwise, norms, reductions, copies); its op's input shapes and dtypes.

:func:`kernel_table` aggregates the steps: when every step ran the same kernels in the
same order (a training step does), each kernel's time is its **minimum over the steps**
(a profiled kernel only ever gets slower when a shared host takes the core away or the
GPU clocks down for a moment, so the minimum is the steadiest estimate of its own time);
otherwise the median step is used as it is. :func:`trace_records` turns the table into
``compute`` measurement records (:class:`~calibrate.measurements.ComputeRecord`) that
:func:`calibrate.fit_compute.fit_compute` fits like micro-benchmarks: GEMMs by (M, N, K),
attention forward and backward by (b, heads, s, d, causal), elementwise kernels with the
bytes their inputs and output move, the optimizer step as (tensors, elements per tensor),
and on a GPU the mean idle gap per kernel of the compute stream (``kernel_gap``).

The reader is the project's own (the standard library's ``json``). Where the optional
HolisticTraceAnalysis package is installed (``pip install 'clustersim[trace]'``),
``read_trace(path, backend="hta")`` reads the events through HTA's parser instead; both
give the same events and so the same numbers (``tests/test_trace_reader.py``).
"""

from __future__ import annotations

import json
import os
import stat
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from calibrate.measurements import DTYPE_BYTES, ComputeRecord, Measurements, Meta
from sim.errors import CalibrationError, ConfigError
from sim.files import load_json, read_bytes, read_text

__all__ = [
    "METADATA_OPS",
    "STEP_ANNOTATION",
    "TRACE_METADATA",
    "Kernel",
    "KernelRow",
    "Trace",
    "classify",
    "gemm_shape",
    "is_chrome_trace",
    "kernel_gap_s",
    "kernel_samples",
    "kernel_table",
    "read_trace",
    "trace_measurements",
    "trace_records",
]

#: The user annotation around each profiled step (``calibrate.stepjob``).
STEP_ANNOTATION = "clustersim_step"
#: Top-level key of the trace's metadata the step job adds (device, CPU threads, torch).
TRACE_METADATA = "clustersim"
#: Ops that only change a tensor's metadata: no kernel (their time is framework overhead).
METADATA_OPS = frozenset(
    f"aten::{n}" for n in (
        "view", "_unsafe_view", "reshape", "_reshape_alias", "t", "transpose", "permute",
        "expand", "as_strided", "slice", "select", "unsqueeze", "squeeze", "detach", "alias",
        "unbind", "split", "split_with_sizes", "chunk", "narrow", "empty", "empty_like",
        "empty_strided", "resize_", "lift_fresh", "contiguous", "numpy_T", "_local_scalar_dense",
        "item", "result_type", "size", "stride", "is_nonzero", "flatten", "unflatten",
        "view_as", "expand_as", "to", "type_as", "zeros", "ones", "full", "scalar_tensor",
    )
)  # fmt: skip
_GEMM = {"aten::mm", "aten::addmm", "aten::_scaled_mm", "aten::bmm", "aten::baddbmm",
         "aten::addmv", "aten::mv"}  # fmt: skip
_DTYPES = {"float": "float32", "double": "float64", "c10::BFloat16": "bfloat16",
           "c10::Half": "float16", "c10::Float8_e4m3fn": "float8_e4m3fn",
           "c10::Float8_e5m2": "float8_e5m2", "long int": "int64", "int": "int32"}  # fmt: skip
#: Attention ops -> index of ``is_causal`` among their inputs (ATen's signatures).
_CAUSAL_AT = {
    "aten::_scaled_dot_product_flash_attention_for_cpu": 4,
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": 7,
    "aten::_scaled_dot_product_flash_attention": 4,
    "aten::_scaled_dot_product_flash_attention_backward": 11,
    "aten::_scaled_dot_product_efficient_attention": 6,
    "aten::_scaled_dot_product_efficient_attention_backward": 11,
    "aten::_scaled_dot_product_cudnn_attention": 6,
    "aten::_scaled_dot_product_cudnn_attention_backward": 14,
}
#: Elementwise ops -> (record op, read+write passes over the first input, FLOP per element:
#: the simulator's nominal counts).
_ELEMENTWISE = {
    "aten::copy_": ("copy", 2, 0.0), "aten::add": ("add", 3, 1.0), "aten::add_": ("add", 3, 1.0),
    "aten::gelu": ("gelu", 2, 8.0), "aten::native_layer_norm": ("layernorm", 2, 5.0),
    "aten::_log_softmax": ("softmax", 2, 5.0), "aten::_softmax": ("softmax", 2, 5.0),
    "aten::_fused_rms_norm": ("rmsnorm", 2, 4.0),
    "aten::gelu_backward": ("gelu_bwd", 3, 16.0),
    "aten::native_layer_norm_backward": ("layernorm_bwd", 3, 10.0),
    "aten::_log_softmax_backward_data": ("softmax_bwd", 3, 10.0),
}  # fmt: skip


@dataclass(frozen=True)
class Kernel:
    """One kernel of one profiled step (seconds; ``stream``: CUDA stream or CPU thread)."""

    step: int
    name: str
    op: str
    cls: str
    start_s: float
    dur_s: float
    stream: str
    dims: tuple[tuple[int, ...], ...] = ()
    dtypes: tuple[str, ...] = ()
    concrete: tuple[str, ...] = ()
    strides: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True)
class Trace:
    """A profiled run: device, per-step spans (s), optimizer spans, kernels in order."""

    device: str
    steps: tuple[tuple[float, float], ...]
    optimizer: tuple[tuple[float, float], ...]
    kernels: tuple[Kernel, ...]
    source: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def step_times_s(self) -> list[float]:
        """Wall time of each profiled step."""
        return [end - start for start, end in self.steps]


@dataclass(frozen=True)
class KernelRow:
    """One kernel position of the step, its time aggregated over the steps (s)."""

    name: str
    op: str
    cls: str
    stream: str
    time_s: float
    start_s: float
    dims: tuple[tuple[int, ...], ...] = ()
    dtypes: tuple[str, ...] = ()
    concrete: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


def is_chrome_trace(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` looks like a Chrome trace-event JSON (begins with an object that
    has ``traceEvents`` near its start); cheap: reads 64 KiB at most. Anything but a
    regular file (a FIFO, a device, a folder) is not one, and is never opened (opening a
    FIFO waits for a writer): the measurement reader refuses it by what it is."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        if str(path).endswith(".gz"):
            import gzip

            with gzip.open(path, "rb") as g:
                head = g.read(65536)
        else:
            with open(path, "rb") as f:
                head = f.read(65536)
    except (OSError, EOFError):
        return False
    return head.lstrip().startswith(b"{") and b'"traceEvents"' in head


def classify(op: str, name: str, in_optimizer: bool) -> str:
    """The class of a kernel from its op (the aten op that ran or launched it) and name.

    >>> classify("aten::addmm", "", False), classify("aten::mul_", "", True)
    ('gemm', 'optimizer')
    >>> classify("", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", False)
    'comm'
    """
    low = f"{op} {name}".lower()
    if "nccl" in low or "gloo" in low or "c10d::" in low:
        return "comm"
    if in_optimizer:
        return "optimizer"
    if op in _GEMM:
        return "gemm"
    if "attention" in low or "fmha" in low or "flash" in low:
        return "attn_bwd" if "backward" in low or "bwd" in low else "attn_fwd"
    if not op and ("gemm" in low or "nvjet" in low or "cutlass" in low or "xmma" in low):
        return "gemm"
    return "memory"


def _document(path: Path) -> dict[str, Any]:
    # PyTorch's profiler writes .json.gz too
    gz = path.suffix == ".gz"
    text = _gunzip(path) if gz else read_text(path, "trace file", max_bytes=1 << 30)
    try:
        doc = load_json(text, str(path))
    except ConfigError as err:  # strict JSON: a 5,000-digit integer, NaN, a duplicate key
        raise CalibrationError(str(err)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise CalibrationError(f"{path}: not a Chrome trace (no traceEvents list)")
    return doc


def _gunzip(path: Path, limit: int = 1 << 30) -> str:
    """A gzipped trace's text, inflated up to ``limit`` bytes (a bigger one is refused);
    the file itself is read by :func:`sim.files.read_bytes` (a FIFO or device is refused
    by what it is, never opened)."""
    import gzip
    import io

    try:
        raw = read_bytes(path, "trace file", max_bytes=limit)
    except ConfigError as err:
        raise CalibrationError(str(err)) from None
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as f:
            data = f.read(limit + 1)
    except (OSError, EOFError) as err:
        raise CalibrationError(f"{path}: not a gzipped trace ({err})") from None
    if len(data) > limit:
        raise CalibrationError(f"{path}: over {limit >> 20} MiB once inflated")
    return data.decode("utf-8", errors="replace")


def _json_events(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]


def _hta_events(path: Path) -> list[dict[str, Any]]:
    """The same events through HolisticTraceAnalysis' parser (optional dependency)."""
    try:
        from hta.common.trace_parser import parse_trace_dataframe
        from hta.configs.parser_config import ParserBackend, ParserConfig
    except ImportError:
        raise CalibrationError(
            "--reader hta needs HolisticTraceAnalysis: pip install 'clustersim[trace]'"
        ) from None
    cfg = ParserConfig(ParserConfig.get_default_args() + ParserConfig.ARGS_INPUT_SHAPE)
    cfg.parser_backend = ParserBackend.JSON
    _, df, symbols = parse_trace_dataframe(str(path), cfg)
    names = symbols.sym_table
    out = []
    for row in df.to_dict("records"):
        e: dict[str, Any] = {"name": names[int(row["name"])], "cat": names[int(row["cat"])],
                             "ts": float(row["ts"]), "dur": float(row["dur"]),
                             "pid": row.get("pid"), "tid": row.get("tid"), "args": {}}  # fmt: skip
        for key, arg in (("correlation", "correlation"), ("stream", "stream"),
                         ("input_dims", "Input Dims"), ("input_type", "Input type"),
                         ("concrete_inputs", "Concrete Inputs")):  # fmt: skip
            value = row.get(key)
            if isinstance(value, str) and value.startswith("["):
                value = json.loads(value.replace("'", '"'))
            if value is not None and value == value and value != -1:
                e["args"][arg] = value
        out.append(e)
    return out


def _numel(d: Sequence[int]) -> int:
    n = 1
    for x in d:
        n *= x
    return n


def _dims(args: Mapping[str, Any]) -> tuple[tuple[int, ...], ...]:
    """Each input's shape; a tensor list (foreach ops) as ``(-tensors, total elements)``."""
    out: list[tuple[int, ...]] = []
    for d in args.get("Input Dims") or []:
        if isinstance(d, list) and d and all(isinstance(x, list) for x in d):
            out.append((-len(d), sum(_numel(x) for x in d)))
        elif isinstance(d, list) and all(isinstance(x, int) for x in d):
            out.append(tuple(d))
        else:
            out.append(())
    return tuple(out)


def _strides(args: Mapping[str, Any]) -> tuple[tuple[int, ...], ...]:
    """Each input's strides where the profiler recorded them (tensor lists and scalars: ())."""
    return tuple(tuple(d) if isinstance(d, list) and all(isinstance(x, int) for x in d) else ()
                 for d in args.get("Input Strides") or [])  # fmt: skip


def _kernel(e: Mapping[str, Any], op: Mapping[str, Any] | None, step: int, opt: bool,
            stream: str) -> Kernel:  # fmt: skip
    owner = op or {}
    args = owner.get("args") or {}
    name = str(owner.get("name", "")) if op is not None else ""
    return Kernel(
        step=step, name=str(e.get("name", "")), op=name,
        cls=classify(name, str(e.get("name", "")), opt), start_s=float(e["ts"]) * 1e-6,
        dur_s=float(e.get("dur", 0.0)) * 1e-6, stream=stream, dims=_dims(args),
        dtypes=tuple(_DTYPES.get(str(t), str(t)) for t in args.get("Input type") or ()),
        concrete=tuple(str(c) for c in args.get("Concrete Inputs") or ()),
        strides=_strides(args),
    )  # fmt: skip


def _within(spans: Sequence[tuple[float, float]], t: float) -> int:
    return next((i for i, (a, b) in enumerate(spans) if a <= t <= b), -1)


def _owners(events: Sequence[Mapping[str, Any]]) -> dict[Any, Mapping[str, Any]]:
    """correlation id -> the innermost cpu_op open when its launch (runtime or driver) ran
    (one pass per thread over the events sorted by start, with a stack of open ops)."""
    by_tid: dict[Any, list[Mapping[str, Any]]] = {}
    for e in events:
        if e.get("cat") in ("cpu_op", *LAUNCHES):
            by_tid.setdefault(e.get("tid"), []).append(e)
    out: dict[Any, Mapping[str, Any]] = {}
    for evs in by_tid.values():
        stack: list[Mapping[str, Any]] = []
        for e in sorted(evs, key=lambda x: (x["ts"], -x.get("dur", 0.0))):
            while stack and stack[-1]["ts"] + stack[-1].get("dur", 0.0) < e["ts"]:
                stack.pop()
            if e.get("cat") == "cpu_op":
                stack.append(e)
            elif stack:
                out[(e.get("args") or {}).get("correlation")] = stack[-1]
    return out


def _self_times(ops: Sequence[Mapping[str, Any]]) -> list[tuple[Mapping[str, Any], float, bool]]:
    """(op, self time in us, has a working child) for the working (non-metadata) cpu_ops of
    one thread: duration less that of the working ops directly inside it."""
    work = sorted((o for o in ops if o.get("name") not in METADATA_OPS),
                  key=lambda o: (o["ts"], -o.get("dur", 0.0)))  # fmt: skip
    inner = [0.0] * len(work)
    parent_of: list[int] = [-1] * len(work)
    stack: list[int] = []
    for i, o in enumerate(work):
        while stack and work[stack[-1]]["ts"] + work[stack[-1]].get("dur", 0.0) < o["ts"]:
            stack.pop()
        if stack:
            parent_of[i] = stack[-1]
            inner[stack[-1]] += o.get("dur", 0.0)
        stack.append(i)
    has_child = [False] * len(work)
    for p in parent_of:
        if p >= 0:
            has_child[p] = True
    return [(o, max(0.0, o.get("dur", 0.0) - inner[i]), has_child[i]) for i, o in enumerate(work)]


def read_trace(path: str | os.PathLike[str], backend: str = "json") -> Trace:
    """Read a profiler trace (see the module docstring).

    Parameters
    ----------
    path : str or Path
        Chrome trace-event JSON of ``calibrate step --trace``.
    backend : {'json', 'hta'}
        The project's reader, or HolisticTraceAnalysis' parser (optional).

    Raises
    ------
    CalibrationError
        Not a trace, no step annotations, an unknown backend, or HTA missing.
    """
    p = Path(path)
    if backend not in ("json", "hta"):
        raise CalibrationError(f"--reader {backend!r} is unknown; allowed: json, hta")
    doc = _document(p)
    events = _json_events(doc) if backend == "json" else _hta_events(p)
    meta = doc.get(TRACE_METADATA)
    metadata = meta if isinstance(meta, dict) else {}
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                   if e.get("cat") == "user_annotation" and e.get("name") == STEP_ANNOTATION)  # fmt: skip
    if not steps:
        raise CalibrationError(f"{p}: no {STEP_ANNOTATION!r} spans: not a calibrate step trace")
    opt = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                 if e.get("cat") == "user_annotation"
                 and str(e.get("name", "")).startswith("Optimizer.step"))  # fmt: skip
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    cpu_ops = [e for e in events if e.get("cat") == "cpu_op"]
    kernels = _gpu_kernels(events, gpu, steps, opt) if gpu else _cpu_kernels(cpu_ops, steps, opt)
    us = [(a * 1e-6, b * 1e-6) for a, b in steps]
    return Trace("cuda" if gpu else "cpu", tuple(us), tuple((a * 1e-6, b * 1e-6) for a, b in opt),
                 tuple(kernels), str(p), metadata)  # fmt: skip


def _cpu_kernels(cpu_ops: Sequence[Mapping[str, Any]], steps: Sequence[tuple[float, float]],
                 opt: Sequence[tuple[float, float]]) -> list[Kernel]:  # fmt: skip
    """Working leaf ops, and the GEMM, attention and elementwise ops that hold others
    (their self time: an addmm that copies its bias first is still the GEMM)."""
    by_tid: dict[Any, list[Mapping[str, Any]]] = {}
    for o in cpu_ops:
        by_tid.setdefault(o.get("tid"), []).append(o)
    named = _GEMM | set(_CAUSAL_AT) | set(_ELEMENTWISE)
    out = []
    for tid, ops in sorted(by_tid.items(), key=lambda kv: str(kv[0])):
        for o, self_us, has_child in _self_times(ops):
            step = _within(steps, o["ts"])
            if step < 0 or (has_child and o.get("name") not in named):
                continue
            k = _kernel(o, o, step, _within(opt, o["ts"]) >= 0, f"thread {tid}")
            out.append(replace(k, dur_s=self_us * 1e-6))
    return sorted(out, key=lambda k: (k.step, k.start_s))


def _gpu_kernels(events: Sequence[Mapping[str, Any]], gpu: Sequence[Mapping[str, Any]],
                 steps: Sequence[tuple[float, float]],
                 opt: Sequence[tuple[float, float]]) -> list[Kernel]:  # fmt: skip
    launches = {(e.get("args") or {}).get("correlation"): e for e in events
                if e.get("cat") in LAUNCHES}  # fmt: skip
    owners = _owners(events)
    out = []
    for k in gpu:
        corr = (k.get("args") or {}).get("correlation")
        launch = launches.get(corr)
        when = launch["ts"] if launch is not None else k["ts"]
        step = _within(steps, when)
        if step < 0:
            continue
        out.append(_kernel(k, owners.get(corr), step, _within(opt, when) >= 0,
                           f"stream {(k.get('args') or {}).get('stream', '?')}"))  # fmt: skip
    return sorted(out, key=lambda k: (k.step, k.start_s))


def kernel_samples(trace: Trace) -> dict[tuple[str, tuple[tuple[int, ...], ...]], list[float]]:
    """Every kernel duration of every step, grouped by (op or kernel name, input shapes)."""
    out: dict[tuple[str, tuple[tuple[int, ...], ...]], list[float]] = {}
    for k in trace.kernels:
        out.setdefault((k.op or k.name, k.dims), []).append(k.dur_s)
    return out


def kernel_table(trace: Trace) -> tuple[list[KernelRow], float, str]:
    """Kernels of one step with their times aggregated over the steps, the step time (s),
    and how they were aggregated (see the module docstring)."""
    per = [[k for k in trace.kernels if k.step == i] for i in range(len(trace.steps))]
    shapes = {tuple((k.name, k.op, k.dims) for k in ks) for ks in per}
    times = trace.step_times_s
    if len(shapes) == 1 and per[0]:
        rows = [KernelRow(k.name, k.op, k.cls, k.stream, min(ks[i].dur_s for ks in per),
                          k.start_s - trace.steps[0][0], k.dims, k.dtypes, k.concrete)
                for i, k in enumerate(per[0])]  # fmt: skip
        return rows, min(times), f"minimum over {len(per)} identical steps"
    mid = sorted(range(len(times)), key=lambda i: times[i])[len(times) // 2]
    rows = [KernelRow(k.name, k.op, k.cls, k.stream, k.dur_s, k.start_s - trace.steps[mid][0],
                      k.dims, k.dtypes, k.concrete) for k in per[mid]]  # fmt: skip
    return rows, times[mid], f"the median step of {len(per)} (their kernels differ)"


def gemm_shape(r: KernelRow) -> tuple[int, int, int] | None:
    """(M, N, K) of a GEMM kernel row from its op's input shapes (mm, addmm, _scaled_mm)."""
    mats = [d for d in r.dims if len(d) == 2]
    if r.op in ("aten::mm", "aten::_scaled_mm") and len(mats) >= 2:
        (m, k), (_, n) = mats[0], mats[1]
        return m, n, k
    if r.op == "aten::addmm" and len(mats) >= 2:
        (m, k), (_, n) = mats[-2], mats[-1]
        return m, n, k
    return None


def _record(op: str, shape: Sequence[int], dtype: str, flops: float, nbytes: float,
            times: Sequence[float], device: str) -> ComputeRecord:  # fmt: skip
    t = max(statistics.median(times), 1e-12)
    spread = max(times) - min(times) if len(times) > 1 else None
    return ComputeRecord(op, tuple(int(x) for x in shape), dtype, float(flops), float(nbytes), t,
                         spread, flops / t, nbytes / t, len(times), device)  # fmt: skip


def _attention_key(r: KernelRow) -> tuple[str, tuple[int, ...]] | None:
    if r.cls not in ("attn_fwd", "attn_bwd") or not r.dims or len(r.dims[0]) != 4:
        return None
    at = _CAUSAL_AT.get(r.op)
    causal = 1 if at is None or at >= len(r.concrete) else int(r.concrete[at] == "True")
    return ("sdpa" if r.cls == "attn_fwd" else "sdpa_bwd"), (*r.dims[0], causal)


#: Host events that launch a kernel: the runtime's (cudaLaunchKernel) and the driver's
#: (cuLaunchKernelEx: cuBLAS's Hopper GEMMs, nvjet, are launched through the driver).
LAUNCHES = ("cuda_runtime", "cuda_driver")

#: Device events that are not an op's kernel: an op's memsets and copies (cuBLAS clears
#: its workspace before a GEMM) would otherwise stand for the op's time.
DEVICE_COPIES = ("Memset", "Memcpy")


def trace_records(rows: Iterable[KernelRow], device: str,
                  samples: Mapping[tuple[str, tuple[tuple[int, ...], ...]], list[float]] | None = None,
                  ) -> list[ComputeRecord]:  # fmt: skip
    """``compute`` records of a step's kernels (see the module docstring); one record per
    distinct (op, shape, dtype). Its time: on a GPU the median over the step's instances;
    on a CPU the minimum over every instance of every step (``samples``, from
    :func:`kernel_samples`): a profiler times a CPU op by the wall clock, and on a shared
    host any op longer than a scheduler slice is sometimes stretched many times over."""
    groups: dict[tuple[str, tuple[int, ...], str], tuple[float, float, list[float]]] = {}
    cpu = device == "cpu"

    def add(op: str, shape: tuple[int, ...], dtype: str, flops: float, nbytes: float,
            t: float) -> None:  # fmt: skip
        groups.setdefault((op, shape, dtype), (flops, nbytes, []))[2].append(t)

    rows = list(rows)
    for r in rows:
        if r.name.startswith(DEVICE_COPIES):  # cuBLAS's workspace memset beside its GEMM
            continue
        if cpu and samples and r.cls != "optimizer":
            r = replace(r, time_s=min(samples.get((r.op or r.name, r.dims), [r.time_s])))
        dtype = r.dtypes[0] if r.dtypes else "float32"
        e = DTYPE_BYTES.get(dtype, 4)
        if r.cls == "gemm" and (mnk := gemm_shape(r)):
            m, n, k = mnk
            add("gemm", mnk, dtype, 2.0 * m * n * k, (m * k + k * n + m * n) * e, r.time_s)
        elif (att := _attention_key(r)) is not None:
            op, (b, h, s, d, causal) = att
            flops = (
                4.0 * b * h * s * s * d / (2 if causal else 1) * (2.5 if op == "sdpa_bwd" else 1)
            )
            add(op, (b, h, s, d, causal), dtype, flops, 4 * b * h * s * d * e, r.time_s)
        elif r.cls == "memory" and r.op in _ELEMENTWISE and r.dims and r.dims[0]:
            name, passes, per = _ELEMENTWISE[r.op]
            n = _numel(r.dims[0])
            add(name, r.dims[0], dtype, per * n, passes * n * e, r.time_s)
    opt = [r for r in rows if r.cls == "optimizer"]
    # AdamW's first-moment update runs once per parameter tensor: lerp_ (for-loop, a
    # tensor) or _foreach_lerp_ (a tensor list, (-tensors, elements))
    lerps = [r.dims[0] for r in opt if r.op in ("aten::lerp_", "aten::_foreach_lerp_") and r.dims]
    tensors = sum(-d[0] if d and d[0] < 0 else 1 for d in lerps)
    n = sum(d[1] if d and d[0] < 0 else _numel(d) for d in lerps)
    if tensors and n:
        add("optimizer", (tensors, round(n / tensors)), "float32", 0.0, 28.0 * n,
            sum(r.time_s for r in opt))  # fmt: skip
    out = [_record(op, shape, dtype, f, b, [min(ts)] if cpu else ts, device)
           for (op, shape, dtype), (f, b, ts) in groups.items()]  # fmt: skip
    return sorted(out, key=lambda r: (r.op, r.shape, r.dtype))


def kernel_gap_s(rows: Sequence[KernelRow], step_s: float) -> float | None:
    """Mean idle time per kernel of the busiest GPU stream over a step (None on a CPU)."""
    streams: dict[str, list[KernelRow]] = {}
    for r in rows:
        if r.stream.startswith("stream"):
            streams.setdefault(r.stream, []).append(r)
    if not streams:
        return None
    main = max(streams.values(), key=lambda ks: sum(k.time_s for k in ks))
    return max(0.0, step_s - sum(k.time_s for k in main)) / len(main)


def trace_measurements(path: str | os.PathLike[str], backend: str = "json") -> Measurements:
    """A ``compute`` measurement file made of a trace's kernels (:func:`trace_records`, and
    on a GPU the compute stream's idle gap per kernel as a ``kernel_gap`` record); its
    ``created`` is the file's modification time, so the same file gives the same bytes."""
    trace = read_trace(path, backend)
    rows, step_s, how = kernel_table(trace)
    records = trace_records(rows, trace.device, kernel_samples(trace))
    gap = kernel_gap_s(rows, step_s)
    if gap is not None:
        n = sum(1 for r in rows if r.stream.startswith("stream"))
        records.append(_record("kernel_gap", (n,), "float32", 0.0, 0.0, [max(gap, 1e-12)],
                               trace.device))  # fmt: skip
    when = datetime.fromtimestamp(os.path.getmtime(path), timezone.utc)
    meta = Meta(
        source=f"trace {Path(path).name}", created=when.strftime("%Y-%m-%dT%H:%M:%SZ"),
        time_statistic="minimum over steps" if how.startswith("minimum") else "median step",
        notes=(f"kernels per step: {how}", f"read with {backend}"),
        details={"device": trace.device, "trace_steps": len(trace.steps), "step_time_s": step_s,
                 **{k: v for k, v in trace.metadata.items() if k == "cpu_threads"}},
    )  # fmt: skip
    return Measurements(kind="compute", meta=meta, records=tuple(records))
