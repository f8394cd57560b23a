"""Real compute micro-benchmarks on one device: GEMMs, attention, memory-bound ops, copies.

``run_compute`` times transformer-shaped GEMMs (M = batch·sequence tokens, N and K from
the hidden and FFN widths) in bf16 (and fp32 on CPU; fp8 through ``torch._scaled_mm``
where the device supports it), causal scaled-dot-product attention, memory-bound ops
(copy, layernorm, add, GELU) with the bytes they move, pinned host↔device copies (CUDA
only), the launch overhead of a tiny op, and what eager training adds per kernel and per
optimizer step (autograd dispatch, AdamW per tensor and per parameter:
:mod:`calibrate.compute_overhead`). Each case: warm-up calls, then timed calls (CUDA
events on GPU, ``time.perf_counter`` on CPU, or the thread's CPU time); the record keeps
the median (or the minimum: ``statistic``) and the p90−p10 spread, in seconds, with the
FLOP and bytes per call and the achieved rates.

torch is imported lazily, so the module imports without it; running needs the
``calibrate`` extra.
"""

from __future__ import annotations

import platform
import re
import subprocess
import time
from collections.abc import Callable
from functools import partial
from types import ModuleType
from typing import Any

from calibrate.compute_overhead import add_dispatch, add_optimizer
from calibrate.measurements import (
    DTYPE_BYTES,
    ComputeRecord,
    Measurements,
    Meta,
    check_statistic,
    summarize_times,
    utc_now,
)
from sim.errors import CalibrationError

__all__ = [
    "CLOCKS",
    "check_clock",
    "cpu_model",
    "gpu_driver",
    "nccl_version",
    "require_torch",
    "resolve_device",
    "run_compute",
    "set_threads",
    "time_calls",
]

DEVICES = ("cuda", "cpu")


def require_torch() -> ModuleType:
    """Import torch, or say how to get it.

    Raises
    ------
    CalibrationError
        When torch is not installed: ``install clustersim[calibrate]``.
    """
    try:
        import torch
    except ImportError:
        raise CalibrationError(
            "real runs need PyTorch: install clustersim[calibrate] "
            "(pip install 'clustersim[calibrate]')"
        ) from None
    return torch


def resolve_device(device: str) -> ModuleType:
    """Check ``device`` ('cuda' or 'cpu') can run here; return the torch module."""
    if device not in DEVICES:
        raise CalibrationError(f"device {device!r} is unknown; allowed: {', '.join(DEVICES)}")
    torch = require_torch()
    if device == "cuda" and not torch.cuda.is_available():
        raise CalibrationError("no CUDA device; use --device cpu")
    return torch


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo, else ``platform``)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def gpu_driver() -> str | None:
    """The NVIDIA driver version, or None where there is none."""
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as f:
            if m := re.search(r"Kernel Module\s+(\S+)", f.read()):
                return m.group(1)
    except OSError:
        pass
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=True,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None


def nccl_version(torch: ModuleType) -> str | None:
    """NCCL's version as 'major.minor.patch' when torch was built with it, else None."""
    try:
        v = torch.cuda.nccl.version()
    except (AttributeError, RuntimeError):
        return None
    return ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)


#: CPU clocks: ``wall`` (``time.perf_counter``) or ``thread`` (the calling thread's CPU
#: time, ``time.thread_time``: what other processes on a shared host take is left out).
CLOCKS = {"wall": time.perf_counter, "thread": time.thread_time}


def check_clock(clock: str, device: str, threads: int | None) -> Callable[[], float]:
    """The CPU clock named ``clock``; ``thread`` needs ``device`` cpu and ``threads`` 1 (the
    calling thread then does all of torch's work).

    Raises
    ------
    CalibrationError
        An unknown clock, or ``thread`` on CUDA or with other than one thread.
    """
    if clock not in CLOCKS:
        raise CalibrationError(f"--clock {clock!r} is unknown; allowed: {', '.join(CLOCKS)}")
    if clock == "thread" and (device != "cpu" or threads != 1):
        raise CalibrationError(
            "--clock thread needs --device cpu and --threads 1 (one thread's CPU time is "
            "the run's time only when that thread does all the work)"
        )
    return CLOCKS[clock]


