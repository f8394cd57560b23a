"""Result files into records: formats, kind detection, one-line errors for bad files, and
what a core install (no matplotlib) does.

Nothing here needs matplotlib: loading is part of the core install.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from sim.errors import ClusterSimError, ConfigError
from sim.report import (
    CollectiveRecord,
    MissingExtraError,
    PlanRecord,
    ResultSet,
    RunRecord,
    SweepRow,
    load_results,
    plot_for,
    render_report,
)
from tests.helpers import REPO
from tests.report_inputs import collective_dicts, plan_dicts, run_dicts, sweep_rows, with_links


@pytest.fixture(scope="module")
def inputs(result_files: list[Path]) -> dict[str, Path]:
    return {p.name: p for p in result_files}


def test_each_file_loads_as_its_kind(inputs: dict[str, Path]) -> None:
    """JSON object -> run, list with 'parallel' -> plan, CSV -> sweep, busbw rows -> collective."""
    kinds = {name: load_results(p).kind for name, p in inputs.items()}
    assert kinds == {
        "run-8b.json": "run",
        "run-70b.json": "run",
        "plans.json": "plan",
        "sweep.csv": "sweep",
        "collective-dgx.json": "collective",
        "collective-ib.jsonl": "collective",
    }


def test_run_record_keeps_the_simulators_numbers(inputs: dict[str, Path]) -> None:
    """The record holds exactly what `run --json` wrote, links included."""
    rs = load_results(inputs["run-8b.json"])
    (run,) = rs.records
    expected = with_links(run_dicts()[0])
    assert isinstance(run, RunRecord)
    assert run.step_time_s == expected["step_time_s"]
    assert run.breakdown == expected["breakdown"]
    assert run.memory_breakdown == expected["memory_breakdown"]
    assert run.links is not None and len(run.links) == len(expected["links"])
    assert rs.source == str(inputs["run-8b.json"])


def test_cli_run_json_loads(tmp_path: Path) -> None:
    """The real `clustersim run --json` output is a valid run record (no links today)."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "sim.cli",
            "run",
            "llama3-8b-dgx",
            "--network",
            "analytical",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    ).stdout
    path = tmp_path / "run.json"
    path.write_text(out)
    (run,) = load_results(path).records
    assert run.links is None
    assert math.isclose(sum(run.breakdown.values()), run.step_time_s, rel_tol=1e-9)


def test_plans_stay_best_first(inputs: dict[str, Path]) -> None:
    plans = load_results(inputs["plans.json"]).records
    assert all(isinstance(p, PlanRecord) for p in plans)
    assert [p.parallel for p in plans] == [p["parallel"] for p in plan_dicts()]


def test_csv_sweep_rows_round_trip(inputs: dict[str, Path]) -> None:
    """Numbers come back as numbers, grid keys as extras in file order, empty cells as None."""
    rows = load_results(inputs["sweep.csv"]).records
    source = sweep_rows()
    assert len(rows) == len(source)
    for row, src in zip(rows, source, strict=True):
        assert isinstance(row, SweepRow)
        assert list(row.grid) == ["topology", "nodes", "parallel.zero"]
        assert row.grid["nodes"] == src["nodes"]
        assert row.ok == ("reason" not in src)
        if row.ok:
            assert row.step_time_s == pytest.approx(src["step_time_s"], rel=1e-15)
            assert row.fits is src["fits"]
        else:
            assert row.step_time_s is None and row.reason == src["reason"]


def test_jsonl_collectives(inputs: dict[str, Path]) -> None:
    recs = load_results(inputs["collective-ib.jsonl"]).records
    assert all(isinstance(r, CollectiveRecord) for r in recs)
    assert [r.size_bytes for r in recs] == [
        r["size_bytes"] for r in collective_dicts("h100-ib-ndr", 16)
    ]


def test_newer_fields_are_ignored() -> None:
    """A record from a newer simulator (an unknown field) still loads."""
    run = {**run_dicts()[0], "energy_j": 1.0}
    assert ResultSet.from_dicts([run]).kind == "run"


def test_non_finite_sweep_metrics_read_as_missing() -> None:
    row = SweepRow.model_validate({"gpus": 8, "reason": "boom", "step_time_s": float("nan")})
    assert row.step_time_s is None and not row.ok


def test_forced_kind_must_exist(inputs: dict[str, Path]) -> None:
    with pytest.raises(ConfigError, match="result kind 'bogus' is unknown; allowed: run, plan"):
        load_results(inputs["run-8b.json"], kind="bogus")


