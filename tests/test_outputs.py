"""Outputs people can use: --version, python -m sim, --csv, streamed collective rows, data frames,
per-link rows of a run, --plot and the report command."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

import sim
from sim import load_scenario, simulate_step
from sim.cli import main
from tests.helpers import REPO


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sim", *args], capture_output=True, text=True,
                          check=False, cwd=REPO)  # fmt: skip


def test_version_and_python_dash_m() -> None:
    p = cli("--version")
    assert p.returncode == 0 and p.stdout.strip() == f"clustersim {sim.__version__}"


def test_run_csv_is_the_flat_record(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "gpt2-1gpu", "--network", "analytical", "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 1
    rec = simulate_step(load_scenario("gpt2-1gpu"), network="analytical").to_record()
    assert list(rows[0]) == list(rec)
    assert float(rows[0]["step_time_s"]) == rec["step_time_s"]
    assert rows[0]["plan.tp"] == "1" and rows[0]["fits"] == "true"


def test_to_record_is_flat_and_keeps_every_number() -> None:
    r = simulate_step(load_scenario("llama3-8b-dgx"), network="analytical")
    rec = r.to_record()
    assert all(not isinstance(v, (dict, list)) for v in rec.values())
    assert sum(v for k, v in rec.items() if k.startswith("breakdown.")) == pytest.approx(
        r.step_time_s
    )
    assert rec["memory_breakdown.weights"] == r.memory_breakdown["weights"]


def test_results_frame_has_a_row_per_result() -> None:
    pd = pytest.importorskip("pandas")
    results = [simulate_step(load_scenario("gpt2-1gpu", [f"parallel.micro_batch={m}"]), network="analytical")
               for m in (1, 2)]  # fmt: skip
    df = sim.results_frame(results)
    assert isinstance(df, pd.DataFrame) and len(df) == 2
    assert list(df["plan.micro_batch"]) == [1, 2]
    assert list(df["step_time_s"]) == [r.step_time_s for r in results]


def test_collective_csv_has_a_row_per_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["collective", "--topology", "dgx-h100", "-b", "1M", "-e", "4M", "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [int(float(r["size_bytes"])) for r in rows] == [2**20, 2**21, 2**22]
    assert all(float(r["busbw_GBps"]) > 0 for r in rows)


def test_collective_prints_each_row_as_soon_as_it_is_computed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rows computed before a later size fails are already on stdout."""
    import sim.collectives.simulate as simulate

    real = simulate.simulate_collective
    calls = []

    def third_fails(*args: object, **kw: object) -> object:
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(simulate, "simulate_collective", third_fails)
    assert main(["collective", "--topology", "dgx-h100", "-b", "1M", "-e", "16M"]) == 130
    out, err = capsys.readouterr()
    rows = [line for line in out.splitlines() if not line.startswith("#")]
    assert len(rows) == 2
    assert err.strip() == "clustersim: error: interrupted"  # Ctrl-C: one line, no traceback


def test_run_json_has_per_link_rows_on_the_flow_network(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "llama3-8b-dgx", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    links = rec["links"]
    assert links and all(0 <= lk["utilisation"] <= 1 for lk in links)
    assert sum(lk["bytes"] for lk in links) > 0
    from sim.report import ResultSet

    assert ResultSet.from_dicts([rec]).records[0].links is not None


def test_plot_on_run_sweep_and_collective(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    run_svg, coll_png, sweep_svg = tmp_path / "r.svg", tmp_path / "c.png", tmp_path / "s.svg"
    assert main(["run", "gpt2-1gpu", "--network", "analytical", "--plot", str(run_svg)]) == 0
    assert (
        main(
            [
                "collective",
                "--topology",
                "dgx-h100",
                "-b",
                "1M",
                "-e",
                "4M",
                "--plot",
                str(coll_png),
            ]
        )
        == 0
    )
    assert main(["sweep", "llama3-8b-dgx", "--grid", "cluster.nodes=1,2", "--set", "cluster.topology=h100-ib-ndr",
                 "--set", "parallel.dp=null", "--network", "analytical", "--no-progress",
                 "--plot", str(sweep_svg)]) == 0  # fmt: skip
    assert run_svg.read_text().lstrip().startswith(("<?xml", "<svg"))
    assert coll_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in sweep_svg.read_text()


def test_report_command_renders_run_plan_and_sweep_files(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    run_json, plan_json, sweep_csv = (
        tmp_path / "run.json",
        tmp_path / "plan.json",
        tmp_path / "s.csv",
    )
    run_json.write_text(cli("run", "llama3-8b-dgx", "--json").stdout)
    plan_json.write_text(cli("plan", "llama3-8b-dgx", "--top", "3", "--json").stdout)
    p = cli("sweep", "llama3-8b-dgx", "--grid", "cluster.nodes=1,2,4", "--set", "cluster.topology=h100-ib-ndr",
            "--set", "parallel.dp=null", "--network", "analytical", "--no-progress",
            "--out", str(sweep_csv))  # fmt: skip
    assert p.returncode == 0, p.stderr
    out = tmp_path / "report.html"
    p = cli("report", str(run_json), str(plan_json), str(sweep_csv), "--out", str(out))
    assert p.returncode == 0, p.stderr
    html = out.read_text()
    assert html.count("<svg") >= 4 and "http://" not in html.replace("http://www.w3.org", "")


def test_report_of_a_bad_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    p = cli("report", str(bad), "--out", str(tmp_path / "r.html"))
    assert p.returncode == 2 and "not valid JSON" in p.stderr and "Traceback" not in p.stderr
