"""Sustained clocks under a long GEMM stream: how far a GPU's clocks (and so its matmul
rate) fall below the best single-GEMM result once power and heat settle.

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
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from calibrate.compute import resolve_device
from sim.errors import CalibrationError

__all__ = ["SMI_FIELDS", "main", "run_clocks", "smi_process"]

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