BAD_FILES = [
    ("missing.json", None, "no such file"),
    ("r.yaml", "a: 1", "unknown result file type '.yaml'; allowed: .json, .jsonl, .csv"),
    ("r.json", '{"step_time_s": 1,', "not valid JSON (line 1 column"),
    ("r.jsonl", '{"gpus": 8, "reason": "x"}\n{oops}\n', "line 2: not valid JSON"),
    ("r.json", "[]", "no records"),
    ("r.json", "3", "expected a JSON object or list, got int"),
    ("r.json", "[1]", "record 1 is int, not an object"),
    ("r.json", '[{"hello": 1}]', "cannot tell what these results are (fields: hello)"),
    ("r.csv", "", "empty CSV file"),
    ("r.csv", "gpus,step_time_s\n8,1,2\n", "line 2 has more cells than the header"),
    ("r.csv", "gpus,step_time_s\n8,1\n", "missing tokens_per_s, tflops_per_gpu, mfu"),
    ("r.csv", "gpus,reason\nmany,x\n", "gpus: Input should be a valid integer"),
]


@pytest.mark.parametrize(("name", "text", "message"), BAD_FILES)
def test_bad_files_fail_in_one_line(
    tmp_path: Path, name: str, text: str | None, message: str
) -> None:
    """Each bad file gives one ConfigError line naming the file and the problem."""
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_results(path)
    msg = str(err.value)
    assert message in msg
    assert str(path) in msg and "\n" not in msg


def test_bad_field_is_named_with_its_record_and_value(tmp_path: Path) -> None:
    plans = [dict(p) for p in plan_dicts()]
    plans[2]["step_time_s"] = "slow"
    path = tmp_path / "plans.json"
    path.write_text(json.dumps(plans))
    with pytest.raises(ConfigError) as err:
        load_results(path)
    expected = "step_time_s: Input should be a valid number, unable to parse string as a number (got 'slow')"
    assert str(err.value) == f"{path}: record 3: {expected}"


def test_bad_link_row_is_refused() -> None:
    run = with_links(run_dicts()[0])
    run["links"][1] = {**run["links"][1], "utilisation": 1.5}
    with pytest.raises(
        ConfigError, match=r"links\.1\.utilisation: Input should be less than or equal to 1"
    ):
        ResultSet.from_dicts([run], source="r.json")


def test_missing_required_field_is_named() -> None:
    run = dict(run_dicts()[0])
    del run["memory_breakdown"]
    with pytest.raises(ConfigError, match=r"^r\.json: memory_breakdown: Field required$"):
        ResultSet.from_dicts([run], source="r.json")


def test_errors_are_the_projects_user_errors() -> None:
    assert issubclass(ConfigError, ClusterSimError)


def test_core_install_does_not_import_matplotlib(inputs: dict[str, Path]) -> None:
    """Importing the package and loading results leaves matplotlib unimported."""
    code = (
        "import sys, sim, sim.cli, sim.report\n"
        f"sim.report.load_results({str(inputs['sweep.csv'])!r})\n"
        "print('matplotlib' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert out.stdout.strip() == "False"


@pytest.fixture
def no_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import matplotlib`` fail, as on a core install."""
    for name in list(sys.modules):
        if name == "matplotlib" or name.startswith("matplotlib."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)


def test_report_without_matplotlib_names_the_extra(
    no_matplotlib: None, inputs: dict[str, Path], tmp_path: Path
) -> None:
    rs = load_results(inputs["run-8b.json"])
    with pytest.raises(MissingExtraError, match=r"pip install 'clustersim\[plot\]'") as err:
        render_report([rs], tmp_path / "r.html")
    assert isinstance(err.value, ClusterSimError) and "\n" not in str(err.value)
    assert not (tmp_path / "r.html").exists()


def test_plot_without_matplotlib_names_the_extra(
    no_matplotlib: None, inputs: dict[str, Path], tmp_path: Path
) -> None:
    rs = load_results(inputs["sweep.csv"])
    with pytest.raises(MissingExtraError, match=r"pip install 'clustersim\[plot\]'"):
        plot_for(rs, "scaling", tmp_path / "s.svg")


def test_public_api() -> None:
    """What the CLI and users import from sim.report (pinned: changing it is an API change)."""
    import sim.report

    assert sorted(sim.report.__all__) == sorted(
        [
            "DEFAULT_FIGURE",
            "FIGURE_KINDS",
            "KINDS",
            "CollectiveRecord",
            "LinkRecord",
            "MissingExtraError",
            "PlanRecord",
            "ResultSet",
            "RunRecord",
            "SweepRow",
            "detect_kind",
            "figure_for",
            "load_results",
            "plot_for",
            "render_report",
            "report_html",
        ]
    )
    assert all(hasattr(sim.report, name) for name in sim.report.__all__)
