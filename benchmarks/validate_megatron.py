"""Megatron-LM A100 weak-scaling table: predictions of the shipped A100 profile, the fit
that made it, leave-one-out errors, and wall time per configuration.

Run: ``python benchmarks/validate_megatron.py [--loo]`` (reads ../shared/data).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from calibrate.published import fit_compute, leave_one_out, predict_rows, read_megatron_table

TABLE = (
    Path(__file__).resolve().parents[2]
    / "shared"
    / "data"
    / "published"
    / "megatron-lm-a100-weak-scaling.csv"
)


def main() -> None:
    """Print the table."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--loo", action="store_true", help="also run leave-one-out (slow: 10 fits)")
    ap.add_argument("--fit", action="store_true", help="refit on all rows and print the parameters")
    args = ap.parse_args()
    rows = read_megatron_table(TABLE)
    predict_rows(rows[:1], profile="a100-megatron")  # build caches
    t = []
    preds = []
    for r in rows:
        t0 = time.perf_counter()
        preds.append(predict_rows([r], profile="a100-megatron")[0])
        t.append(time.perf_counter() - t0)
    loo = leave_one_out(rows) if args.loo else None
    print(
        f"{'model':>6} {'GPUs':>5} {'TP':>3} {'PP':>3} {'measured':>9} {'predicted':>10} {'error':>7} "
        f"{'LOO err':>8} {'wall(ms)':>9}"
    )
    for i, r in enumerate(rows):
        e = preds[i] / r.tflops_per_gpu - 1
        lo = f"{loo[i]:+8.1%}" if loo is not None else f"{'-':>8}"
        print(
            f"{r.name:>6} {r.gpus:>5} {r.tp:>3} {r.pp:>3} {r.tflops_per_gpu:>9.1f} {preds[i]:>10.1f} {e:>+7.1%} "
            f"{lo} {t[i] * 1e3:>9.1f}"
        )
    err = np.abs(np.array(preds) / np.array([r.tflops_per_gpu for r in rows]) - 1)
    print(f"mean |error| {err.mean():.2%}, max {err.max():.2%}")
    if loo is not None:
        print(f"leave-one-out: mean |error| {np.abs(loo).mean():.2%}, max {np.abs(loo).max():.2%}")
    if args.fit:
        params, errs = fit_compute(rows)
        print("fit on all rows:", params, "mean", np.abs(errs).mean())


if __name__ == "__main__":
    main()
