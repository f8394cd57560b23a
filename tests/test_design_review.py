"""A fabric's design review (issue 21, parts 2 and 3): summary, bill of materials, cost.

Closed forms: bisection of a two-tier Clos (half the leaves' uplinks, or half the NICs),
ECMP path counts (spines x cables per pair, squared), cable counts (leaves x uplinks), the
bill of materials (count x catalog price), the fabric per GPU-hour (capex / lifetime hours
/ GPUs + power x PUE x price / GPUs).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from sim.cli import main
from sim.cost import EnergyConfig, training_energy
from sim.cost.bom import bill_of_materials
from sim.cost.fabric import HOURS_PER_YEAR, fabric_cost
from sim.errors import ConfigError
from sim.topology.parts import parts_catalog
from sim.topology.presets import load_topology, preset_names
from sim.topology.summary import fabric_summary, max_flow_Bps


@pytest.mark.parametrize("name", preset_names())
def test_show_prints_the_summary_of_every_shipped_topology(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["topologies", "--show", name]) == 0
    out = capsys.readouterr().out
    t = load_topology(name)
    assert out.startswith(f"{name}: {t.num_gpus:,} GPUs")
    assert "NICs" in out and "switches" in out
    if t.fabric is not None:
        for needed in ("bisection", "cables", "oversub", "bill of materials", "per GPU-hour"):
            assert needed in out


def test_show_json_names_bisection_and_oversubscription_per_tier(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["topologies", "--show", "h100-roce-400g-2to1", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["bisection_bandwidth_Bps"] == 4 * 16 * 50e9  # 4 leaves a side, 16 x 400G up
    assert [t["oversubscription"] for t in rec["tiers"]] == [2.0, None]
    assert rec["bill_of_materials"]["capex_usd"] > 0 and rec["fabric_cost"]["per_gpu_hour_usd"] > 0


@pytest.mark.parametrize(
    ("name", "nodes", "expect"),
    [
        ("h100-roce-400g", None, 4 * 32 * 50e9),  # 1:1: the NICs of one half
        ("h100-roce-400g-2to1", None, 4 * 16 * 50e9),  # 2:1: half the leaves' uplinks
        ("h100-ib-ndr", 64, 32 * 8 * 50e9),  # rail-optimized, 2 units: one unit's NICs
        ("h100-tcp-100g", None, 2 * 12.5e9),  # one leaf: two servers' NICs
    ],
)
def test_bisection_is_the_clos_closed_form(name: str, nodes: int | None, expect: float) -> None:
    s = fabric_summary(load_topology(name, nodes=nodes))
    assert s["bisection_bandwidth_Bps"] == pytest.approx(expect)


def test_max_flow_between_two_servers_of_one_leaf_is_their_nics() -> None:
    t = load_topology("h100-roce-400g", nodes=4)
    assert max_flow_Bps(t, [0], [1]) == pytest.approx(8 * 50e9)


def test_ecmp_paths_are_spines_times_cables_squared() -> None:
    """Leaf-spine: S spines x c cables up x c cables down; three tiers multiply the planes."""
    assert fabric_summary(load_topology("h100-roce-400g"))["ecmp_paths"] == {
        "same leaf": 1, "other leaf": 8 * 4 * 4}  # fmt: skip
    assert fabric_summary(load_topology("h100-roce-400g-2to1"))["ecmp_paths"]["other leaf"] == 32
    paths = fabric_summary(load_topology("h100-ib-ndr-3tier"))["ecmp_paths"]
    # 32 spines x 1 cable, 4 cores x 8 cables, 8 cables down to the spine, 1 to the leaf
    assert paths == {"same leaf": 1, "other leaf": 32, "other pod": 32 * 4 * 8 * 8,
                     "other rail": 32}  # fmt: skip


def test_cables_and_optics_are_counted_once_per_cable() -> None:
    s = fabric_summary(load_topology("h100-ib-ndr-3tier"))
    got = {c["between"]: (c["count"], c["reach"], c["part"]) for c in s["cables"]}
    assert got == {
        "nic-leaf": (2048, "row", "optics-sr-400g"),  # rail leaves sit at the end of a row
        "leaf-spine": (64 * 32, "row", "optics-sr-400g"),
        "spine-core": (64 * 32, "hall", "optics-dr-400g"),
    }
    assert s["optics"] == 2 * (2048 + 2048 + 2048)
    roce = {
        c["between"]: c["part"] for c in fabric_summary(load_topology("h100-roce-400g"))["cables"]
    }
    assert roce["nic-leaf"] == "dac-400g"  # a top-of-rack leaf: copper inside the rack


def test_bill_of_materials_is_count_times_catalog_price() -> None:
    t = load_topology("h100-ib-ndr")
    bom = bill_of_materials(t)
    cat = parts_catalog()
    expect = (24 * cat.switches["nvidia-qm9700"].price_usd
              + 256 * cat.nics["nvidia-connectx-7-400g"].price_usd
              + 512 * cat.cables["optics-sr-400g"].price_usd)  # fmt: skip
    assert bom.capex_usd == pytest.approx(expect)
    assert {i.part: i.count for i in bom.items} == {
        "nvidia-qm9700": 24, "nvidia-connectx-7-400g": 256, "optics-sr-400g": 512}  # fmt: skip
    assert bom.power_w == pytest.approx(24 * 750 + 256 * 25 + 512 * 16.5)


def test_a_director_spine_is_priced_as_a_clos_of_switches() -> None:
    """2,048 GPUs rail-optimized: 16 spines of 128 ports from 64-port switches, each a
    2-level Clos of ceil(256/64) + ceil(128/64) = 6 switches."""
    bom = bill_of_materials(load_topology("h100-ib-ndr", nodes=256))
    (sw,) = [i for i in bom.items if i.category == "switch"]
    assert sw.count == 64 + 16 * 6
    assert any("director" in n for n in bom.notes)


def test_user_parts_replace_and_extend_the_catalog(tmp_path: Path) -> None:
    mine = tmp_path / "parts.yaml"
    mine.write_text(
        "switches:\n"
        "  nvidia-sn5400:\n"
        "    ports: 64\n    port_speed: 400Gb/s\n    transport: [roce]\n"
        "    price_usd: 9000\n    watts: 700\n    as_of: '2027-01'\n"
        "    default_for: [roce-400g]\n"
        "    sources: {ports: datasheet, port_speed: datasheet, price_usd: our quote, watts: measured}\n"
    )
    bom = bill_of_materials(load_topology("h100-roce-400g"), parts_catalog(mine))
    sw = next(i for i in bom.items if i.category == "switch")
    assert (sw.unit_usd, sw.as_of, sw.estimate) == (9000, "2027-01", False)


def test_a_part_without_sources_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "parts.yaml"
    bad.write_text(
        "nics:\n  x: {speed: 400Gb/s, price_usd: 1, watts: 1, as_of: '2027', sources: {}}\n"
    )
    with pytest.raises(ConfigError, match=r"nics\.x\.sources lacks price_usd, speed, watts"):
        parts_catalog(bad)
    bad.write_text("nics:\n  x: {speed: 400, price_usd: 1, watts: 1, as_of: '2027', sources: {}}\n")
    with pytest.raises(ConfigError, match=r"nics\.x\.speed: .*needs a unit"):
        parts_catalog(bad)


def test_every_shipped_part_names_its_sources_and_date() -> None:
    cat = parts_catalog()
    for part in [*cat.switches.values(), *cat.nics.values(), *cat.cables.values()]:
        assert part.as_of and part.sources.get("price_usd") and part.sources.get("watts")


def test_cloud_adapters_cost_nothing_extra() -> None:
    bom = bill_of_materials(load_topology("aws-p5-efa"))
    nic = next(i for i in bom.items if i.category == "nic")
    assert (nic.part, nic.usd, nic.watts) == ("aws-efa", 0.0, 0.0)


def test_fabric_cost_per_gpu_hour_is_the_closed_form() -> None:
    bom = bill_of_materials(load_topology("h100-roce-400g"))
    c = fabric_cost(bom, lifetime_years=4.0, usd_per_kwh=0.1, pue=1.2)
    assert c.capex_per_gpu_hour_usd == pytest.approx(bom.capex_usd / (4 * HOURS_PER_YEAR * 256))
    assert c.energy_per_gpu_hour_usd == pytest.approx(bom.power_w * 1.2 / 1000 * 0.1 / 256)
    with pytest.raises(ConfigError, match="lifetime"):
        fabric_cost(bom, lifetime_years=0)
    with pytest.raises(ConfigError, match=r"between 0\.00274 \(a day\) and 100"):
        fabric_cost(bom, lifetime_years=float("inf"))


def test_energy_counts_the_fabric_unless_the_user_says() -> None:
    args = dict(gpus=256, gpu="H100-SXM", busy_time_s=3600.0, utilisation=0.5)
    none = training_energy(**args, config=EnergyConfig())
    fab = training_energy(**args, config=EnergyConfig(), fabric_w_per_gpu=90.0)
    user = training_energy(
        **args, config=EnergyConfig(network_w_per_gpu=10.0), fabric_w_per_gpu=90.0
    )
    assert (none.network_w_per_gpu, fab.network_w_per_gpu, user.network_w_per_gpu) == (
        0.0,
        90.0,
        10.0,
    )
    assert fab.it_energy_kwh - none.it_energy_kwh == pytest.approx(256 * 90 / 1000)
    assert "bill of materials" in fab.sources["network_w_per_gpu"]
    assert any("not counted" in n for n in none.notes)


def test_the_drawing_is_deterministic(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="drawings need the [plot] extra")
    a, b = tmp_path / "a.svg", tmp_path / "b.svg"
    for path in (a, b):
        assert main(["topologies", "--show", "h100-ib-ndr-3tier", "--draw", str(path)]) == 0
    assert a.read_bytes() == b.read_bytes() and b"<svg" in a.read_bytes()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["topologies", "--json"], "--json: only with --show"),
        (["topologies", "--show", "dgx-h100", "--draw", "x.txt"], r"--draw 'x\.txt': write \.svg"),
        (["topologies", "--show", "a", "--export", "b"], "give one"),
    ],
)
def test_show_option_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert re.search(message, capsys.readouterr().err)


def test_lifetime_is_stated_and_overridable(capsys: pytest.CaptureFixture[str]) -> None:
    main(["topologies", "--show", "h100-roce-400g", "--lifetime-years", "3"])
    out = capsys.readouterr().out
    assert "over 3 years" in out
    main(["topologies", "--show", "h100-roce-400g"])
    assert "over 5 years" in capsys.readouterr().out


def test_bom_scales_with_the_fabric_not_the_gpu_count_alone() -> None:
    """RoCE 2:1 halves the leaf-spine optics and the spine ports of 1:1."""
    one, two = (
        bill_of_materials(load_topology(n)) for n in ("h100-roce-400g", "h100-roce-400g-2to1")
    )
    optics = {
        b.topology: next(i.count for i in b.items if i.part == "optics-sr-400g") for b in (one, two)
    }
    assert optics == {"h100-roce-400g": 256, "h100-roce-400g-2to1": 128}
    assert two.capex_usd < one.capex_usd and math.isfinite(two.power_w)


def test_a_nic_modelled_faster_than_its_part_counts_as_several_cards() -> None:
    """OCI's 16 x 200G per server is modelled as 8 x 400G NICs: 512 ConnectX-6 200G cards."""
    bom = bill_of_materials(load_topology("oci-h100-roce"))
    nic = next(i for i in bom.items if i.category == "nic")
    assert (nic.part, nic.count) == ("nvidia-connectx-6-200g", 512)
