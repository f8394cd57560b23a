"""``clustersim run`` reaches the layers over the step: scenario sections in, whole run out.

The README's "Beyond the step" command (``clustersim run llama3-405b-16k``) runs once per
module with ``--json``; its parts must be exactly what the library functions return for the
same inputs (sim.reliability, sim.cost), the cost at every price preset must be
time x GPUs x price, and the README's YAML must be the preset's sections. Smaller checks
(text block, CSV, determinism, errors, no change without the sections) use GPT-2 on one GPU.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.beyond.whole_run import price_table
from sim.cli import main
from sim.cost import (
    EnergyConfig,
    PriceConfig,
    PriceQuote,
    price_preset,
    price_preset_names,
    resolve_price,
    training_cost,
    training_energy,
)
from sim.packaged import read_table
from sim.reliability import (
    ReliabilityConfig,
    SpotConfig,
    goodput_estimate,
    job_plan,
    simulate_goodput,
    spot_comparison,
)
from sim.workload.models import model_preset, param_count
from tests.helpers import REPO

NEW_KEYS = ("training_run", "reliability", "prices", "spot", "energy")
PRESET = REPO / "scenarios" / "llama3-405b-16k.yaml"
GPT2_ALL = ["run", "gpt2-1gpu", "--set", "training.tokens=1e9", "--set",
            "reliability.simulate_runs=4", "--set", "reliability.restart_s=60", "--set",
            "spot.discount=0.5", "--set", "spot.preemptions_per_node_hour=0.01",
            "--set", "energy.pue=1.2"]  # fmt: skip


def cli(*argv: str) -> tuple[int, str, str]:
    """Run the CLI in-process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def readme_section() -> str:
    text = (REPO / "README.md").read_text()
    return text.split("## Beyond the step", 1)[1].split("\n## ", 1)[0]


def readme_argv() -> list[str]:
    """The one command of the README's "Beyond the step" bash block."""
    blocks = re.findall(r"```bash\n(.*?)```", readme_section(), flags=re.S)
    assert len(blocks) == 1
    lines = [ln for ln in blocks[0].splitlines() if ln.strip()]
    assert len(lines) == 1
    argv = shlex.split(lines[0], comments=True)
    assert argv[:2] == ["clustersim", "run"]
    return argv[1:]


