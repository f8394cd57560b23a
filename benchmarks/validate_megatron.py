"""Megatron-LM A100 weak-scaling table: predictions with the catalog's A100 parameters and
wall time per configuration.

The A100 parameters are fitted to this table together with the llm-foundry A100 tables
(``python -m calibrate.fit_training --gpu A100-SXM --fit --holdout`` prints the fit, the
residuals of every row and the hold-out errors). Run: ``python benchmarks/validate_megatron.py``
(reads ../shared/data).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from calibrate.published import predict_rows, read_megatron_table

TABLE = (
    Path(__file__).resolve().parents[2]
    / "shared"
    / "data"
    / "published"
    / "megatron-lm-a100-weak-scaling.csv"
)


def main() -> None:
    """Print the table."""
    rows = read_megatron_table(TABLE)
    predict_rows(rows[:1])  # build caches
    t, preds = [], []
    for r in rows:
        t0 = time.perf_counter()
        preds.append(predict_rows([r])[0])
        t.append(time.perf_counter() - t0)
    print(
        f"{'model':>6} {'GPUs':>5} {'TP':>3} {'PP':>3} {'measured':>9} {'predicted':>10} "
        f"{'error':>7} {'wall(ms)':>9}"
    )
    for i, r in enumerate(rows):
        e = preds[i] / r.tflops_per_gpu - 1
        print(
            f"{r.name:>6} {r.gpus:>5} {r.tp:>3} {r.pp:>3} {r.tflops_per_gpu:>9.1f} "
            f"{preds[i]:>10.1f} {e:>+7.1%} {t[i] * 1e3:>9.1f}"
        )
    err = np.abs(np.array(preds) / np.array([r.tflops_per_gpu for r in rows]) - 1)
    print(f"mean |error| {err.mean():.2%}, max {err.max():.2%}")


if __name__ == "__main__":
    main()
