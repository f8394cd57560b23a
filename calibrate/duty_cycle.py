"""The GEMM rate against the GEMM duty cycle: how much of its burst rate a GEMM keeps when
the GPU also runs memory-bound kernels. Under a power limit the clock a GEMM runs at
depends on what else the chip does: a pure GEMM stream pins the card at its limit, and
memory-bound phases between GEMMs lower the average power, so the clock can stay higher.

Two measurements, each written as one JSON document:

``sweep``
    Back-to-back cycles of one square GEMM (``n``^3; bf16 on a GPU) and ``k`` passes of a
    memory-bound kernel (an elementwise multiply over a buffer sized so that one pass takes
    about an eighth of the GEMM's burst time), for each target duty ``d`` (``k = round(8 (1
    - d) / d)``), ``seconds`` each after a pause. CUDA events around each GEMM give its
    time; the second half of each phase is kept (the clock settles within the first).
    Timestamped ``nvidia-smi`` samples (read-only) give the SM clock and the power over the
    same half.
``replay``
    The GEMMs of a profiled step (``calibrate step --trace``): each distinct (op, input
    shapes, strides, dtype) is re-run alone with the step's own layouts, ``iters`` times
    back to back after a pause. Its *burst* time is the median of iterations 3-12, its
    *stream* time the median of the last quarter; the *in-step* time is the median of the
    step's own kernels of that GEMM. The step's duty cycle is its GEMM kernels' time over
    its step time.

``power``
    A command run while ``nvidia-smi`` samples the GPU: the median draw and SM clock of the
    samples at work (a traced step's power, to check the model that the sweeps fit).

The ratio in-step / burst at a step's duty cycle is what a simulator's GEMM ceiling (a
burst measurement) must be multiplied by inside that step. On a CPU (the device script's
dry run) GEMMs are fp32, times come from the host clock and ``nvidia-smi`` is absent.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from calibrate.clocks import SmiSampler, command_power
from calibrate.compute import resolve_device
from sim.errors import CalibrationError, ConfigError

__all__ = [
    "DUTIES",
    "GEMM_DTYPES",
    "OTHERS",
    "command_power",
    "cycles_for",
    "main",
    "replay",
    "step_gemms",
    "sweep",
]

#: Target GEMM duty cycles of the sweep (GEMM time over wall time).
DUTIES = (1.0, 0.8, 0.6, 0.4, 0.25, 0.15)
#: GEMM operand types of the sweep.
GEMM_DTYPES = ("bf16", "fp8")
#: Passes of the memory kernel per GEMM burst time (the sweep's memory kernel takes 1/8).
_SLICES = 8


def cycles_for(duty: float) -> int:
    """Memory-kernel passes per GEMM for a target ``duty`` (each 1/8 of a GEMM).

    >>> [cycles_for(d) for d in (1.0, 0.5, 0.2)]
    [0, 8, 32]
    """
    if not 0 < duty <= 1:
        raise CalibrationError(f"duty {duty!r} must be in (0, 1]")
    return round(_SLICES * (1 - duty) / duty)


class _Timer:
    """Per-call times of a function on ``device``: CUDA events, or the host clock on a CPU."""

    def __init__(self, torch: Any, device: str) -> None:
        self.torch, self.cuda = torch, device == "cuda"
        self.pending: list[tuple[Any, Any]] = []
        self.host: list[tuple[float, float]] = []

    def call(self, fn: Callable[[], Any]) -> None:
        if self.cuda:
            e0, e1 = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
            e0.record()
            fn()
            e1.record()
            self.pending.append((e0, e1))
        else:
            t0 = time.perf_counter()
            fn()
            self.host.append((t0, time.perf_counter()))

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def times(self) -> list[float]:
        """Seconds per call, in call order (synchronizes)."""
        self.sync()
        if self.cuda:
            return [a.elapsed_time(b) * 1e-3 for a, b in self.pending]
        return [b - a for a, b in self.host]

    def span(self, first: int) -> float:
        """Seconds from call ``first``'s start to the last call's end (after ``times``)."""
        if self.cuda:
            return float(self.pending[first][0].elapsed_time(self.pending[-1][1]) * 1e-3)
        return self.host[-1][1] - self.host[first][0]


def _time_calls(torch: Any, device: str, fn: Callable[[], Any], n: int) -> list[float]:
    t = _Timer(torch, device)
    for _ in range(n):
        t.call(fn)
    return t.times()


#: What the sweep runs between GEMMs: an HBM-bound elementwise pass, or the GPU idling in a
#: spin kernel (``torch.cuda._sleep``; a host sleep on a CPU): the two ends of the power
#: that a step's other work draws.
OTHERS = ("memory", "idle")


def _sized(torch: Any, device: str, make: Callable[[int], Callable[[], Any]], size: int,
           floor: int, target_s: float) -> tuple[Callable[[], Any], float]:  # fmt: skip
    """``make(size)``'s kernel resized three times toward ``target_s`` (never below
    ``floor``): the last one made, and its median time (s)."""
    for _ in range(3):
        fn = make(size)
        t = statistics.median(_time_calls(torch, device, fn, 20)[5:])
        size = max(floor, int(size * target_s / t))
    return fn, t


def _idle_kernel(torch: Any, device: str, target_s: float) -> tuple[Any, float]:
    """A spin kernel (on a CPU a host sleep) of about ``target_s``; the function and its time."""
    if device != "cuda":
        return (lambda: time.sleep(target_s)), target_s
    return _sized(torch, device, lambda c: lambda: torch.cuda._sleep(c), 1 << 16, 1 << 10, target_s)


def _memory_kernel(torch: Any, device: str, dtype: Any, target_s: float) -> tuple[Any, float]:
    """An elementwise pass sized to take about ``target_s``; the function and its time."""

    def make(numel: int) -> Callable[[], Any]:
        x = torch.randn(numel, device=device, dtype=dtype)
        y = torch.empty_like(x)
        return lambda: torch.mul(x, 1.0001, out=y)

    return _sized(torch, device, make, 1 << 22, 1 << 16, target_s)


def sweep(device: str = "cuda", duties: Sequence[float] = DUTIES, seconds: float = 4.0,
          n: int = 8192, pause_s: float = 1.0, interval_ms: int = 50,
          other: str = "memory", gemm_dtype: str = "bf16") -> dict[str, Any]:  # fmt: skip
    """The GEMM's rate at each target duty cycle (see the module docstring).

    Parameters
    ----------
    device : {'cuda', 'cpu'}
    duties : target GEMM duty cycles, each in (0, 1]
    seconds : float
        Length of each phase (s); its second half is kept.
    n : int
        GEMM side (FLOP per GEMM: 2 n^3).
    pause_s : float
        Idle time before each phase (s).
    interval_ms : int
        nvidia-smi sampling period (ms).
    other : {'memory', 'idle'}
        What runs between GEMMs (:data:`OTHERS`).
    gemm_dtype : {'bf16', 'fp8'}
        The GEMM's operands (fp8: e4m3 through ``torch._scaled_mm``, bf16 out; CUDA only;
        on a CPU bf16 means fp32). The memory pass is bf16 either way.

    Raises
    ------
    CalibrationError
        No CUDA device when asked for one; a duty outside (0, 1]; non-positive sizes.
    """
    if seconds <= 0 or n < 1 or pause_s < 0 or interval_ms < 1:
        raise CalibrationError("sweep: seconds, n and interval must be > 0, pause >= 0")
    if other not in OTHERS:
        raise CalibrationError(f"sweep: other {other!r} is unknown; allowed: {', '.join(OTHERS)}")
    if gemm_dtype not in GEMM_DTYPES or (gemm_dtype == "fp8" and device != "cuda"):
        raise CalibrationError(f"sweep: dtype {gemm_dtype!r} is not allowed on {device}; "
                               "allowed: bf16, and fp8 on cuda")  # fmt: skip
    ks = [cycles_for(d) for d in duties]
    torch = resolve_device(device)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    gemm = _square_gemm(torch, device, n, gemm_dtype)

    burst = statistics.median(_time_calls(torch, device, gemm, 13)[3:])
    if other == "memory":
        mem, t_mem = _memory_kernel(torch, device, dtype, burst / _SLICES)
    else:
        mem, t_mem = _idle_kernel(torch, device, burst / _SLICES)
    smi = SmiSampler(device, interval_ms)
    phases = []
    try:
        for duty, k in zip(duties, ks, strict=True):
            phases.append(_phase(torch, device, gemm, mem, k, seconds, pause_s) | {"target": duty})
    finally:
        smi.stop()
    flops = 2.0 * n**3
    for p in phases:
        p |= smi.between(p.pop("wall_half"), p.pop("wall_end"))
        p["tflops"] = round(flops / p["gemm_s"] / 1e12, 2)
        p["of_burst"] = round(burst / p["gemm_s"], 4)
    name = "float8_e4m3fn" if gemm_dtype == "fp8" else str(dtype).split(".")[-1]
    return {"kind": "duty_sweep", "device": device, "n": n, "dtype": name,
            "burst_gemm_s": burst, "burst_tflops": round(flops / burst / 1e12, 2),
            "other": other, "memory_pass_s": t_mem, "seconds_per_phase": seconds, "phases": phases}  # fmt: skip


def _square_gemm(torch: Any, device: str, n: int, gemm_dtype: str) -> Callable[[], Any]:
    """One ``n``^3 GEMM on random operands (bf16, fp32 on a CPU, or fp8 e4m3)."""
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    if gemm_dtype != "fp8":
        return lambda: torch.matmul(a, b)
    one = torch.ones((), device=device)
    x, w = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn).t()  # w column-major
    return lambda: torch._scaled_mm(x, w, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def _phase(torch: Any, device: str, gemm: Callable[[], Any], mem: Callable[[], Any], k: int,
           seconds: float, pause_s: float) -> dict[str, Any]:  # fmt: skip
    timer = _Timer(torch, device)
    timer.sync()
    time.sleep(pause_s)
    start = time.time()
    while time.time() - start < seconds:
        for _ in range(4):
            timer.call(gemm)
            for _ in range(k):
                mem()
    times = timer.times()
    end = time.time()
    half = len(times) // 2
    kept = times[half:]
    return {"k": k, "gemms": len(times), "gemm_s": statistics.median(kept),
            "duty": round(sum(kept) / timer.span(half), 4),
            "wall_half": start + (end - start) / 2, "wall_end": end}  # fmt: skip


_TORCH_DTYPES = ("bfloat16", "float16", "float32")


def _tensor(torch: Any, device: str, shape: Sequence[int], strides: Sequence[int],
            dtype: Any) -> Any:  # fmt: skip
    if strides and len(strides) == len(shape):
        t = torch.empty_strided(tuple(shape), tuple(strides), device=device, dtype=dtype)
    else:
        t = torch.empty(tuple(shape), device=device, dtype=dtype)
    return t.normal_()


def _gemm_call(torch: Any, device: str, op: str, dims: Sequence[Sequence[int]],
               strides: Sequence[Sequence[int]], dtype: Any) -> Callable[[], Any]:  # fmt: skip
    st = list(strides) + [()] * (len(dims) - len(strides))
    ts = [_tensor(torch, device, d, s, dtype) for d, s in zip(dims, st, strict=False) if d]
    if op == "aten::addmm" and len(ts) >= 3:
        bias, x, w = ts[:3]
        return lambda: torch.addmm(bias, x, w)
    x, w = ts[:2]
    return lambda: torch.mm(x, w)


def step_gemms(tr: Any) -> dict[tuple[Any, ...], list[float]]:
    """A trace's GEMM kernels by (op, input shapes, strides, dtype): every step's durations
    (s). The memsets cuBLAS launches beside a GEMM (its workspace) are left out."""
    groups: dict[tuple[Any, ...], list[float]] = {}
    for kern in tr.kernels:
        if (
            kern.cls == "gemm"
            and kern.op in ("aten::mm", "aten::addmm")
            and not kern.name.startswith(("Memset", "Memcpy"))
        ):
            dt = next((d for d in kern.dtypes if d in _TORCH_DTYPES), "float32")
            groups.setdefault((kern.op, kern.dims, kern.strides, dt), []).append(kern.dur_s)
    return groups


def replay(trace: str, device: str = "cuda", iters: int = 200, pause_s: float = 0.3,
           max_gemms: int = 24) -> dict[str, Any]:  # fmt: skip
    """The step's GEMMs re-run alone: burst, stream and in-step times (module docstring).

    Parameters
    ----------
    trace : str
        Kineto trace of ``calibrate step --trace`` (.json or .json.gz).
    device : {'cuda', 'cpu'}
    iters : int
        Back-to-back runs of each GEMM (at least 16).
    pause_s : float
        Idle time before each GEMM's runs (s).
    max_gemms : int
        The distinct GEMMs with the most time in the step that are replayed.

    Raises
    ------
    CalibrationError
        Not a step trace; no GEMMs in it; ``iters`` under 16.
    """
    from calibrate.trace_reader import read_trace

    if iters < 16:
        raise CalibrationError(f"replay: iters {iters} must be at least 16")
    tr = read_trace(trace)
    groups = step_gemms(tr)
    if not groups:
        raise CalibrationError(f"{trace}: no GEMM kernels (aten::mm, aten::addmm) to replay")
    torch = resolve_device(device)
    nsteps = len(tr.steps)
    ranked = sorted(groups.items(), key=lambda kv: -sum(kv[1]))
    rows = [_replay_one(torch, device, key, durs, nsteps, iters, pause_s)
            for key, durs in ranked[:max_gemms]]  # fmt: skip
    step_s = statistics.median(tr.step_times_s)
    gemm_s = sum(sum(d) for d in groups.values()) / nsteps
    return {"kind": "gemm_replay", "device": device, "trace": str(trace), "steps": nsteps,
            "step_s": step_s, "gemm_s_per_step": gemm_s, "duty": round(gemm_s / step_s, 4),
            "replayed_share": round(sum(r["in_step_s"] * r["per_step"] for r in rows) / gemm_s, 4),
            **_weighted(rows), "gemms": rows}  # fmt: skip


def _replay_one(torch: Any, device: str, key: tuple[Any, ...], durs: Sequence[float],
                nsteps: int, iters: int, pause_s: float) -> dict[str, Any]:  # fmt: skip
    op, dims, strides, dt = key
    fn = _gemm_call(torch, device, op, dims, strides, getattr(torch, dt))
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    time.sleep(pause_s)
    ts = _time_calls(torch, device, fn, iters)
    mats = [d for d in dims if len(d) == 2]
    (m, k), (_, n) = mats[-2], mats[-1]
    return {"op": op, "dims": [list(d) for d in dims], "strides": [list(s) for s in strides],
            "dtype": dt, "mnk": [m, n, k], "per_step": len(durs) / nsteps,
            "in_step_s": statistics.median(durs), "burst_s": statistics.median(ts[3:13]),
            "stream_s": statistics.median(ts[-(iters // 4):])}  # fmt: skip


def _weighted(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Time-weighted ratios over the replayed GEMMs: in-step / burst and stream / burst."""
    w = [r["per_step"] for r in rows]
    burst = sum(r["burst_s"] * x for r, x in zip(rows, w, strict=True))
    return {"in_step_over_burst": round(sum(r["in_step_s"] * x for r, x in zip(rows, w,
                                                                              strict=True)) / burst, 4),
            "stream_over_burst": round(sum(r["stream_s"] * x for r, x in zip(rows, w,
                                                                            strict=True)) / burst, 4)}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m calibrate.duty_cycle sweep|replay|power ... --out F.json`` (module
    docstring)."""
    ap = argparse.ArgumentParser(
        prog="python -m calibrate.duty_cycle",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = ap.add_subparsers(dest="what", required=True)
    sw = sub.add_parser("sweep", help="one GEMM at several duty cycles")
    sw.add_argument("--seconds", type=float, default=4.0, help="per duty cycle")
    sw.add_argument("--n", type=int, default=8192, help="GEMM side")
    sw.add_argument("--duties", default=",".join(map(str, DUTIES)), help="comma-separated")
    sw.add_argument("--other", default="memory", help="between GEMMs: memory or idle")
    sw.add_argument("--dtype", default="bf16", help="the GEMM's: bf16, or fp8 (cuda)")
    rp = sub.add_parser("replay", help="a profiled step's GEMMs, alone")
    rp.add_argument("trace", help="calibrate step --trace file")
    rp.add_argument("--iters", type=int, default=200)
    for p in (sw, rp):
        p.add_argument("--device", default="cuda", help="cuda or cpu")
        p.add_argument("--pause", type=float, default=None, help="idle seconds before each")
        p.add_argument("--out", required=True, help="JSON file to write")
    pw = sub.add_parser("power", help="the power and clock a command runs the GPU at")
    pw.add_argument("--out", required=True, help="JSON file to write")
    pw.add_argument("--busy-w", type=float, default=200.0,
                    help="samples above this draw (W) count as the GPU at work")  # fmt: skip
    pw.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    args = ap.parse_args(argv)
    try:
        from sim.files import check_output_path, write_atomic

        check_output_path(args.out, "--out")
        doc = _measure(args)
    except (CalibrationError, ConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    write_atomic(args.out, json.dumps(doc, indent=1, sort_keys=True) + "\n", "--out")
    brief = {k: v for k, v in doc.items() if k not in ("phases", "gemms", "trace")}
    print(f"{doc['kind']}: {json.dumps(brief, sort_keys=True)}")
    for row in doc.get("phases", []):
        print(json.dumps(row, sort_keys=True))
    return int(doc.get("exit_status", 0))


def _measure(args: argparse.Namespace) -> dict[str, Any]:
    if args.what == "power":
        cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
        return command_power(cmd, args.busy_w)
    if args.what == "sweep":
        try:
            duties = [float(x) for x in args.duties.split(",") if x.strip()]
        except ValueError:
            raise CalibrationError(f"--duties {args.duties!r}: expected numbers") from None
        pause = 1.0 if args.pause is None else args.pause
        return sweep(
            args.device,
            duties,
            args.seconds,
            args.n,
            pause,
            other=args.other,
            gemm_dtype=args.dtype,
        )
    pause = 0.3 if args.pause is None else args.pause
    return replay(args.trace, args.device, args.iters, pause)


if __name__ == "__main__":
    raise SystemExit(main())
