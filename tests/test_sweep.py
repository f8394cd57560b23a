"""clustersim sweep: every point a row, resume after a kill, the same rows whatever the workers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sim.errors import ConfigError
from sim.report import load_results
from sim.scenario.load import load_scenario
from sim.studies.efficiency import gpu_count_keys, scaling_columns, scaling_efficiency
from sim.studies.grid import parse_grid, sweep_spec
from sim.studies.points import METRICS
from sim.studies.runner import run_sweep
from sim.training.step import simulate_step
from tests.helpers import REPO

# 8 quick points (analytical network): two fabrics x 1-4 servers; 3 servers do not divide
# the batch of 128 sequences, so two points are invalid.
GRID = ["cluster.topology=h100-ib-ndr,h100-tcp-100g", "cluster.nodes=1,2,3,4"]
SETS = ["parallel.dp=null", "network=analytical"]

# 24 slower points (flow network) for the kill test: about 0.3 s each on one core.
SLOW = [
    "gpt2-1gpu",
    "--grid", "cluster.topology=dgx-h100",
    "--grid", "parallel.micro_batch=1,2,4,8",
    "--grid", "parallel.recompute=none,selective,full",
    "--grid", "training.seq_len=1024,512",
    "--set", "parallel.dp=8",
    "--set", "training.global_batch=64",
    "--network", "flow",
    "--no-progress",
]  # fmt: skip


def sweep_cli(*args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sim", "sweep", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return run_sweep(sweep_spec("llama3-8b-dgx", GRID, SETS), progress=False)


def test_every_point_is_a_row_with_the_listed_columns(rows: list[dict]) -> None:
    assert len(rows) == 8
    for i, r in enumerate(rows):
        assert r["point"] == i
        assert list(r) == ["point", "cluster.topology", "cluster.nodes", *METRICS]


def test_invalid_points_are_rows_with_a_reason(rows: list[dict]) -> None:
    bad = [r for r in rows if r["reason"]]
    assert [r["cluster.nodes"] for r in bad] == [3, 3]
    for r in bad:
        assert "global_batch" in r["reason"] and r["step_time_s"] is None
        assert r["gpus"] == 24  # the cluster still loads: its size is known


def test_scaling_efficiency_is_per_gpu_throughput_over_the_smallest_count(rows: list[dict]) -> None:
    by = {(r["cluster.topology"], r["cluster.nodes"]): r for r in rows}
    for fabric in ("h100-ib-ndr", "h100-tcp-100g"):
        base = by[(fabric, 1)]
        assert base["scaling_efficiency"] == 1.0
        for n in (2, 4):
            r = by[(fabric, n)]
            want = (r["tokens_per_s"] / r["gpus"]) / (base["tokens_per_s"] / base["gpus"])
            assert r["scaling_efficiency"] == pytest.approx(want, rel=1e-12)
    assert (
        by[("h100-tcp-100g", 4)]["scaling_efficiency"]
        < by[("h100-ib-ndr", 4)]["scaling_efficiency"]
    )


def test_a_key_swept_at_one_gpu_count_does_not_set_the_count() -> None:
    """Micro-batch sizes at 8 GPUs each: no scale key, and no scaling to measure (None),
    where every row used to be its own 100% reference."""
    rows = [
        {"mb": m, "gpus": 8, "tokens_per_s": 100.0 * m, "fits": True, "reason": None}
        for m in (1, 2)
    ]
    assert gpu_count_keys(rows, ["mb"]) == []
    assert scaling_efficiency(rows, ["mb"]) == [None, None]
    assert [c["scaling_series"] for c in scaling_columns(rows, ["mb"])] == ["mb=1", "mb=2"]


def test_rows_on_other_gpu_models_are_not_compared_as_scaling() -> None:
    """Cases that change the GPU model with the count (8 H100 vs 16 A100) are two series of
    one count each: no efficiency, where the old rule gave the A100 rows 44%."""
    rows = [
        {"point": 0, "case": "h100", "gpus": 8, "gpu": "H100-SXM", "tokens_per_s": 800.0, "fits": True},
        {"point": 1, "case": "a100", "gpus": 16, "gpu": "A100-80GB", "tokens_per_s": 700.0, "fits": True},
    ]  # fmt: skip
    cols = scaling_columns(rows, ["case"], ["case"])
    assert [c["scaling_efficiency"] for c in cols] == [None, None]
    assert [c["scaling_series"] for c in cols] == ["gpu=H100-SXM", "gpu=A100-80GB"]


def test_each_row_names_its_series_and_reference(rows: list[dict]) -> None:
    by = {(r["cluster.topology"], r["cluster.nodes"]): r for r in rows}
    for fabric in ("h100-ib-ndr", "h100-tcp-100g"):
        base = by[(fabric, 1)]
        for n in (1, 2, 4):
            r = by[(fabric, n)]
            assert r["scaling_series"] == f"cluster.topology={fabric}"
            assert r["scaling_reference_point"] == base["point"]
    assert all(r["scaling_series"] is None for r in rows if r["reason"])


def test_rows_keep_the_breakdowns_bytes_and_profile(rows: list[dict]) -> None:
    """Every simulated row: the breakdown sums to the step time, the memory parts to the
    memory per GPU, bytes per link scope, the GPU's capacity and the profile used."""
    for r in (r for r in rows if not r["reason"]):
        parts = [v for k, v in r.items() if k.startswith("breakdown.")]
        assert sum(parts) == pytest.approx(r["step_time_s"], rel=1e-9)
        mem = [v for k, v in r.items() if k.startswith("memory_breakdown.")]
        assert sum(mem) == pytest.approx(r["memory_per_gpu_bytes"], rel=1e-9)
        assert (
            r["link_bytes_by_scope.net"] > 0 if r["gpus"] > 8 else r["link_bytes_by_scope.net"] == 0
        )
        assert r["link_bytes_by_scope.nvlink"] > 0
        assert r["gpu"] == "H100-SXM" and r["hbm_bytes"] == 80e9  # the catalog: 80 GB
        assert r["throughput_unit"] == "tokens/s"
        # the profile `clustersim run` chooses for the same point (one resolution path)
        point = [f"cluster.topology={r['cluster.topology']}", f"cluster.nodes={r['cluster.nodes']}"]
        alone = simulate_step(load_scenario("llama3-8b-dgx", [*SETS, *point]))
        assert r["profile"] == alone.profile["name"] and r["step_time_s"] == alone.step_time_s


