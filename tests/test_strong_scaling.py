"""Megatron-Core's strong-scaling statement (quoted in the header of the shared
``megatron-core-h100-weak-scaling.csv``): the reader, the scenarios of either end and the
simulator's answer (``benchmarks/validate_strong_scaling.py`` prints it by schedule).

Source: the Megatron-LM README, "Strong Scaling Results": GPT-3 175B from 96 to 4,608
H100 at 1,152 sequences per batch, MFU from 47% to 42%. The tests that need the shared
file skip without ../shared/data.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from calibrate.fit_training import DATA
from calibrate.published import (
    McoreRow,
    implied_compute_only_mfu,
    read_mcore_strong_scaling,
    read_mcore_table,
    strong_scaling_curve,
    strong_scaling_scenario,
)
from sim.errors import CalibrationError
from sim.training.step import simulate_step

TABLE = DATA / "megatron-core-h100-weak-scaling.csv"
needs_data = pytest.mark.skipif(not TABLE.exists(), reason=f"published data absent: {TABLE}")
ROW = McoreRow("177B", 96, 12288, 96, 8, 6, 48, 2304, 1152, 0.0)  # a shape; no measurement
HEADER = ("# source: ... Strong-scaling text: GPT-3 175B (177B) from 96 to 4608 H100 at fixed "
          "batch 1152 sequences, MFU falls from 47% to 42% (chart ...)\n")  # fmt: skip


def test_the_statement_is_read_from_the_header(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(HEADER + "model_size\n")
    claim = read_mcore_strong_scaling(path)
    assert (claim.row, claim.gpus, claim.batch, claim.mfu) == (
        "177B",
        (96, 4608),
        1152,
        (0.47, 0.42),
    )


def test_a_header_without_the_statement_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("# source: a table\nmodel_size\n")
    with pytest.raises(CalibrationError, match="no strong-scaling statement"):
        read_mcore_strong_scaling(path)
    with pytest.raises(CalibrationError, match="cannot read"):
        read_mcore_strong_scaling(tmp_path / "absent.csv")


@pytest.mark.parametrize(("gpus", "v"), [(96, 1), (4608, 1), (4608, 4)])
def test_either_end_keeps_the_rows_model_parallelism(gpus: int, v: int) -> None:
    sc = strong_scaling_scenario(ROW, gpus, 1152, v)
    par = sc.parallel
    assert (par.tp, par.pp, par.dp, sc.training.global_batch) == (8, 6, gpus // 48, 1152)
    assert (par.schedule, par.virtual_stages) == (("1f1b", 1) if v == 1 else ("interleaved", v))


def test_gpus_that_do_not_divide_into_the_model_parallel_group_are_refused() -> None:
    with pytest.raises(CalibrationError, match="TP 8 x PP 6"):
        strong_scaling_scenario(ROW, 100, 1152)


_COLUMNS = (
    "model_size,attention_heads,hidden_size,num_layers,tensor_mp_size,pipeline_mp_size,"
    "data_parallel_size,num_gpus,batch_size,per_gpu_teraflops,mfu,aggregate_petaflops\n"
)


def test_the_table_row_on_the_curve_is_its_middle_point(tmp_path: Path) -> None:
    """The 177B row at the statement's batch lies between its ends: a third point, at its
    per-GPU TFLOP/s over H100 SXM's 989.4 TFLOP/s dense bf16 peak."""
    path = tmp_path / "t.csv"
    path.write_text(HEADER + _COLUMNS + "177B,96,12288,96,8,6,48,2304,1152,432.8,44%,997.2\n")
    row, points = strong_scaling_curve(path)
    assert row.name == "177B"
    assert [(p.gpus, p.source) for p in points] == [
        (96, "statement"), (2304, "table row"), (4608, "statement")]  # fmt: skip
    assert points[1].mfu == pytest.approx(432.8 / 989.4, rel=1e-12)


