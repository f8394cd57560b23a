"""Profiles chosen by hardware and guarded against other hardware; error bars in outputs.

``clustersim run`` and ``collective`` use the shipped profile measured on the topology's
accelerator and links (sim/profile_select.py), refuse a named profile measured elsewhere
with one line (exit 2) unless ``--force-profile``, and carry the profile's validated error
bars in their text and JSON output.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from sim.cli import main
from sim.errors import ConfigError
from sim.profile import ErrorBar, Hardware, load_profile, profile_names, shipped_hardware
from sim.profile_select import describe, mismatch, resolve_profile, select_profile
from sim.topology.presets import load_topology

#: topology (nodes) -> the shipped profile selected for it (None: shipped defaults)
SELECTED = {
    ("dgx-h100", None): "h100-nvlink",
    ("h100-ib-ndr", 2): "h100-ib-2node",
    ("h100-roce-400g", 2): "h100-nvlink",  # NVLink measured; no H100 RoCE profile ships
    ("l40s-tcp", 2): "l40s-tcp",
    ("l40s-pcie", 2): None,  # RoCE links: the TCP-socket measurement does not apply
    ("rtx4090-pcie", None): "rtx4090-pcie",
    ("a100-ib-hdr", 2): "a100-megatron",
    ("cpu-host", None): None,
    ("gb200-nvl72", 1): None,
}
BAR_KEYS = {"what", "metric", "value", "cases", "source"}


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("clustersim: error: "), err
    return err


@pytest.mark.parametrize("name", profile_names())
def test_every_shipped_profile_records_its_hardware_and_error_bars(name: str) -> None:
    """Hardware names a catalog GPU; error bars are percentages over real cases."""
    p = load_profile(name)
    assert p.hardware is not None and p.hardware.gpu
    assert p.error_bars and all(b.value > 0 and b.cases > 0 and b.source for b in p.error_bars)
    assert {b.metric for b in p.error_bars} >= {"max_ape_pct"}


@pytest.mark.parametrize("name", profile_names())
def test_selection_reads_the_hardware_the_loaded_profile_has(name: str) -> None:
    """Selection reads each profile's hardware section alone: the same Hardware as the
    whole profile, validated, loaded."""
    assert shipped_hardware(name) == load_profile(name).hardware


@pytest.mark.parametrize("name", profile_names())
def test_a_shipped_profile_by_name_is_the_file_checked_by_path(name: str) -> None:
    """By name a shipped profile loads without its schema check (a cold command's ~20 ms
    of validator building); by path the same file is checked (ProfileModel: strict, so
    the values are the file's). Both give equal profiles, and the check passes."""
    from sim.profile import _profiles_dir

    folder = _profiles_dir()
    assert folder is not None
    by_path = load_profile(str(folder / f"{name}.yaml"))
    assert by_path == load_profile(name)
    assert repr(by_path) == repr(load_profile(name))  # same types too (3 vs 3.0 differ)


def test_a_profile_file_is_still_checked(tmp_path: Path) -> None:
    """A user's file goes through the schema: a bad key or value is one line naming it."""
    bad = tmp_path / "p.yaml"
    bad.write_text("schema: clustersim.profile/1\nhardware: {gpu: H100-SXM, gpus: 2, nodes: 4}\n")
    with pytest.raises(ConfigError, match=r"hardware.*nodes \(4\) cannot exceed gpus \(2\)"):
        load_profile(str(bad))
    bad.write_text("schema: clustersim.profile/1\nerror_bars: [{what: x}]\n")
    with pytest.raises(ConfigError, match="error_bars"):
        load_profile(str(bad))


@pytest.mark.parametrize(("topology", "nodes"), list(SELECTED))
def test_selection_matches_gpu_and_links(topology: str, nodes: int | None) -> None:
    chosen = select_profile(load_topology(topology, nodes=nodes))
    assert (chosen.name if chosen else None) == SELECTED[(topology, nodes)]


def test_a_profile_from_other_hardware_is_refused_unless_forced() -> None:
    l40s = load_topology("l40s-pcie", nodes=2)
    with pytest.raises(ConfigError, match=r"measured on H100-SXM, not L40S.*--force-profile"):
        resolve_profile("h100-nvlink", l40s)
    forced = resolve_profile("h100-nvlink", l40s, force=True)
    assert forced.how == "forced" and describe(forced, l40s)["name"] == "h100-nvlink"
    assert resolve_profile("none", l40s).how == "defaults"
    assert resolve_profile(None, load_topology("l40s-tcp", nodes=2)).key == "l40s-tcp"


def test_a_different_link_kind_is_a_mismatch_and_an_absent_scope_is_not() -> None:
    """Same GPU over RoCE instead of InfiniBand: refused; an NVLink-only profile on a
    cluster of the same servers: fine (its network keeps the defaults)."""
    roce = load_topology("h100-roce-400g", nodes=2)
    ib = Hardware("H100-SXM", {"nvlink": "nvlink4", "net": "ib-ndr"})
    assert mismatch(ib, roce) == "its net parameters were measured on ib-ndr, not roce-400g"
    assert mismatch(Hardware("H100-SXM", {"nvlink": "nvlink4"}), roce) is None
    info = describe(resolve_profile(None, roce), roce)
    assert info["how"] == "selected" and "net" in info["scopes_at_defaults"]


def test_collective_text_and_json_name_the_profile_and_its_error_bars(capsys) -> None:
    argv = [
        "collective",
        "--topology",
        "dgx-h100",
        "-b",
        "1M",
        "-e",
        "2M",
        "--network",
        "analytical",
    ]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "h100-nvlink (selected" in text and "error bar        collectives ±" in text
    assert main([*argv, "--json"]) == 0
    recs = json.loads(capsys.readouterr().out)
    for rec in recs:
        prof = rec["profile"]
        assert prof["name"] == "h100-nvlink" and prof["hardware"]["gpu"] == "H100-SXM"
        assert prof["error_bars"] and all(set(b) == BAR_KEYS for b in prof["error_bars"])
        assert {b["what"] for b in prof["error_bars"]} == {"collectives"}


def test_profile_none_gives_the_defaults_and_no_error_bar(capsys) -> None:
    argv = ["collective", "--topology", "dgx-h100", "-b", "1M", "-e", "1M", "--network",
            "analytical", "--json"]  # fmt: skip
    assert main([*argv, "--profile", "none"]) == 0
    prof = json.loads(capsys.readouterr().out)[0]["profile"]
    assert (prof["name"], prof["how"], prof["error_bars"]) == ("defaults", "defaults", [])
    assert main(argv) == 0
    chosen = json.loads(capsys.readouterr().out)[0]
    assert chosen["profile"]["name"] == "h100-nvlink"


def test_collective_refuses_other_hardware_in_one_line_and_force_overrides(capsys) -> None:
    argv = ["collective", "--topology", "rtx4090-pcie", "-b", "1M", "-e", "1M", "--network",
            "analytical", "--profile", "h100-nvlink"]  # fmt: skip
    err = one_line_error(capsys, argv)
    assert "profile 'h100-nvlink' does not fit topology 'rtx4090-pcie'" in err
    assert main([*argv, "--force-profile", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["profile"]["how"] == "forced"


def test_run_json_and_text_carry_the_profile(capsys) -> None:
    argv = ["run", "llama3-8b-dgx", "--network", "analytical"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["profile"]["name"] == "h100-nvlink" and out["profile"]["how"] == "selected"
    assert all(set(b) == BAR_KEYS for b in out["profile"]["error_bars"])
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "profile          h100-nvlink" in text and "error bar" in text
    assert main([*argv, "--profile", "none", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["profile"]["how"] == "defaults"


def test_run_refuses_a_scenario_profile_from_other_hardware(capsys, tmp_path: Path) -> None:
    err = one_line_error(capsys, ["run", "llama3-8b-dgx", "--network", "analytical",
                                  "--profile", "rtx4090-pcie"])  # fmt: skip
    assert "measured on RTX-4090, not H100-SXM" in err
    assert main(["run", "llama3-8b-dgx", "--network", "analytical", "--profile",
                 "rtx4090-pcie", "--force-profile", "--json"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["profile"]["how"] == "forced"


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda t: t["hardware"].update(colour="red"), "hardware: unknown key 'colour'"),
        (lambda t: t["hardware"].pop("gpu"), "hardware: missing key 'gpu'"),
        (lambda t: t["error_bars"][0].pop("cases"), r"error_bars\[0\]: missing key 'cases'"),
        (lambda t: t["error_bars"][0].update(value=-1), r"error_bars\[0\].value"),
    ],
)
def test_bad_hardware_or_error_bars_name_the_key(tmp_path: Path, edit, needle: str) -> None:
    tree = yaml.safe_load(_shipped("h100-nvlink").read_text())
    edit(tree)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(tree))
    with pytest.raises(ConfigError, match=needle):
        load_profile(str(path))


def _shipped(name: str) -> Path:
    return Path(__file__).resolve().parents[1] / "calibrate" / "profiles" / f"{name}.yaml"


def test_error_bar_label() -> None:
    bar = ErrorBar("collectives", "median_ape_pct", 3.0, 31, "hold-out of a DGX H100 log")
    assert bar.label == "collectives ±3% median over 31 cases (hold-out of a DGX H100 log)"
