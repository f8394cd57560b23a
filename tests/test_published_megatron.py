"""The Megatron-LM A100 rows as scenarios (calibrate/published.py): the run settings come
from the authors' Table 1 script (github.com/NVIDIA/Megatron-LM,
examples/sc21/run_table_1.sh), and every row is a valid plan under them."""

from __future__ import annotations

import pytest

from calibrate.fit_training import FITS
from calibrate.published import SC21_RUNS, MegatronRow, megatron_scenario
from sim.scenario.load import resolve_plan

# The README / SC21 Table 1 rows (name, hidden, layers, model-parallel size, GPUs, batch);
# the CSV under ../shared/data holds the same, with the published TFLOP/s.
ROWS = [
    MegatronRow("1.7B", 2304, 24, 1, 32, 512, 137.0),
    MegatronRow("3.6B", 3072, 30, 2, 64, 512, 138.0),
    MegatronRow("7.5B", 4096, 36, 4, 128, 512, 142.0),
    MegatronRow("18B", 6144, 40, 8, 256, 1024, 135.0),
    MegatronRow("39B", 8192, 48, 16, 512, 1536, 138.0),
    MegatronRow("76B", 10240, 60, 32, 1024, 1792, 140.0),
    MegatronRow("145B", 12288, 80, 64, 1536, 2304, 148.0),
    MegatronRow("310B", 16384, 96, 128, 1920, 2160, 155.0),
    MegatronRow("530B", 20480, 105, 280, 2520, 2520, 163.0),
    MegatronRow("1T", 25600, 128, 512, 3072, 3072, 163.0),
]


def test_the_script_names_every_row_of_the_table() -> None:
    assert [r.name for r in ROWS] == list(SC21_RUNS)


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_each_row_runs_with_the_scripts_settings(row: MegatronRow) -> None:
    """Heads, micro-batch, DDP overlap and interleaving as in run_table_1.sh; the
    interleaved rows' micro-batches divide by the stages (Megatron-LM requires it)."""
    heads, micro, overlap, per_virtual = SC21_RUNS[row.name]
    sc = megatron_scenario(row)
    assert sc.model.heads == heads and row.hidden % heads == 0
    assert sc.parallel.micro_batch == micro and sc.parallel.overlap_dp is overlap
    assert overlap is (row.pp == 1)  # torch DDP without a pipeline, local DDP with one
    plan = resolve_plan(sc, row.gpus, 8)
    assert plan.tp * plan.pp * plan.dp == row.gpus
    if per_virtual is None:
        assert sc.parallel.schedule == "1f1b" and sc.parallel.virtual_stages == 1
    else:
        v = sc.parallel.virtual_stages
        assert sc.parallel.schedule == "interleaved" and v * per_virtual * row.pp == row.layers
        assert plan.num_microbatches % row.pp == 0


def test_without_the_script_the_old_assumptions_hold() -> None:
    """``run_script=False`` and rows the script does not name: head size 128, micro-batch
    1, non-interleaved 1F1B, all-reduce after the backward pass."""
    other = MegatronRow("2B", 2560, 24, 1, 32, 512, 140.0)
    for sc in (megatron_scenario(ROWS[5], run_script=False), megatron_scenario(other)):
        assert sc.model.heads == sc.model.hidden // 128
        assert sc.parallel.micro_batch == 1 and sc.parallel.schedule == "1f1b"
        assert sc.parallel.overlap_dp is False


def test_the_a100_fit_frees_stream_eff_and_the_h100_fit_does_not() -> None:
    """Only the Megatron rows use fused kernels (stream_eff); the H100 tables have none."""
    assert "stream_eff" in [s.key for s in FITS["A100-SXM"][2]]
    assert "stream_eff" not in [s.key for s in FITS["H100-SXM"][2]]