def time_calls(
    fn: Callable[[], Any], torch: ModuleType, device: str, iters: int, warmup: int,
    clock: Callable[[], float] = time.perf_counter,
) -> list[float]:  # fmt: skip
    """Seconds per call of ``fn``: ``warmup`` untimed calls, then ``iters`` timed ones
    (CUDA events on a GPU, ``clock`` on a CPU)."""
    for _ in range(warmup):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
        pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                 for _ in range(iters)]  # fmt: skip
        for start, end in pairs:
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return [start.elapsed_time(end) * 1e-3 for start, end in pairs]
    times = []
    for _ in range(iters):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return times


class _Bench:
    """Collects one device's records; each ``add_*`` times one case."""

    def __init__(self, torch: ModuleType, device: str, quick: bool,
                 clock: Callable[[], float] = time.perf_counter,
                 statistic: str = "median") -> None:  # fmt: skip
        self.torch, self.device, self.quick, self.clock = torch, device, quick, clock
        self.statistic = statistic
        # a quick CPU run is cheap: more repeats steady its medians on a shared host
        self.iters, self.warmup = ((9 if device == "cpu" else 5), 2) if quick else (20, 5)
        self.records: list[ComputeRecord] = []
        self.notes: list[str] = []

    def add(self, op: str, shape: tuple[int, ...], dtype: str, flops: float, nbytes: float,
            fn: Callable[[], Any], per_call: int = 1) -> None:  # fmt: skip
        times = time_calls(fn, self.torch, self.device, self.iters, self.warmup, self.clock)
        t, spread = summarize_times([t / per_call for t in times], self.statistic)
        t = max(t, 1e-12)
        self.records.append(ComputeRecord(
            op=op, shape=shape, dtype=dtype, flops=float(flops), bytes=float(nbytes),
            time_s=t, time_spread_s=spread, achieved_flops_per_s=flops / t,
            achieved_Bps=nbytes / t, iters=self.iters, device=self.device,
        ))  # fmt: skip

    def tensor(self, *shape: int, dtype: str = "float32") -> Any:
        return self.torch.randn(*shape, device=self.device, dtype=getattr(self.torch, dtype))


#: Large training GEMMs (M tokens, N, K) on a GPU: GPT-3 175B under TP 8 (h 12288: QKV
#: 4608 x 12288, output 12288 x 1536, FFN 6144 x 12288 and 12288 x 6144) and Llama-2-70B
#: under TP 8 (h 8192, SwiGLU 28672: gate+up 7168 x 8192, down 8192 x 3584), 8192 tokens.
LARGE_GEMMS: tuple[tuple[int, int, int], ...] = (
    (8192, 4608, 12288), (8192, 12288, 1536), (8192, 6144, 12288), (8192, 12288, 6144),
    (8192, 7168, 8192), (8192, 8192, 3584),
)  # fmt: skip


def _gemm_shapes(device: str, quick: bool) -> list[tuple[int, int, int]]:
    """(M, N, K) of a transformer layer's GEMMs: QKV, attention out, FFN up, FFN down, and
    their weight gradients (M = the layer's width, K = the tokens); on a GPU (not quick)
    also :data:`LARGE_GEMMS` and their weight gradients."""
    hiddens: tuple[int, ...]
    tokens: tuple[int, ...]
    if device == "cpu":
        hiddens, tokens = ((128, 256), (512,)) if quick else ((512, 1024), (512, 2048))
    else:
        hiddens, tokens = ((4096,), (4096,)) if quick else ((2048, 4096, 8192), (4096, 16384))
    fwd = [(m, n, k) for h in hiddens for m in tokens
           for n, k in ((3 * h, h), (h, h), (4 * h, h), (h, 4 * h))]  # fmt: skip
    if device != "cpu" and not quick:
        fwd += list(LARGE_GEMMS)
    return fwd + [(k, n, m) for m, n, k in fwd]


