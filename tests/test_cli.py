"""The clustersim CLI: tables, JSON records, and one-line errors with exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sim.cli import main

GOOD_YAML = """\
name: tiny
gpu: H100-SXM
nodes: 1
node: {gpus: 2, fabric: nvswitch, nvlink: nvlink4, pcie: pcie-gen5, nics: 0}
"""


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_collective_table_has_nccl_tests_columns(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        capsys, "collective", "--topology", "dgx-h100", "-b", "8", "-e", "1M", "-f", "32"
    )
    assert code == 0
    rows = [line.split() for line in out.splitlines() if not line.startswith("#")]
    assert [int(r[0]) for r in rows] == [8, 256, 8192, 262144]
    assert all(len(r) == 9 for r in rows)
    assert "busbw" in out and "Avg bus bandwidth" in out


def test_collective_json_records(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        capsys, "collective", "--topology", "dgx-h100", "-b", "1M", "-e", "4M", "--json"
    )
    assert code == 0
    recs = json.loads(out)
    assert [r["size_bytes"] for r in recs] == [2**20, 2**21, 2**22]
    for r in recs:
        assert {"size_bytes", "time_us", "algbw_GBps", "busbw_GBps", "algorithm"} <= set(r)
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * 2 * 7 / 8)
        assert r["time_us"] == pytest.approx(r["size_bytes"] / r["algbw_GBps"] / 1e3)


def test_json_is_byte_identical_across_runs(capsys: pytest.CaptureFixture[str]) -> None:
    args = (
        "collective",
        "--topology",
        "h100-roce-400g",
        "--nodes",
        "4",
        "-b",
        "1M",
        "-e",
        "64M",
        "-f",
        "8",
        "--json",
    )
    _, first, _ = run_cli(capsys, *args)
    _, second, _ = run_cli(capsys, *args)
    assert first == second


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--topology", "no-such-preset"], "no-such-preset"),
        (["--topology", "dgx-h100", "--max-bytes", "1X"], "1X"),
        (["--topology", "dgx-h100", "--gpus", "9"], "9"),
        (["--topology", "dgx-h100", "--op", "allsum"], "allsum"),
        (["--topology", "dgx-h100", "--algo", "magic"], "magic"),
        (["--topology", "dgx-h100", "--network", "packet"], "packet"),
        (["--topology", "dgx-h100", "--nodes", "4"], "nodes"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    code, _, err = run_cli(capsys, "collective", "-b", "1M", "-e", "1M", *argv)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in err


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (("H100-SXM", "H999"), "H999"),
        (("nvlink: nvlink4", "nvlink: nvlink99"), "nvlink99"),
        (("gpus: 2", "gpus: 2, colour: red"), "colour"),
    ],
)
def test_bad_topology_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: tuple[str, str], needle: str
) -> None:
    f = tmp_path / "t.yaml"
    f.write_text(GOOD_YAML.replace(*edit))
    code, _, err = run_cli(capsys, "collective", "--topology", str(f), "-b", "1M", "-e", "1M")
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_good_topology_file_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "t.yaml"
    f.write_text(GOOD_YAML)
    code, out, _ = run_cli(capsys, "collective", "--topology", str(f), "-b", "1M", "-e", "1M")
    assert code == 0 and "1048576" in out


def test_console_script_exit_status_without_traceback() -> None:
    """The real process: exit 2 and a single stderr line."""
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "sim.cli",
            "collective",
            "--topology",
            "dgx-h100",
            "--max-bytes",
            "1X",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "1X" in p.stderr


MULTI_YAML = """\
name: two
gpu: H100-SXM
nodes: 2
node: {gpus: 2, fabric: nvswitch, nics: 2, nic: ib-ndr, nic_bandwidth: 200Gb/s}
network: {kind: rail-optimized, link: ib-ndr}
"""


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (("nic_bandwidth: 200Gb/s", "nic_bandwidth: 0Gb/s"), "nic_bandwidth"),
        (("nic_bandwidth: 200Gb/s", "nic_bandwidth: -5GB/s"), "nic_bandwidth"),
        (
            ("network: {kind: rail-optimized, link: ib-ndr}", "network: {kind: none}"),
            "disconnected",
        ),
    ],
)
def test_bad_bandwidth_and_disconnected_topology(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: tuple[str, str], needle: str
) -> None:
    """Zero or negative bandwidth and a cluster whose servers cannot reach each other."""
    f = tmp_path / "t.yaml"
    f.write_text(MULTI_YAML.replace(*edit))
    code, _, err = run_cli(capsys, "collective", "--topology", str(f), "-b", "1M", "-e", "1M")
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_nic_bandwidth_sets_the_nic_rate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """node.nic_bandwidth overrides the catalog rate: 200 Gb/s NICs are half as fast as 400."""
    from sim.topology.presets import load_topology

    f = tmp_path / "t.yaml"
    f.write_text(MULTI_YAML)
    t = load_topology(str(f))
    nic_links = [
        t.capacity_Bps[i] for i, (u, v) in enumerate(t.links) if ".nic" in u and "leaf" in v
    ]
    assert nic_links and all(c == 25e9 for c in nic_links)


def test_a_long_step_reports_progress_on_stderr(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``run``'s progress callback: silent for the first seconds, then a line every
    ``TICK_S`` seconds on stderr (issue 21: no flow run silent for more than 10 s)."""
    import sim.cli.run as run_cli

    clock = iter([100.0, 101.0, 106.0, 108.0, 112.5])
    monkeypatch.setattr(run_cli.time, "monotonic", lambda: next(clock))
    tick = run_cli.Ticker()  # starts at 100
    tick(0.1, 10, 1000)  # 1 s: silent
    tick(0.5, 400, 1000)  # 6 s: a line
    tick(0.6, 500, 1000)  # 8 s: 2 s after the last line, silent
    tick(0.9, 900, 1000)  # 12.5 s: a line
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.splitlines() == [
        "clustersim: 400 of 1,000 tasks simulated (0.500 s of the step), 6 s elapsed",
        "clustersim: 900 of 1,000 tasks simulated (0.900 s of the step), 12 s elapsed",
    ]


def test_a_silent_command_gets_a_heartbeat_line(capsys: pytest.CaptureFixture[str]) -> None:
    """A long computation that prints nothing still says so on stderr (the collective
    command's flow simulations; `run` around the step); `touch` restarts the silence."""
    import time

    from sim.cli.outputs import Heartbeat

    with Heartbeat("simulating all_to_all", every_s=0.5) as beat:
        time.sleep(2.3)  # the thread looks once a second: at least one line
    lines = capsys.readouterr().err.splitlines()
    assert lines and all(x.startswith("clustersim: still simulating all_to_all: ") for x in lines)
    with Heartbeat("quiet", every_s=30.0) as beat:
        beat.touch()
    assert capsys.readouterr().err == ""