@pytest.fixture(scope="module")
def preset_run() -> dict[str, Any]:
    """The README command with ``--json`` (one ~5 s step on the analytical network)."""
    code, out, err = cli(*readme_argv(), "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def preset_raw() -> dict[str, Any]:
    return yaml.safe_load(PRESET.read_text())


def _json(value: Any) -> Any:
    """A library result as it reads back from ``--json``."""
    return json.loads(json.dumps(value, sort_keys=True))


def test_readme_yaml_is_the_shipped_presets_sections(preset_raw: dict[str, Any]) -> None:
    """The README shows the preset's own opt-in sections, so it cannot drift from it."""
    blocks = re.findall(r"```yaml\n(.*?)```", readme_section(), flags=re.S)
    assert len(blocks) == 1
    shown = yaml.safe_load(blocks[0])
    assert shown["training"] == {"tokens": preset_raw["training"]["tokens"]}
    for key in ("reliability", "spot", "price", "energy"):
        assert shown[key] == preset_raw[key], key
    assert readme_argv() == ["run", PRESET.stem]


def test_sections_round_trip_to_the_json(preset_run: dict[str, Any],
                                         preset_raw: dict[str, Any]) -> None:  # fmt: skip
    rel, spot, price = preset_raw["reliability"], preset_raw["spot"], preset_raw["price"]
    assert set(NEW_KEYS) <= set(preset_run)
    assert preset_run["training_run"]["tokens"] == float(preset_raw["training"]["tokens"])
    assert preset_run["reliability"]["restart_s"] == rel["restart_s"]
    assert preset_run["reliability"]["storage"] == rel["storage"]
    assert preset_run["reliability"]["interval_policy"] == rel["interval"]
    assert preset_run["reliability"]["simulation"]["runs"] == rel["simulate_runs"]
    assert preset_run["reliability"]["simulation"]["seed"] == preset_raw["seed"]
    assert preset_run["spot"]["discount"] == spot["discount"]
    assert preset_run["prices"]["chosen"]["preset"] == price["preset"]
    facility = read_table("sim.cost", "facility.yaml")
    energy = preset_raw["energy"]
    assert preset_run["energy"]["pue"] == facility["pue"][energy["pue"]]["value"]
    assert (
        preset_run["energy"]["grid_g_per_kwh"]
        == facility["grid_g_per_kwh"][energy["grid"]]["value"]
    )


def test_numbers_are_the_library_functions_outputs(preset_run: dict[str, Any],
                                                   preset_raw: dict[str, Any]) -> None:  # fmt: skip
    """Every part equals the library function called with the step's numbers."""
    step_s, gpus = preset_run["step_time_s"], preset_run["gpus"]
    rel = ReliabilityConfig(**preset_raw["reliability"])
    quote = resolve_price(PriceConfig(preset=preset_raw["price"]["preset"]), "H100-SXM")
    assert quote is not None
    job = {"step_time_s": step_s, "gpus": gpus, "gpus_per_node": 8,
           "params": float(param_count(model_preset("llama3-405b")))}  # fmt: skip
    budget = {"tokens": 15.6e12, "tokens_per_step": 2048.0 * 8192}
    est = goodput_estimate(config=rel, usd_per_gpu_hour=quote.usd_per_gpu_hour, **job, **budget)  # type: ignore[arg-type]
    got = dict(preset_run["reliability"])
    sim_got = got.pop("simulation")
    assert got == _json(est.to_dict())
    plan = job_plan(rel.job(gpus, 8), step_time_s=step_s, checkpoint_s=est.checkpoint_write_s,
                    steps=est.steps, policy=rel.interval)  # fmt: skip
    sim = simulate_goodput(plan.segment_work_s(), est.checkpoint_write_s, rel.job(gpus, 8),
                           runs=20, seed=0)  # fmt: skip
    assert sim_got == _json(sim.to_dict())
    train = training_cost(tokens=15.6e12, tokens_per_step=2048.0 * 8192, step_time_s=step_s, gpus=gpus,
                          usd_per_gpu_hour=quote.usd_per_gpu_hour, wall_time_s=est.expected_wall_time_s)  # fmt: skip
    assert preset_run["training_run"] == _json(train.to_dict())
    spot = spot_comparison(reliability=rel, spot=SpotConfig(**preset_raw["spot"]),
                           usd_per_gpu_hour=quote.usd_per_gpu_hour, **job, **budget)  # type: ignore[arg-type]  # fmt: skip
    assert preset_run["spot"] == _json(spot.to_dict())
    assert est.busy_time_s is not None and est.idle_time_s is not None
    util = preset_run["breakdown"]["compute"] / step_s
    energy = training_energy(gpus=gpus, gpu="H100-SXM", busy_time_s=est.busy_time_s,
                             idle_time_s=est.idle_time_s, utilisation=util,
                             config=EnergyConfig(**preset_raw["energy"]),
                             fabric_w_per_gpu=preset_run["fabric"]["power_per_gpu_w"])  # fmt: skip
    got_energy = dict(preset_run["energy"])
    assert got_energy.pop("notes")[: len(energy.notes)] == energy.notes
    assert got_energy == {k: v for k, v in _json(energy.to_dict()).items() if k != "notes"}


def test_cost_on_every_preset_is_time_x_gpus_x_price(preset_run: dict[str, Any]) -> None:
    prices, wall = preset_run["prices"], preset_run["training_run"]["wall_time_s"]
    h100 = {n for n in price_preset_names() if price_preset(n).gpu == "H100-SXM"}
    assert set(prices["presets"]) == h100 and len(h100) >= 3
    assert prices["wall_time_s"] == wall and prices["gpus"] == 16384
    for name, row in prices["presets"].items():
        entry = price_preset(name)
        assert row["usd_per_gpu_hour"] == entry.server_hour_usd / entry.gpus_per_server
        assert row["as_of"] == entry.as_of and row["source"] == entry.source
        assert row["cost_usd"] == pytest.approx(
            wall * 16384 * row["usd_per_gpu_hour"] / 3600, rel=1e-12
        )
    assert prices["chosen"] == prices["presets"]["lambda-h100"]
    assert prices["chosen"]["cost_usd"] == preset_run["training_run"]["cost_usd"]
    # the step's own cost line uses the preset too
    per_step = preset_run["step_time_s"] * 16384 * 19.92 / 8 / 3600
    assert preset_run["cost_per_step_usd"] == pytest.approx(per_step, rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(wall=st.floats(1.0, 1e8), gpus=st.integers(1, 100_000), usd=st.floats(0.0, 100.0))
def test_price_table_is_linear_and_ordered_by_price(wall: float, gpus: int, usd: float) -> None:
    table = price_table("H100-SXM", gpus, wall, PriceQuote(usd_per_gpu_hour=usd))
    assert table.chosen is not None and table.chosen.preset is None
    assert table.chosen.cost_usd == pytest.approx(gpus * wall / 3600 * usd, rel=1e-12)
    rows = sorted(table.presets.values(), key=lambda r: r.usd_per_gpu_hour)
    costs = [r.cost_usd for r in rows]
    assert costs == sorted(costs)
    for r in rows:
        assert r.cost_usd == pytest.approx(gpus * wall / 3600 * r.usd_per_gpu_hour, rel=1e-12)


def test_text_block_follows_the_step_summary() -> None:
    code, out, err = cli(*GPT2_ALL)
    assert code == 0, err
    step_at = out.index("step time")
    heads = ["whole run: training.tokens 1e+09 = 15,259 steps", "reliability (failure rates:",
             "event simulation  4 runs (seed 0)", "prices (H100-SXM, 1 GPUs)", "spot (50% off",
             "energy (PUE 1.2"]  # fmt: skip
    places = [out.index(h) for h in heads]
    assert step_at < places[0] and places == sorted(places)
    assert " *price.gpu_hour_usd" in out  # the chosen flat price is marked in the table


def test_json_and_csv_are_deterministic_and_agree() -> None:
    runs = [cli(*GPT2_ALL, "--json")[1] for _ in range(2)]
    assert runs[0] == runs[1]
    record = json.loads(runs[0])
    code, out, _ = cli(*GPT2_ALL, "--csv")
    assert code == 0
    header, row = out.splitlines()[:2]
    flat = dict(zip(*csv.reader([header, row]), strict=True))
    assert float(flat["reliability.goodput"]) == record["reliability"]["goodput"]
    assert (
        float(flat["prices.presets.aws-p5.cost_usd"])
        == record["prices"]["presets"]["aws-p5"]["cost_usd"]
    )
    assert (
        float(flat["reliability.simulation.mean_wall_s"])
        == record["reliability"]["simulation"]["mean_wall_s"]
    )
    assert float(flat["energy.co2e_kg"]) == record["energy"]["co2e_kg"]
    assert int(flat["training_run.steps"]) == record["training_run"]["steps"] == 15259


def test_without_the_sections_nothing_new_appears() -> None:
    code, out, _ = cli("run", "gpt2-1gpu", "--json")
    assert code == 0 and not set(NEW_KEYS) & set(json.loads(out))
    code, out, _ = cli("run", "gpt2-1gpu")
    assert code == 0 and "whole run" not in out and "reliability" not in out
    code, out, _ = cli("run", "gpt2-1gpu", "--csv")
    assert code == 0 and not any(c.startswith(NEW_KEYS) for c in out.splitlines()[0].split(","))


def test_a_price_preset_alone_prices_the_step_only() -> None:
    code, out, _ = cli("run", "gpt2-1gpu", "--set", "price.gpu_hour_usd=null",
                       "--set", "price.preset=lambda-h100", "--json")  # fmt: skip
    record = json.loads(out)
    assert code == 0 and not set(NEW_KEYS) & set(record)
    assert record["cost_per_step_usd"] == pytest.approx(
        record["step_time_s"] * 2.49 / 3600, rel=1e-12
    )


BAD = [
    (["llama3-405b-16k", "--set", "training.tokens=-1"], "training.tokens: expected a number of tokens in (0, 1e+18]"),
    (["llama3-405b-16k", "--set", "training.tokens=lots"], "training.tokens"),
    (["llama3-405b-16k", "--set", "price.preset=nope"], "price.preset: unknown preset 'nope'; allowed: "),
    (["llama3-405b-16k", "--set", "price.gpu_hour_usd=2"], "give exactly one of price.gpu_hour_usd or price.preset"),
    (["llama3-405b-16k", "--set", "reliability.bogus=1"], "reliability.bogus: unknown key 'bogus' in reliability"),
    (["llama3-405b-16k", "--set", "reliability.restart_s=-5"], "reliability.restart_s"),
    (["llama3-405b-16k", "--set", "energy.pue=0.9"], "energy.pue: PUE must be >= 1"),
    (["llama3-405b-16k", "--set", "spot.discount=1.5"], "spot.discount"),
    (["gpt2-1gpu", "--set", "spot.discount=0.5", "--set", "spot.monthly_interruption=0.05"],
     "spot: needs a reliability section"),
    (["gpt2-1gpu", "--set", "reliability.simulate_runs=3"], "reliability.simulate_runs: needs training.tokens"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "message"), BAD, ids=[" ".join(a[1:]) for a, _ in BAD])
def test_bad_values_exit_2_with_one_line(args: list[str], message: str) -> None:
    code, out, err = cli("run", *args)
    assert code == 2 and not out
    assert len(err.strip().splitlines()) == 1 and message in err, err


def test_unknown_key_in_a_file_names_it(tmp_path: Path, preset_raw: dict[str, Any]) -> None:
    raw = {**preset_raw, "reliability": {**preset_raw["reliability"], "mtbf": 3}}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    code, _, err = cli("run", str(path))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "reliability.mtbf: unknown key; allowed: failures," in err
