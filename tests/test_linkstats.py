"""Bottlenecks per link and per tier (issue 21 part 4; issue 19's `--links`).

Average, peak and time at >= 90% come from the flow network's rate at every re-solve:
closed forms on hand-made samples; on a real step `--links` peaks equal the trace's
counters on the same links; ECMP collisions read 1.0 where routing spreads perfectly
(adaptive InfiniBand) and above 1 where hashing collides (RoCE ECMP).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sim.cli import main
from sim.linkstats import ecmp_groups, link_stats, link_tier, tier_rows
from sim.topology.presets import load_topology

ROCE = ["--set", "cluster.nodes=8", "--set", "parallel.dp=2", "--set", "training.global_batch=64"]


def test_average_peak_and_time_above_90_are_the_closed_form() -> None:
    """Link 0 at 100% for 1 s, 95% for 1 s, 50% for 2 s, idle for 1 s of a 5 s window."""
    t = load_topology("dgx-h100")
    c = float(t.capacity_Bps[0])
    samples = [(0.0, np.array([0]), np.array([c])), (1.0, np.array([0]), np.array([0.95 * c])),
               (2.0, np.array([0]), np.array([c / 2])), (4.0, np.array([], dtype=int), np.array([]))]  # fmt: skip
    moved = np.zeros(len(t.links))
    moved[0] = c + 0.95 * c + c
    s = link_stats(t, samples, moved, {"dp all_reduce": moved}, 5.0)
    (row,) = s.rows
    assert row["utilisation"] == pytest.approx(2.95 / 5)
    assert (row["peak_utilisation"], row["time_above_90_s"]) == (1.0, 2.0)
    assert row["by"] == {"dp all_reduce": moved[0]}
    tier = next(x for x in s.tiers if x["tier"] == row["tier"])
    cap = sum(float(k) for k, name in zip(t.capacity_Bps, t.link_scope, strict=True)
              if name == row["tier"])  # fmt: skip
    assert tier["peak_utilisation"] == pytest.approx(c / cap)
    assert (tier["peak_link_utilisation"], tier["time_above_90_s"], tier["links_above_90"]) == (
        1.0, 2.0, 1)  # fmt: skip


def test_without_samples_only_averages_are_given() -> None:
    t = load_topology("dgx-h100")
    moved = np.zeros(len(t.links))
    moved[3] = 1e9
    (row,) = link_stats(t, [], moved, {}, 1.0).rows
    assert row["peak_utilisation"] is None and row["time_above_90_s"] is None


def test_tiers_name_the_fabric_levels() -> None:
    ends = [("nic", "leaf", "net"), ("leaf", "nic", "net"), ("leaf", "spine", "net"),
            ("spine", "leaf", "net"), ("spine", "core", "net"), ("core", "spine", "net"),
            ("gpu", "nvswitch", "nvlink"), ("gpu", "pcie_switch", "pcie")]  # fmt: skip
    want = ["nic up", "leaf down", "leaf up", "spine down", "spine up", "core down", "nvlink",
            "pcie"]  # fmt: skip
    assert [link_tier(*x) for x in ends] == want


def test_ecmp_choice_sets_are_a_leafs_uplinks_and_parallel_cables_down() -> None:
    t = load_topology("h100-roce-400g", nodes=8)  # 2 leaves, 8 spines, 4 cables a pair
    g = ecmp_groups(t)
    kinds = t.graph.nodes
    up = {
        int(g[i])
        for i, (u, v) in enumerate(t.links)
        if u == "leaf0" and kinds[v]["kind"] == "spine"
    }
    assert len(up) == 1 and np.sum(g == next(iter(up))) == 32
    down = [int(g[i]) for i, (u, v) in enumerate(t.links) if (u, v) == ("spine0", "leaf1")]
    assert len(set(down)) == 1 and np.sum(g == down[0]) == 4
    assert all(g[i] == -1 for i, (u, v) in enumerate(t.links) if kinds[u]["kind"] == "nic")


def test_ecmp_max_over_mean_counts_collisions_not_idle_cables() -> None:
    """3 flows on a leaf's 32 uplinks: one per cable reads 1.0; two on one cable 2.0."""
    t = load_topology("h100-roce-400g", nodes=8)
    up = [i for i, (u, v) in enumerate(t.links) if u == "leaf0" and v.startswith("spine")]
    rate = np.array([1e9, 1e9, 1e9])
    for links, counts, expect in (
        (up[:3], [1.0, 1.0, 1.0], 1.0),
        ([up[0], up[1]], [2.0, 1.0], 2.0),
    ):
        idx = np.array(links)
        s = link_stats(t, [(0.0, idx, rate[: len(idx)]), (1.0, np.array([], dtype=int), np.array([]))],
                       np.where(np.isin(np.arange(len(t.links)), idx), 1e9, 0.0), {}, 1.0,
                       flows=[np.array(counts), np.array([])])  # fmt: skip
        tier = next(x for x in s.tiers if x["tier"] == "leaf up")
        assert tier["ecmp_max_over_mean"] == pytest.approx(expect)