def test_a_row_at_another_batch_is_not_a_point_of_the_curve(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(HEADER + _COLUMNS + "177B,96,12288,96,8,6,48,2304,2304,432.8,44%,997.2\n")
    assert [p.gpus for p in strong_scaling_curve(path)[1]] == [96, 4608]


def test_a_statement_without_its_row_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(HEADER + _COLUMNS + "16B,48,6144,32,4,1,48,192,192,489.1,49%,93.9\n")
    with pytest.raises(CalibrationError, match="no row '177B'"):
        strong_scaling_curve(path)


def _implied_compute_only(v: int) -> list[float]:
    """Compute-only MFU each published point implies under schedule ``v``: its MFU with
    the predicted step's non-compute share taken out."""
    row, points = strong_scaling_curve(TABLE)
    out = []
    for p in points:
        r = simulate_step(strong_scaling_scenario(row, p.gpus, row.batch, v), "analytical")
        out.append(implied_compute_only_mfu(p.mfu, r))
    return out


@needs_data
def test_the_curve_s_shape_says_interleaved_not_1f1b() -> None:
    """Every point runs the same micro-batches through the same layers, so the compute-only
    MFU the published points imply is the same at every point under the schedule the runs
    used. Under 1F1B it would have to climb 35% from 96 to 4608 GPUs (51% -> 69%); under
    the interleaved schedule with 4 chunks a stage it stays within 4% (50.9-52.5%), 20%
    below the simulator's 63% (benchmarks/validate_strong_scaling.py)."""
    plain, interleaved = _implied_compute_only(1), _implied_compute_only(4)
    assert plain[-1] / plain[0] > 1.25
    assert max(interleaved) / min(interleaved) < 1.04


@needs_data
def test_mfu_falls_as_the_same_batch_spreads_over_more_gpus() -> None:
    """Fewer micro-batches per replica: a larger bubble and more exposed communication."""
    claim = read_mcore_strong_scaling(TABLE)
    row = next(r for r in read_mcore_table(TABLE) if r.name == claim.row)
    for v in (1, 4):
        low, high = (simulate_step(strong_scaling_scenario(row, g, claim.batch, v)).mfu
                     for g in claim.gpus)  # fmt: skip
        assert high < low


GAP = (
    "known gap: the compute model gives GPT-3 177B (TP 8) 63% compute-only MFU; the "
    "published run at 96 GPUs (576 micro-batches per replica) is 47% overall: predicted "
    "57.6%, +22.5% (benchmarks/validate_strong_scaling.py)"
)


@needs_data
@pytest.mark.xfail(strict=True, reason=GAP)
def test_the_compute_bound_end_within_12_percent() -> None:
    claim = read_mcore_strong_scaling(TABLE)
    row = next(r for r in read_mcore_table(TABLE) if r.name == claim.row)
    mfu = simulate_step(strong_scaling_scenario(row, claim.gpus[0], claim.batch)).mfu
    assert abs(mfu / claim.mfu[0] - 1) <= 0.12


@needs_data
def test_less_tp_overlap_slows_the_compute_bound_end_and_the_script_takes_it() -> None:
    """``validate_strong_scaling.py --tp-overlap-hidden 0`` (the slowdown then 0 too): no TP
    communication hidden and no GEMM slowdown (every TP collective exposed) gives a lower
    MFU at 96 GPUs than the preset's overlap, but not by enough to close the gap alone
    (+5.7% under interleaving v = 4, measured 2026-12-04); a share outside 0-1 is refused."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "validate_strong_scaling.py"

    def v4_error(*argv: str) -> float:
        out = subprocess.run([sys.executable, str(script), *argv], capture_output=True,
                             text=True, check=True).stdout  # fmt: skip
        line = next(x for x in out.splitlines() if x.startswith("interleaved v=4 "))
        return float(line.split("|")[1].split()[1].rstrip("%")) / 100

    preset, exposed = v4_error(), v4_error("--tp-overlap-hidden", "0")
    assert 0.0 < exposed < preset
    assert exposed == pytest.approx(0.057, abs=0.01) and preset == pytest.approx(0.233, abs=0.01)
    assert v4_error("--tp-overlap-hidden", "0", "--tp-overlap-slowdown", "0") == exposed
    for bad in ("2", "half"):
        run = subprocess.run([sys.executable, str(script), "--tp-overlap-hidden", bad],
                             capture_output=True, text=True)  # fmt: skip
        assert run.returncode == 2
        assert f"expected a fraction from 0 to 1, got '{bad}'" in run.stderr