def _add_gemms(b: _Bench) -> None:
    dtypes = ("bfloat16",) if b.device == "cuda" else ("float32", "bfloat16")
    for m, n, k in _gemm_shapes(b.device, b.quick):
        for dtype in dtypes:
            x, w = b.tensor(m, k, dtype=dtype), b.tensor(k, n, dtype=dtype)
            nbytes = (m * k + k * n + m * n) * DTYPE_BYTES[dtype]
            b.add("gemm", (m, n, k), dtype, 2.0 * m * n * k, nbytes, partial(b.torch.matmul, x, w))
    _add_fp8_gemm(b)


def _add_fp8_gemm(b: _Bench) -> None:
    """fp8 (e4m3) GEMMs through torch._scaled_mm where it runs; otherwise a note."""
    torch = b.torch
    if b.device == "cpu":  # torch emulates fp8 matmuls on CPU: seconds per call, no signal
        b.notes.append("fp8 GEMM skipped on cpu: torch emulates it there (not a hardware rate)")
        return
    shapes = _gemm_shapes(b.device, b.quick)
    try:
        one = torch.ones((), device=b.device)

        def make(m: int, n: int, k: int) -> Callable[[], Any]:
            x = b.tensor(m, k).to(torch.float8_e4m3fn)
            w = b.tensor(n, k).to(torch.float8_e4m3fn).t()  # column-major, as cuBLASLt wants
            return lambda: torch._scaled_mm(x, w, scale_a=one, scale_b=one,
                                            out_dtype=torch.bfloat16)  # fmt: skip

        make(16, 16, 16)()
    except (AttributeError, RuntimeError, NotImplementedError, TypeError) as err:
        first = str(err).strip().splitlines()[0][:120] if str(err).strip() else type(err).__name__
        b.notes.append(f"fp8 GEMM not supported on {b.device}: {first}")
        return
    for m, n, k in shapes:
        nbytes = m * k + k * n + 2 * m * n
        b.add("gemm", (m, n, k), "float8_e4m3fn", 2.0 * m * n * k, nbytes, make(m, n, k))


#: SDPA backends timed one by one on a GPU (torch.nn.attention.SDPBackend names); the
#: records are ``sdpa_<backend>`` and ``sdpa_<backend>_bwd``. ``sdpa``: torch's own choice.
SDPA_BACKENDS = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION")


