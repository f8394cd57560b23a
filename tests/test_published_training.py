"""Predictions against published training runs nobody here produced (../shared/data).

One parameter set per GPU type (topologies/catalog/compute.yaml, fitted by
``python -m calibrate.fit_training``); every table is compared row by row. Sources:

- llm-foundry MPT H100 bf16 and fp8 tables, A100 40GB and 80GB tables
  (github.com/mosaicml/llm-foundry, scripts/train/benchmarking/README.md), tokens/s per GPU,
  assumptions in calibrate/llm_foundry.py;
- Megatron-LM's A100 weak-scaling table (Narayanan et al. SC21; Megatron-LM README),
  hardware TFLOP/s per GPU, assumptions in calibrate/published.py;
- Megatron-LM's A100 MFU table with selective recompute (Korthikanti et al. 2022;
  Megatron-LM README), model TFLOP/s per GPU, validation only (no fit uses it).

Tolerances: the issue's targets (H100 bf16 mean <= 8% and every row <= 15%; fp8 mean <=
12%), and for A100 no worse than before the per-operation model (Megatron: mean 4.3%, max
11.6%; llm-foundry A100 80GB and 40GB: mean 14.3% and 16.4%, max 34.9% and 42.4%, with
the earlier A100 profile), with the tighter bars of the joint fit below (the 80GB mean
relaxed by 0.8 points for the op-level compute model, see there). Tests skip when
../shared/data is absent.
"""

from __future__ import annotations

import numpy as np
import pytest

from calibrate.fit_training import DATA, predict, rows_for, table_rows
from sim.training.compute.params import compute_params

pytestmark = pytest.mark.skipif(not DATA.exists(), reason=f"published data absent: {DATA}")


def _errors(gpu: str, table: str) -> np.ndarray:
    rows = [r for r in rows_for(gpu) if r.table == table]
    assert rows, table
    return predict(rows) / np.array([r.measured for r in rows]) - 1


def test_h100_bf16_table_within_the_targets() -> None:
    """52 runs, MPT 760M-70B, 512-65536 tokens, 8-64 H100, FSDP: mean <= 8%, max <= 15%."""
    err = np.abs(_errors("H100-SXM", "llm-foundry-mpt-h100-bf16.csv"))
    assert err.mean() <= 0.08 and err.max() <= 0.15, (err.mean(), err.max())


def test_h100_fp8_table_within_the_target() -> None:
    """7 fp8 runs (Transformer Engine linears): mean <= 12%."""
    err = np.abs(_errors("H100-SXM", "llm-foundry-mpt-h100-fp8.csv"))
    assert err.mean() <= 0.12, err


def test_fp8_speedup_is_what_the_runs_saw_not_the_peak_ratio() -> None:
    """The six runs published in both bf16 and fp8 (same model, sequence and GPUs) saw
    speedups of 1.0-1.35x, not the 2x of the peaks: the predicted speedups match them
    within 8% on average and every one stays below 1.5x."""
    rows = rows_for("H100-SXM")
    bf16 = {r.label.split(" mb")[0]: r for r in rows if r.table.endswith("bf16.csv")}
    pairs = [(r, bf16[r.label.split(" mb")[0]]) for r in rows if r.table.endswith("fp8.csv")
             if r.label.split(" mb")[0] in bf16]  # fmt: skip
    assert len(pairs) == 6
    pred = [float(np.divide(*predict([f, b]))) for f, b in pairs]
    seen = [f.measured / b.measured for f, b in pairs]
    err = np.abs(np.array(pred) / np.array(seen) - 1)
    assert err.mean() <= 0.08 and max(pred) < 1.5, (pred, seen)


def test_a100_megatron_table_within_the_joint_fit() -> None:
    """GPT 1.7B-1T on 32-3072 A100, hardware TFLOP/s, run as run_table_1.sh ran them, with
    the one A100 parameter set fitted to all three A100 tables (149 rows), each table
    weighed equally (calibrate.fit_training.BALANCED): mean 2.6%, max 6.7% (a guard; the
    fit with every row weighed equally gave 4.4% / 8.7%, with micro-batch 1 and no
    interleaving 5.4% / 13.6%)."""
    err = np.abs(_errors("A100-SXM", "megatron-lm-a100-weak-scaling.csv"))
    assert err.mean() <= 0.027 and err.max() <= 0.068, err


