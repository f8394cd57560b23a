"""A topology or profile file edited between two steps in one process is read again.

The step keeps results, built topologies and resolved profiles across calls (a sweep, a
plan and the Python API ask again); files named by path are part of those keys through
their modification time and size, so a notebook that edits its profile and asks again
gets the new answer, not the kept one. Found 2026-12-02: both edits below used to return
the first step time unchanged.
"""

from __future__ import annotations

import os
from pathlib import Path

from sim.files import file_stamp
from sim.scenario.load import Scenario, scenario_from_dict
from sim.training.step import simulate_step

ROOT = Path(__file__).resolve().parents[1]


def _later(path: Path, text: str) -> None:
    """Write ``text`` with a modification time one second after the old one (an edit a
    person makes: file times have the kernel tick's granularity, ~4 ms)."""
    old = path.stat() if path.exists() else None
    path.write_text(text)
    if old is not None:
        os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns + 10**9))


def _scenario(topo: Path, profile: Path) -> Scenario:
    raw = {
        "model": {"preset": "llama3-8b"},
        "cluster": {"topology": str(topo), "nodes": 1},
        "parallel": {"dp": 8, "micro_batch": 1},
        "training": {"global_batch": 8, "seq_len": 4096},
        "network": "analytical",
        "profile": str(profile),
    }
    return scenario_from_dict(raw, "edited")


def _profile(attn: float) -> str:
    return f"schema: clustersim.profile/1\nname: edited\ncompute: {{attn_eff_max: {attn}}}\n"


def test_an_edited_profile_and_topology_change_the_next_step(tmp_path: Path) -> None:
    topo, prof = tmp_path / "t.yaml", tmp_path / "p.yaml"
    text = (ROOT / "topologies" / "h100-ib-ndr.yaml").read_text()
    _later(topo, text)
    _later(prof, _profile(0.2))
    first = simulate_step(_scenario(topo, prof)).step_time_s
    assert simulate_step(_scenario(topo, prof)).step_time_s == first  # unchanged: kept
    _later(prof, _profile(0.8))  # faster attention
    faster = simulate_step(_scenario(topo, prof)).step_time_s
    assert faster < first
    _later(topo, text.replace("gpu: H100-SXM\n", "gpu: H200\n"))  # same die, more HBM bandwidth
    r = simulate_step(_scenario(topo, prof))
    assert r.step_time_s != faster and r.gpu == "H200"
    _later(prof, _profile(0.2))  # back to the first profile on the first cluster: same answer
    _later(topo, text)
    assert simulate_step(_scenario(topo, prof)).step_time_s == first


def test_file_stamp_names_files_only(tmp_path: Path) -> None:
    f = tmp_path / "x.yaml"
    f.write_text("a: 1\n")
    assert file_stamp(str(f)) == (f.stat().st_mtime_ns, 5)
    assert file_stamp(str(tmp_path)) is None  # a folder
    assert file_stamp(str(tmp_path / "missing.yaml")) is None
    assert file_stamp("dgx-h100") is None and file_stamp("none") is None
