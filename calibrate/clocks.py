"""Clocks and power read with ``nvidia-smi`` (read-only): sustained clocks under a long GEMM
stream, how far a GPU's clocks (and so its matmul rate) fall below the best single-GEMM
result once power and heat settle; the timestamped sampler the duty-cycle measurements
use (:class:`SmiSampler`); and the draw and clock a command runs the GPU at
(:func:`command_power`, ``python -m calibrate.duty_cycle power -- CMD``).

``run_clocks`` runs back-to-back square bf16 GEMMs (``n`` x ``n`` x ``n``, default 8192)
for ``seconds``, timing each window of ``window`` GEMMs with CUDA events (TFLOP/s per
window), while ``nvidia-smi`` samples SM and memory clocks, power draw, temperature and
the active throttle reasons every ``interval_ms`` (a read-only query: the card's settings
are never touched). The CSV has one row per sample or window, tagged ``smi`` or
``gemm``, on one time axis (seconds since the stream started). The summary (the CSV's last
line) gives the mean TFLOP/s of the first and the last quarter of the windows, their
ratio (the sustained derate), and the mean SM clock and power of the first and the last
quarter of the samples.
nvidia-smi's samples are placed evenly over the stream (its own cadence; a sample's exact
time is not read), which is what the quarter means need.

On a CPU (``--device cpu``, the device script's dry run) the GEMMs are fp32 and
``nvidia-smi`` is usually absent: its rows are then missing and the summary says so.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from calibrate.compute import resolve_device
from sim.errors import CalibrationError

__all__ = [
    "SMI_FIELDS",
    "TIMESTAMPED",
    "SmiSampler",
    "command_power",
    "main",
    "run_clocks",
    "smi_process",
]

#: nvidia-smi --query-gpu fields sampled (read-only).
SMI_FIELDS = ("clocks.sm", "clocks.mem", "power.draw", "temperature.gpu",
              "clocks_throttle_reasons.active")  # fmt: skip


def smi_process(
    interval_ms: int, fields: Sequence[str] = SMI_FIELDS
) -> subprocess.Popen[str] | None:
    """``nvidia-smi`` sampling ``fields`` every ``interval_ms`` (CSV lines on its stdout;
    read-only), or None where the tool is absent."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    cmd = [exe, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits",
           f"-lms={interval_ms}"]  # fmt: skip
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


#: Fields of the timestamped samples (:class:`SmiSampler`).
TIMESTAMPED = ("timestamp", "clocks.sm", "power.draw", "clocks_throttle_reasons.active")


class SmiSampler:
    """Timestamped nvidia-smi samples: (wall time s, SM MHz, power W, throttle reasons)."""

    def __init__(self, device: str, interval_ms: int) -> None:
        self.proc = smi_process(interval_ms, TIMESTAMPED) if device == "cuda" else None
        self.samples: list[tuple[float, float, float, str]] = []

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            out, _ = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # a sampler that ignores the signal
            self.proc.kill()
            out, _ = self.proc.communicate()
        for line in out.splitlines():
            parts = [p.strip() for p in line.split(",")]
            try:
                when = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
                self.samples.append((when, float(parts[1]), float(parts[2]), parts[3]))
            except (ValueError, IndexError):
                continue

    def between(self, t0: float, t1: float) -> dict[str, Any]:
        """Mean SM clock and power of the samples in [t0, t1] (wall seconds)."""
        s = [x for x in self.samples if t0 <= x[0] <= t1]
        if not s:
            return {"sm_mhz": None, "power_w": None, "samples": 0, "throttle": []}
        return {"sm_mhz": round(statistics.fmean(x[1] for x in s), 1),
                "power_w": round(statistics.fmean(x[2] for x in s), 1), "samples": len(s),
                "throttle": sorted({x[3] for x in s})}  # fmt: skip


def command_power(cmd: Sequence[str], busy_w: float = 200.0,
                  interval_ms: int = 50) -> dict[str, Any]:  # fmt: skip
    """Run ``cmd`` while ``nvidia-smi`` samples the GPU; its draw and SM clock at work.

    The samples above ``busy_w`` are the GPU at work (a job's start-up, model building and
    exit draw less): their median power and SM clock, and every sample, are returned with
    the command's exit status and wall time (s). Without ``nvidia-smi`` there are no
    samples and the summary says so.

    Raises
    ------
    CalibrationError
        No command given, or it cannot be started.
    """
    if not cmd:
        raise CalibrationError("power: give the command to run after --, e.g. -- python3 job.py")
    smi = SmiSampler("cuda", interval_ms)
    start = time.time()
    try:
        rc = subprocess.run(list(cmd), check=False).returncode
    except OSError as err:
        raise CalibrationError(f"power: cannot run {cmd[0]!r}: {err.strerror or err}") from None
    finally:
        smi.stop()
    busy = [x for x in smi.samples if x[2] > busy_w]
    return {"kind": "command_power", "command": list(cmd), "exit_status": rc,
            "seconds": round(time.time() - start, 2), "samples": len(smi.samples),
            "busy_samples": len(busy), "busy_w_threshold": busy_w,
            "busy_power_w": statistics.median(x[2] for x in busy) if busy else None,
            "busy_sm_mhz": statistics.median(x[1] for x in busy) if busy else None,
            "note": "" if smi.proc is not None else "nvidia-smi absent: no samples",
            "trace": [[round(t - start, 3), mhz, w] for t, mhz, w, _ in smi.samples]}  # fmt: skip