def _attention_shapes(device: str, quick: bool) -> list[tuple[int, int, int, int, int]]:
    """(batch, heads, seq, head_dim, causal): on a CPU the small jobs' shapes; on a GPU head
    dim 64 and 128 at 16k tokens of 4096 channels, seq 2k/4k/8k, causal and not."""
    if device == "cpu":
        small = [(4, 4, 128, 32, 1), (2, 4, 256, 64, 1)]
        return small if quick else [*small, (1, 8, 512, 64, 1), (1, 8, 1024, 64, 0)]
    seqs, dims, causal = (
        ((2048, 4096), (128,), (1,)) if quick else ((2048, 4096, 8192), (64, 128), (1, 0))
    )
    return [(16384 // s, 4096 // d, s, d, c) for d in dims for s in seqs for c in causal]


def _sdpa_case(b: _Bench, shape: tuple[int, int, int, int, int], dtype: str,
               backend: str | None) -> tuple[Callable[[], Any], Callable[[], Any]]:  # fmt: skip
    """(forward, backward) calls of one attention shape, under ``backend`` if given."""
    torch = b.torch
    bsz, heads, s, d, causal = shape
    sdpa = torch.nn.functional.scaled_dot_product_attention
    q, k, v = (b.tensor(bsz, heads, s, d, dtype=dtype).requires_grad_() for _ in range(3))

    def pinned() -> Any:
        if backend is None:
            import contextlib

            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel

        return sdpa_kernel(getattr(SDPBackend, backend))

    def fwd() -> Any:
        with pinned(), torch.no_grad():
            return sdpa(q, k, v, is_causal=bool(causal))

    with pinned(), torch.enable_grad():
        out = sdpa(q, k, v, is_causal=bool(causal))
    grad = torch.randn_like(out)

    def bwd() -> Any:
        with pinned():
            return torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)

    return fwd, bwd


def _add_attention(b: _Bench) -> None:
    """SDPA forward and backward. FLOP counted: ``4 b h s^2 d`` forward (x 2.5 backward),
    halved when causal (half the square is masked); bytes: q, k, v, out (+ their gradients)."""
    dtype = "bfloat16" if b.device == "cuda" else "float32"
    backends: list[str | None] = [None]
    if b.device == "cuda" and not b.quick:
        backends += list(SDPA_BACKENDS)
    for backend in backends:
        name = "sdpa" if backend is None else f"sdpa_{backend.split('_')[0].lower()}"
        for shape in _attention_shapes(b.device, b.quick):
            bsz, heads, s, d, causal = shape
            flops = 4.0 * bsz * heads * s * s * d / (2 if causal else 1)
            nbytes = 4 * bsz * heads * s * d * DTYPE_BYTES[dtype]
            try:
                fwd, bwd = _sdpa_case(b, shape, dtype, backend)
                fwd()
                bwd()
            except (RuntimeError, ValueError, AttributeError, ImportError) as err:
                first = (
                    str(err).strip().splitlines()[0][:120]
                    if str(err).strip()
                    else type(err).__name__
                )
                b.notes.append(f"{name} {shape} not run: {first}")
                continue
            b.add(name, shape, dtype, flops, nbytes, fwd)
            b.add(f"{name}_bwd", shape, dtype, 2.5 * flops, 2 * nbytes, bwd)


def _add_memory_ops(b: _Bench) -> None:
    """copy, add, GELU, layernorm, softmax (and RMSNorm where torch has it); bytes = reads +
    writes, FLOP nominal per element (the simulator's counts: GELU 8, norms 5, softmax 5)."""
    torch, fn = b.torch, b.torch.nn.functional
    dtype = "bfloat16" if b.device == "cuda" else "float32"
    e = DTYPE_BYTES[dtype]
    rows, hidden = ((512, 1024) if b.quick else (2048, 2048)) if b.device == "cpu" else (
        (16384, 8192))  # fmt: skip
    n = rows * hidden
    x, y, out = (b.tensor(rows, hidden, dtype=dtype) for _ in range(3))
    weight, bias = b.tensor(hidden, dtype=dtype), b.tensor(hidden, dtype=dtype)
    cases: list[tuple[str, float, float, Callable[[], Any]]] = [
        ("copy", 0.0, 2.0 * n * e, lambda: out.copy_(x)),
        ("add", 1.0 * n, 3.0 * n * e, lambda: torch.add(x, y, out=out)),
        ("gelu", 8.0 * n, 2.0 * n * e, lambda: fn.gelu(x)),
        ("layernorm", 5.0 * n, 2.0 * n * e, lambda: fn.layer_norm(x, (hidden,), weight, bias)),
        ("softmax", 5.0 * n, 2.0 * n * e, lambda: torch.log_softmax(x, dim=-1)),
    ]
    if hasattr(fn, "rms_norm"):
        cases.append(("rmsnorm", 4.0 * n, 2.0 * n * e, lambda: fn.rms_norm(x, (hidden,), weight)))
    for op, flops, nbytes, call in cases:
        b.add(op, (rows, hidden), dtype, flops, nbytes, call)


def _add_host_copies(b: _Bench) -> None:
    """Pinned host↔device copies (CUDA only)."""
    if b.device != "cuda":
        b.notes.append("pinned host<->device copies skipped: cpu run")
        return
    torch = b.torch
    for nbytes in (2**26,) if b.quick else (2**20, 2**26, 2**28):
        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        b.add("h2d", (nbytes,), "uint8", 0.0, nbytes,
              partial(dev.copy_, host, non_blocking=True))  # fmt: skip
        b.add("d2h", (nbytes,), "uint8", 0.0, nbytes,
              partial(host.copy_, dev, non_blocking=True))  # fmt: skip


def _add_launch(b: _Bench) -> None:
    """Launch (CPU: dispatch) overhead: a 1-element add timed in a loop; time per launch."""
    x = b.tensor(1)
    loop = 200 if b.quick else 2000

    def many() -> None:
        for _ in range(loop):
            x.add_(1.0)

    b.add("launch", (1,), "float32", 0.0, 0.0, many, per_call=loop)


def set_threads(torch: ModuleType, threads: int | None) -> None:
    """Let torch use ``threads`` CPU threads (None: leave torch's default).

    Raises
    ------
    CalibrationError
        ``threads`` < 1.
    """
    if threads is None:
        return
    if threads < 1:
        raise CalibrationError(f"--threads {threads}: must be >= 1")
    torch.set_num_threads(threads)


def run_compute(
    device: str = "cpu", quick: bool = False, created: str | None = None,
    threads: int | None = None, clock: str = "wall", statistic: str = "median",
) -> Measurements:  # fmt: skip
    """Time compute kernels on one device.

    Parameters
    ----------
    device : {'cuda', 'cpu'}
        Where to run; 'cuda' uses the current CUDA device.
    quick : bool
        Few small shapes and iterations (a few seconds on CPU).
    created : str, optional
        Fixed ``meta.created`` (UTC ISO-8601).
    threads : int, optional
        CPU threads torch may use (recorded as ``meta.details.cpu_threads``); on a host
        shared with other work, fewer threads than cores give steadier timings.
    clock : {'wall', 'thread'}
        CPU timer (:data:`CLOCKS`, recorded as ``meta.details.clock``): ``thread`` times
        the calling thread's CPU, leaving out what other processes of a shared host take
        (needs ``device='cpu'`` and ``threads=1``).
    statistic : {'median', 'min'}
        What each record's ``time_s`` is of its timed calls
        (:data:`~calibrate.measurements.STATISTICS`, recorded as ``meta.time_statistic``):
        ``min`` on a shared host, where other work only ever adds time.

    Returns
    -------
    Measurements
        Kind ``"compute"``; one :class:`~calibrate.measurements.ComputeRecord` per case
        (op: gemm, sdpa, copy, add, gelu, layernorm, h2d, d2h, launch, dispatch,
        optimizer; the last two from :mod:`calibrate.compute_overhead`).

    Raises
    ------
    CalibrationError
        ``no CUDA device; use --device cpu`` when asked for CUDA without one; torch missing.
    """
    timer = check_clock(clock, device, threads)
    check_statistic(statistic)
    torch = resolve_device(device)
    set_threads(torch, threads)
    torch.manual_seed(0)
    bench = _Bench(torch, device, quick, timer, statistic)
    with torch.no_grad():
        # the dispatch cases three times, at the start, the middle and the end: a host that
        # slows down for a while (a shared VM) slows one block, not the median of three
        for part in (add_dispatch, _add_gemms, _add_attention, add_dispatch, _add_memory_ops,
                     _add_host_copies, _add_launch, add_dispatch, add_optimizer):  # fmt: skip
            part(bench)
    gpu = torch.cuda.get_device_name() if device == "cuda" else None
    meta = Meta(
        source="live run", created=utc_now(created), hosts=(platform.node(),), gpu_model=gpu,
        driver=gpu_driver() if device == "cuda" else None, torch_version=torch.__version__,
        nccl_version=None, world_size=1, nodes=1, gpus_per_node=1 if gpu else None,
        backend=None, time_statistic=statistic, spread="p90-p10", notes=tuple(bench.notes),
        details={"device": device, "cpu_model": cpu_model(), "quick": quick,
                 "cpu_threads": torch.get_num_threads(), "clock": clock},
    )  # fmt: skip
    return Measurements(kind="compute", meta=meta, records=tuple(bench.records))