def _run_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["run", *args, "--json"]) == 0
    return dict(json.loads(capsys.readouterr().out))


def test_links_peak_reaches_the_traces_peak_on_the_same_link(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Done-when of issue 21: every link the trace has a counter for peaks, in --links,
    exactly where the trace's counter peaks (the same samples)."""
    trace = tmp_path / "t.json"
    rec = _run_json(["llama2-70b-256-roce", *ROCE, "--links", "5", "--trace", str(trace)], capsys)
    peaks: dict[str, list[float]] = {}
    for r in rec["links"]:
        base = re.sub(r"\[\d+\]$", "", r["name"])  # parallel cables share the trace's name
        peaks.setdefault(base, []).append(r["peak_utilisation"])
    counters: dict[str, float] = {}
    for e in json.loads(trace.read_text())["traceEvents"]:
        if e["ph"] == "C" and "->" in e["name"]:
            counters[e["name"]] = max(counters.get(e["name"], 0.0), e["args"]["utilisation"])
    assert counters
    for name, peak in counters.items():  # the trace's track of a name: one of its cables
        assert min(abs(p - peak) for p in peaks[name]) <= 1e-12 * peak
    top = max(max(p) for p in peaks.values())
    assert top == pytest.approx(1.0) and max(r["utilisation"] for r in rec["links"]) < 0.5


def test_run_links_shows_every_tier_nvlink_included(capsys: pytest.CaptureFixture[str]) -> None:
    rec = _run_json(["llama2-70b-256-roce", *ROCE, "--links", "3"], capsys)
    tiers = {t["tier"]: t for t in rec["link_tiers"]}
    assert {"nvlink", "pcie", "nic up", "leaf down"} <= set(tiers)
    assert tiers["nvlink"]["off_link_bytes"] == pytest.approx(rec["link_bytes_by_scope"]["nvlink"])
    assert tiers["nic up"]["peak_utilisation"] > tiers["nic up"]["utilisation"]
    main(["run", "llama2-70b-256-roce", *ROCE, "--links", "3"])
    out = capsys.readouterr().out
    assert "links by tier" in out and "not place on links" in out and ">=90% s" in out


def test_collective_links_on_flow_show_ecmp_collisions_and_none_on_adaptive(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def leaf_up(topo: str, nodes: int) -> str:
        argv = ["collective", "--topology", topo, "--nodes", str(nodes), "-b", "256M", "-e", "256M",
                "--algo", "ring", "--links", "2"]  # fmt: skip
        assert main(argv) == 0
        return next(x for x in capsys.readouterr().out.splitlines() if "leaf up" in x)

    roce, ib = leaf_up("h100-roce-400g", 8), leaf_up("h100-ib-ndr", 64)
    worst = float(re.search(r"worst (\d+\.\d+)", roce).group(1))  # type: ignore[union-attr]
    assert worst > 1.0
    assert "worst 1.00, mean 1.00" in ib


def test_collective_links_on_analytical_say_peaks_need_flow(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["collective", "--topology", "h100-ib-ndr", "--nodes", "2", "-b", "1M", "-e", "1M",
            "--network", "analytical", "--links", "2"]  # fmt: skip
    assert main(argv) == 0
    assert "need the flow network" in capsys.readouterr().out


def test_tier_rows_without_off_link_bytes_are_the_stats() -> None:
    t = load_topology("dgx-h100")
    s = link_stats(t, [], np.zeros(len(t.links)), {}, 1.0)
    assert tier_rows(s, t, {}) == s.tiers