def run_clocks(device: str = "cuda", seconds: float = 60.0, n: int = 8192, window: int = 10,
               interval_ms: int = 500) -> tuple[list[dict[str, Any]], dict[str, Any]]:  # fmt: skip
    """Rows (``kind`` smi or gemm, ``t_s``, values) and the summary (module docstring).

    Raises
    ------
    CalibrationError
        No CUDA device when asked for one; non-positive sizes.
    """
    if seconds <= 0 or n < 1 or window < 1 or interval_ms < 1:
        raise CalibrationError("clocks: seconds, n, window and interval must be > 0")
    torch = resolve_device(device)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    flops = 2.0 * n**3 * window
    rows: list[dict[str, Any]] = []
    smi = smi_process(interval_ms) if device == "cuda" else None
    start = time.perf_counter()
    try:
        while time.perf_counter() - start < seconds:
            t0 = time.perf_counter() - start
            if device == "cuda":
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                for _ in range(window):
                    torch.matmul(a, b)
                e1.record()
                e1.synchronize()
                dt = e0.elapsed_time(e1) * 1e-3
            else:
                for _ in range(window):
                    torch.matmul(a, b)
                dt = time.perf_counter() - start - t0
            rows.append({"kind": "gemm", "t_s": round(t0 + dt, 4), "tflops": flops / dt / 1e12})
    finally:
        lines = []
        if smi is not None:
            smi.terminate()
            out, _ = smi.communicate(timeout=10)
            lines = [ln for ln in out.splitlines() if ln.strip()]
    elapsed = time.perf_counter() - start
    for i, line in enumerate(lines):  # evenly spread over the stream (nvidia-smi's own cadence)
        values = [v.strip() for v in line.split(",")]
        t = elapsed * (i + 0.5) / len(lines)
        rows.append(
            {"kind": "smi", "t_s": round(t, 4), **dict(zip(SMI_FIELDS, values, strict=False))}
        )
    rows.sort(key=lambda r: (r["t_s"], r["kind"]))
    return rows, _summary(rows, elapsed, smi is not None)


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _num(v: Any) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _quarters(
    rows: Sequence[dict[str, Any]], kind: str, key: str
) -> tuple[float | None, float | None]:
    """Mean of ``key`` over the first and the last quarter (at least one) of ``kind`` rows."""
    xs = [x for r in rows if r["kind"] == kind and (x := _num(r.get(key))) is not None]
    if not xs:
        return None, None
    q = max(1, len(xs) // 4)
    return _mean(xs[:q]), _mean(xs[-q:])


def _summary(rows: Sequence[dict[str, Any]], elapsed: float, smi: bool) -> dict[str, Any]:
    f, la = _quarters(rows, "gemm", "tflops")
    sm0, sm1 = _quarters(rows, "smi", "clocks.sm")
    p0, p1 = _quarters(rows, "smi", "power.draw")
    return {
        "seconds": round(elapsed, 2),
        "first_quarter_tflops": f, "last_quarter_tflops": la,
        "sustained_ratio": la / f if f and la else None,
        "first_quarter_sm_mhz": sm0, "last_quarter_sm_mhz": sm1,
        "first_quarter_power_w": p0, "last_quarter_power_w": p1,
        "note": "" if smi else "nvidia-smi absent: no clock or power samples",
    }  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m calibrate.clocks --device cuda --seconds 60 --out clocks.csv``."""
    ap = argparse.ArgumentParser(prog="python -m calibrate.clocks", description=__doc__)
    ap.add_argument("--device", default="cuda", help="cuda or cpu")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--n", type=int, default=8192, help="GEMM side")
    ap.add_argument("--window", type=int, default=10, help="GEMMs per timed window")
    ap.add_argument("--interval-ms", type=int, default=500, help="nvidia-smi sampling")
    ap.add_argument("--out", required=True, help="CSV file to write")
    args = ap.parse_args(argv)
    try:
        from sim.files import check_output_path, write_atomic

        check_output_path(args.out, "--out")
        rows, summary = run_clocks(args.device, args.seconds, args.n, args.window, args.interval_ms)
    except CalibrationError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    fields = ["kind", "t_s", "tflops", *SMI_FIELDS]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    buf.write(f"# summary: {json.dumps(summary, sort_keys=True)}\n")
    write_atomic(args.out, buf.getvalue(), "--out")
    print(f"sustained GEMM stream: {json.dumps(summary, sort_keys=True)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
