"""The step trace: a process per GPU (or representatives, said so), four tracks, link counters."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from sim.cli import main
from sim.scenario.load import load_scenario
from sim.training.step import run_step
from sim.training.trace import MAX_GPU_PROCESSES, TRACKS, chrome_trace


def _doc(name: str, sets: list[str], network: str = "flow") -> dict:
    _, run, setup = run_step(load_scenario(name, sets), network, record=network == "flow")
    return chrome_trace(setup, run)


def _process_names(doc: dict) -> list[str]:
    return [e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"]


def _spans(doc: dict, track: str) -> list[dict]:
    return [e for e in doc["traceEvents"] if e["ph"] == "X" and e["tid"] == TRACKS[track]]


def test_every_gpu_of_a_small_cluster_has_a_process_with_four_tracks() -> None:
    doc = _doc(
        "llama3-8b-dgx", ["parallel.tp=2", "parallel.zero=1", "parallel.dp=4", "parallel.sp=true"]
    )
    gpus = [n for n in _process_names(doc) if "stage" in n]
    assert len(gpus) == 8 and len({n.split(":")[0] for n in gpus}) == 8
    threads = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert threads == set(TRACKS)
    assert _spans(doc, "tp/sp comm"), "TP/SP collectives are drawn, not folded into compute"
    assert any(e["name"].startswith("dp_") for e in _spans(doc, "dp/zero comm"))
    assert any(e["name"] == "param all_gather" for e in _spans(doc, "dp/zero comm"))


def test_zero3_gathers_and_pipeline_sends_have_their_tracks() -> None:
    z3 = _doc("llama3-8b-dgx", [], "analytical")  # the preset is ZeRO-3
    assert any("zero3 gather" in e["name"] for e in _spans(z3, "dp/zero comm"))
    pp = _doc("llama3-8b-dgx", ["parallel.pp=2", "parallel.dp=4", "parallel.zero=0"])
    assert _spans(pp, "pp send")


def test_thousands_of_gpus_get_representatives_and_a_note() -> None:
    doc = _doc("gpt3-175b-1024", [], "analytical")
    names = _process_names(doc)
    assert len(names) == 8 * 8 <= MAX_GPU_PROCESSES  # tp x pp GPUs of replica 0
    assert all("stands for 16 GPUs" in n for n in names)
    assert "replica 0" in doc["otherData"]["note"] and doc["otherData"]["gpus"] == 1024


def test_counters_per_link_and_per_class_on_the_flow_network() -> None:
    doc = _doc("llama3-8b-dgx", ["parallel.zero=1"])
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    names = {e["name"] for e in counters}
    assert "utilisation per class" in names
    links = names - {"utilisation per class"}
    assert links and all("->" in n for n in links)
    assert all(
        0.0 <= e["args"]["utilisation"] <= 1.0 + 1e-9 for e in counters if e["name"] in links
    )


def test_the_trace_file_is_readable_by_others_and_deterministic(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for f in (a, b):
        assert main(["run", "gpt2-1gpu", "--trace", str(f)]) == 0
    assert stat.S_IMODE(a.stat().st_mode) == 0o644
    assert a.read_bytes() == b.read_bytes()
    assert json.loads(a.read_text())["traceEvents"]
