"""``clustersim compare`` (issue 21, part 5): runs side by side, fabric cost included.

Closed forms: the cost per step is the GPUs' hours at (GPU price + fabric per GPU-hour);
each delta is (run / baseline - 1) in percent; the JSON is a list of run records that
``report`` reads; the CSV flattens the same records.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest

from sim.cli import main
from sim.errors import ConfigError
from sim.report.loaders import load_results
from sim.studies.compare import DELTA_KEYS, Variant, compare, parse_variant

BASE = ["llama3-8b-dgx", "--network", "analytical", "--set", "cluster.nodes=2",
        "--set", "parallel.dp=16", "--set", "training.global_batch=64",
        "--variant", "ib: cluster.topology=h100-ib-ndr",
        "--variant", "roce: cluster.topology=h100-roce-400g"]  # fmt: skip


@pytest.fixture(scope="module")
def records() -> list[dict[str, Any]]:
    sets = ("cluster.nodes=2", "parallel.dp=16", "training.global_batch=64", "training.tokens=1e9")
    runs = [Variant("ib", "llama3-8b-dgx", (*sets, "cluster.topology=h100-ib-ndr")),
            Variant("roce", "llama3-8b-dgx", (*sets, "cluster.topology=h100-roce-400g"))]  # fmt: skip
    return compare(runs, network="analytical")


def test_every_record_carries_the_asked_keys(records: list[dict[str, Any]]) -> None:
    for r in records:
        for k in ("step_time_s", "cost_per_step_usd", "fabric_capex_usd", "fabric_power_w",
                  "breakdown", "mfu", "memory_per_gpu_bytes", "energy_per_step_kwh"):  # fmt: skip
            assert r[k] is not None, k
        assert r["fabric_capex_usd"] > 0 and r["fabric_power_w"] > 0
    assert [r["label"] for r in records] == ["ib", "roce"]


def test_cost_per_step_is_gpu_hours_at_gpu_plus_fabric_price(records: list[dict[str, Any]]) -> None:
    for r in records:
        hours = r["gpus"] * r["step_time_s"] / 3600
        assert r["cost_per_step_usd"] == pytest.approx(
            hours * (r["gpu_hour_usd"] + r["fabric_per_gpu_hour_usd"]))  # fmt: skip
        assert r["cost_per_million_tokens_usd"] == pytest.approx(
            r["cost_per_step_usd"] / (64 * 8192) * 1e6)  # fmt: skip
        t = r["train"]
        assert t["steps"] == 1908 and t["cost_usd"] == pytest.approx(1908 * r["cost_per_step_usd"])


def test_deltas_are_against_the_first_run(records: list[dict[str, Any]]) -> None:
    base, other = records
    assert all(base["delta_pct"][k] in (0.0, None) for k in DELTA_KEYS)
    assert other["delta_pct"]["fabric_capex_usd"] == pytest.approx(
        100 * (other["fabric_capex_usd"] / base["fabric_capex_usd"] - 1))  # fmt: skip
    assert other["delta_pct"]["step_time_s"] == pytest.approx(
        100 * (other["step_time_s"] / base["step_time_s"] - 1))  # fmt: skip


def test_json_is_a_report_input_and_csv_flattens_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compare", *BASE, "--json"]) == 0
    path = tmp_path / "cmp.json"
    path.write_text(capsys.readouterr().out)
    rs = load_results(path)
    assert rs.kind == "run" and len(rs.records) == 2
    assert main(["compare", *BASE, "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["label"] for r in rows] == ["ib", "roce"] and "breakdown.compute" in rows[0]
    path = tmp_path / "cmp.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    assert load_results(path).kind == "sweep"


def test_text_has_the_table_the_breakdown_and_the_profiles(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["compare", *BASE]) == 0
    out = capsys.readouterr().out
    assert "deltas against the first (ib)" in out and "breakdown (s)" in out
    roce = next(x for x in out.splitlines() if x.startswith("roce "))
    assert "%" in roce and "$" in roce
    assert "profiles: ib: " in out


def test_scenarios_side_by_side_without_variants(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["compare", "llama2-70b-256-ib", "llama2-70b-256-roce", "--network", "analytical",
            "--json"]  # fmt: skip
    assert main(argv) == 0
    recs = json.loads(capsys.readouterr().out)
    assert [r["topology"] for r in recs] == ["h100-ib-ndr", "h100-roce-400g"]
    assert recs[0]["fabric_capex_usd"] != recs[1]["fabric_capex_usd"]


@pytest.mark.parametrize(
    ("text", "expect"),
    [("a b: x=1 y=2", ("a b", ("x=1", "y=2"))), ("x=1", (None, ("x=1",))),
     ("2:1: cluster.topology=t", ("2:1", ("cluster.topology=t",)))],
)  # fmt: skip
def test_variants_parse(text: str, expect: tuple[Any, ...]) -> None:
    assert parse_variant(text) == expect


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["compare", "llama3-8b-dgx"], "two or more"),
        (["compare", "llama3-8b-dgx", "--variant", "a: x=1", "--variant", "a: y=2"], "both labelled 'a'"),
        (["compare", "llama3-8b-dgx", "--variant", "nothing"], "--variant 'nothing'"),
        (["compare", "llama3-8b-dgx", "--variant", "b: parallel.tp=3", "--variant", "c: parallel.tp=1",
          "--network", "analytical"], r"^clustersim: error: b: "),
        # a missing file is named once, not as "x.yaml: scenario 'x.yaml': ..."
        (["compare", "no/such.yaml", "llama3-8b-dgx"],
         r"^clustersim: error: scenario file not found: no/such.yaml$"),
    ],
)  # fmt: skip
def test_bad_comparisons_are_refused_in_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import re

    assert main(argv) == 2
    err = [x for x in capsys.readouterr().err.splitlines() if not x.startswith("[")]
    assert len(err) == 1 and re.search(message, err[0])


def test_fewer_than_two_runs_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        compare([Variant("a", "llama3-8b-dgx")])


def test_layer_list_scenarios_are_compared_with_their_fabric(tmp_path: Path) -> None:
    path = tmp_path / "cnn.yaml"
    path.write_text(
        "model: {preset: resnet50}\ncluster: {topology: h100-ib-ndr, nodes: 2}\n"
        "parallel: {micro_batch: 128}\ntraining: {global_batch: 2048, precision: bf16}\n"
        "network: analytical\n"
    )
    recs = compare([Variant("ib", str(path)),
                    Variant("tcp", str(path), ("cluster.topology=h100-tcp-100g",))])  # fmt: skip
    assert recs[0]["fabric_capex_usd"] > recs[1]["fabric_capex_usd"] > 0