def test_results_do_not_depend_on_the_number_of_workers(tmp_path: Path) -> None:
    spec = sweep_spec("llama3-8b-dgx", GRID, SETS)
    one = run_sweep(spec, tmp_path / "one.csv", jobs=1, progress=False)
    two = run_sweep(spec, tmp_path / "two.csv", jobs=2, progress=False)
    assert one == two
    assert (tmp_path / "one.csv").read_bytes() == (tmp_path / "two.csv").read_bytes()


def test_the_report_reads_a_sweep_file(tmp_path: Path) -> None:
    out = tmp_path / "s.jsonl"
    run_sweep(sweep_spec("llama3-8b-dgx", GRID, SETS), out, progress=False)
    rs = load_results(out)
    assert rs.kind == "sweep" and len(rs.records) == 8
    assert rs.records[0].grid == {"cluster.topology": "h100-ib-ndr", "cluster.nodes": 1}


def test_parquet_round_trips(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    import pandas as pd

    out = tmp_path / "s.parquet"
    rows = run_sweep(sweep_spec("llama3-8b-dgx", GRID, SETS), out, progress=False)
    frame = pd.read_parquet(out)
    assert list(frame["step_time_s"].isna()) == [r["step_time_s"] is None for r in rows]
    assert not (tmp_path / "s.parquet.partial.jsonl").exists()


def test_an_existing_file_is_not_overwritten_without_resume(tmp_path: Path) -> None:
    out = tmp_path / "s.csv"
    out.write_text("x\n")
    with pytest.raises(ConfigError, match="--resume"):
        run_sweep(sweep_spec("llama3-8b-dgx", GRID, SETS), out, progress=False)


def test_resuming_another_sweeps_file_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "s.csv"
    run_sweep(sweep_spec("llama3-8b-dgx", GRID, SETS), out, progress=False)
    other = sweep_spec(
        "llama3-8b-dgx",
        ["cluster.topology=h100-ib-ndr,h100-tcp-100g", "cluster.nodes=1,2,4,8"],
        SETS,
    )
    with pytest.raises(ConfigError, match=r"point 2 has cluster\.nodes=3"):
        run_sweep(other, out, resume=True, progress=False)


def test_resume_after_a_kill_neither_loses_nor_repeats_a_point(tmp_path: Path) -> None:
    """Kill a real sweep (and its workers) mid-way, resume it, compare with a whole run."""
    whole, part = tmp_path / "whole.csv", tmp_path / "part.csv"
    assert sweep_cli(*SLOW, "--out", str(whole)).returncode == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "sim", "sweep", *SLOW, "--jobs", "2", "--out", str(part)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if part.exists() and part.read_text().count("\n") >= 4:  # header + 3 rows
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    written = part.read_text().count("\n") - 1
    assert 3 <= written < 24, f"the kill came too late to test anything ({written} rows)"
    with part.open("a") as f:
        f.write("5,dgx-h100,2")  # a row cut mid-write: resume drops it
    p = sweep_cli(*SLOW, "--out", str(part), "--resume")
    assert p.returncode == 0, p.stderr
    assert part.read_bytes() == whole.read_bytes()


def test_cli_prints_json_and_csv() -> None:
    common = ["llama3-8b-dgx", *(x for g in GRID for x in ("--grid", g))]
    common += [x for s in SETS for x in ("--set", s)] + ["--no-progress"]
    js = sweep_cli(*common, "--json")
    assert js.returncode == 0, js.stderr
    assert len(json.loads(js.stdout)) == 8
    cs = sweep_cli(*common, "--csv")
    lines = cs.stdout.splitlines()
    assert lines[0].startswith("point,cluster.topology,cluster.nodes,gpus,gpu,step_time_s")
    assert len(lines) == 9


def test_progress_goes_to_stderr_with_an_eta() -> None:
    p = sweep_cli("llama3-8b-dgx", "--grid", "cluster.nodes=1,2", "--set", "network=analytical",
                  "--set", "cluster.topology=h100-ib-ndr", "--set", "parallel.dp=null")  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "2/2" in p.stderr and "<" in p.stderr  # tqdm's elapsed<remaining


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--grid", "parallel.tpp=1,2"], "unknown key 'tpp' in parallel"),
        (["--grid", "parallel.tp"], "expected KEY=V1,V2"),
        (["--grid", "parallel.tp=1", "--backend", "spark"], "--backend 'spark' is unknown"),
        (["--grid", "parallel.tp=1", "--out", "x.txt"], "unknown type '.txt'"),
        (["--grid", "parallel.tp=1", "--resume"], "--resume needs --out"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    p = sweep_cli("gpt2-1gpu", "--no-progress", *args)
    assert p.returncode == 2
    assert message in p.stderr and "Traceback" not in p.stderr


def test_grid_values_are_yaml_scalars() -> None:
    assert parse_grid(["a.b=1,x,true,2.5"]) == [("a.b", (1, "x", True, 2.5))]


def test_study_files_combine_cases_with_the_grid(tmp_path: Path) -> None:
    study = tmp_path / "s.yaml"
    study.write_text(
        "scenario: gpt2-1gpu\n"
        "grid: {parallel.micro_batch: [1, 2]}\n"
        "cases: [{training.global_batch: 8}, {training.global_batch: 16}]\n"
    )
    spec = sweep_spec(str(study))
    assert spec.keys == ["training.global_batch", "parallel.micro_batch"]
    assert list(spec.points())[1] == {"training.global_batch": 8, "parallel.micro_batch": 2}
    assert len(spec) == 4


@pytest.mark.slow
def test_ray_backend_gives_the_same_rows() -> None:
    pytest.importorskip("ray")
    spec = sweep_spec("llama3-8b-dgx", GRID, SETS)
    assert run_sweep(spec, backend="ray", jobs=2, progress=False) == run_sweep(spec, progress=False)


def test_the_text_table_names_the_rows_throughput_unit() -> None:
    """A CNN sweep's throughput column says images/s, a transformer's tokens/s."""
    from sim.cli.sweep import table

    row = {"gpus": 8, "step_time_s": 1.0, "tokens_per_s": 100.0, "mfu": 0.5,
           "memory_per_gpu_bytes": 2**30, "fits": True}  # fmt: skip
    assert "images/s" in table([{**row, "throughput_unit": "images/s"}], []).splitlines()[0]
    assert "tokens/s" in table([{**row, "throughput_unit": "tokens/s"}], []).splitlines()[0]