def test_a100_megatron_table_no_worse_than_the_table_only_fit() -> None:
    """Issue 8's target: mean <= 4.3%, max <= 11.6% (what a100-megatron's two parameters
    fitted to this table alone gave). Met since the joint fit weighs each A100 table
    equally (2.6% / 6.7%); weighed by rows the 139 llm-foundry rows outweighed these 10
    14:1 and left 4.4% / 8.7% (the interleaved rows 76B-530B 5-9% fast)."""
    err = np.abs(_errors("A100-SXM", "megatron-lm-a100-weak-scaling.csv"))
    assert err.mean() <= 0.043 and err.max() <= 0.116, err


@pytest.mark.parametrize(
    ("table", "mean", "worst"),
    [
        # Issue 8's bar ("no worse than today"): the errors when the issue was filed,
        # 14.3% / 34.9% (80GB) and 16.4% / 42.4% (40GB). The table-balanced joint fit
        # gives 5.8% / 24.5% and 4.4% / 26.3% (row-weighed it gave 5.6% / 25.8% and
        # 4.1% / 26.1%: the Megatron rows' gain costs these tables 0.2-0.3 points of mean).
        # The op-level compute model (docs/compute.md) reads unfused attention's s x s
        # probabilities at HBM speed: Megatron's small models slow down, the shared
        # residual factor that keeps that table at 2.2% / 6.2% costs the 80GB table 0.8
        # points of mean (6.6%; its max falls to 21.1%, the 40GB table's to 22.9%)
        ("llm-foundry-mpt-a100-80gb.csv", 0.067, 0.246),
        ("llm-foundry-mpt-a100-40gb.csv", 0.045, 0.264),
    ],
)
def test_a100_llm_foundry_tables_no_worse_than_before(
    table: str, mean: float, worst: float
) -> None:
    err = np.abs(_errors("A100-SXM", table))
    assert err.mean() <= mean and err.max() <= worst, (err.mean(), err.max())


@pytest.mark.parametrize("gpu", ["H100-SXM", "A100-SXM-80GB"])
def test_catalog_validation_records_match_what_the_tables_give(gpu: str) -> None:
    """The catalog's validation record (written by the fit) is what the rows give today."""
    family = "A100-SXM" if gpu.startswith("A100") else gpu
    rows = rows_for(family)
    err = np.abs(predict(rows) / np.array([r.measured for r in rows]) - 1)
    v = compute_params(gpu).validation
    assert v["rows"] == len(rows)
    assert v["mean_abs_error"] == pytest.approx(err.mean(), abs=5e-4)
    assert v["max_abs_error"] == pytest.approx(err.max(), abs=5e-4)


def test_a100_selective_recompute_table_never_fitted_is_guarded() -> None:
    """Megatron-LM 2022 (Korthikanti et al., arXiv 2205.05198; the README's MFU table):
    22B-1T on 8-512 A100 with sequence parallelism, selective recompute and no data
    parallelism, model TFLOP/s (MFU x 312). No fit has seen these rows. With the shipped
    catalog (measured 2026-12-04, with the 2022 code's asynchronous column-parallel
    backward: tp_async_backward): 22B +2.8% (no pipeline), 175B -6.4%, 530B -6.9%, 1T
    -12.3%: too slow, the more so the larger the pipeline bubble's share; mean 7.1%
    (9.0% with every TP collective exposed). A guard (0.5 point of mean, 0.5 of max),
    tightened as the A100 physics improves."""
    rows = table_rows("megatron-mfu-hfu-a100.csv")
    err = predict(rows) / np.array([r.measured for r in rows]) - 1
    assert len(rows) == 4
    assert np.abs(err).mean() <= 0.076 and np.abs(err).max() <= 0.128, err
