"""The hardware catalog: values in SI units, every value sourced, clear errors."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from sim.catalog import gpu_names, gpu_spec, link_names, link_spec
from sim.errors import TopologyError

REQUIRED_GPUS = [
    "H100-SXM", "H100-PCIe", "H200", "A100-SXM-80GB", "A100-PCIe", "B200", "GB200", "L40S",
    "RTX-4090", "MI300X",
]  # fmt: skip
REQUIRED_LINKS = [
    "nvlink3", "nvlink4", "nvlink5", "nvlink-bridge", "xgmi", "pcie-gen3", "pcie-gen4",
    "pcie-gen5", "ib-hdr", "ib-ndr", "ib-xdr", "roce-100g", "roce-200g", "roce-400g",
    "roce-800g", "tcp-100g", "tcp-200g", "tcp-400g", "tcp-800g",
]  # fmt: skip
GPU_FIELDS = {"peak_flops", "hbm", "hbm_bandwidth", "tdp", "nvlink", "pcie"}


def test_required_gpus_and_links_are_in_the_catalog() -> None:
    """The catalog covers every GPU and link kind the presets and users need."""
    assert set(REQUIRED_GPUS) <= set(gpu_names())
    assert set(REQUIRED_LINKS) <= set(link_names())
    assert gpu_names() == sorted(gpu_names())


@pytest.mark.parametrize("name", REQUIRED_GPUS)
def test_every_gpu_value_is_sourced_and_sane(name: str) -> None:
    """Each GPU has dense rates for the core dtypes, memory, power and a source per field."""
    g = gpu_spec(name)
    assert {"fp32", "tf32", "bf16", "fp16"} <= set(g.peak_flops)
    assert all(isinstance(v, float) and v > 1e12 for v in g.peak_flops.values())
    assert g.peak_flops["bf16"] >= g.peak_flops["tf32"] >= g.peak_flops["fp32"] * 0.99
    assert 16e9 <= g.hbm_bytes <= 300e9 and 0.5e12 <= g.hbm_Bps <= 10e12
    assert 200 <= g.tdp_w <= 1500
    assert set(g.sources) >= GPU_FIELDS and all(len(s) > 10 for s in g.sources.values())
    for kind in (g.nvlink, g.pcie):
        if kind is not None:
            link_spec(kind)  # names a known link kind


def test_fp8_only_where_the_hardware_has_it() -> None:
    """A100 has no FP8 tensor cores; Hopper, Ada, Blackwell and MI300X do."""
    assert "fp8" not in gpu_spec("A100-SXM-80GB").peak_flops
    for name in ("H100-SXM", "H200", "B200", "GB200", "L40S", "RTX-4090", "MI300X"):
        assert "fp8" in gpu_spec(name).peak_flops


def test_h100_sxm_datasheet_values_in_si_units() -> None:
    """Strings with units are converted: TFLOP/s -> FLOP/s, GB -> bytes, TB/s -> B/s, W."""
    g = gpu_spec("H100-SXM")
    assert g.peak_flops["bf16"] == pytest.approx(989.4e12)
    assert g.hbm_bytes == 80e9
    assert g.hbm_Bps == pytest.approx(3.35e12)
    assert g.tdp_w == 700.0
    assert g.nvlink == "nvlink4" and g.pcie == "pcie-gen5"


@pytest.mark.parametrize(
    ("name", "bandwidth_Bps"),
    [
        ("ib-hdr", 25e9),  # 200Gb/s: bits, not bytes
        ("ib-ndr", 50e9),
        ("ib-xdr", 100e9),
        ("roce-400g", 50e9),
        ("tcp-100g", 12.5e9),
        ("nvlink3", 300e9),  # GB/s: bytes
        ("nvlink4", 450e9),
        ("nvlink5", 900e9),
        ("pcie-gen3", 15.75e9),
        ("pcie-gen4", 31.5e9),
        ("pcie-gen5", 63e9),
    ],
)
def test_link_bandwidth_units_gb_vs_gb(name: str, bandwidth_Bps: float) -> None:
    """Per-direction rates: Gb/s entries are divided by 8, GB/s entries are not."""
    assert link_spec(name).bandwidth_Bps == pytest.approx(bandwidth_Bps)


@pytest.mark.parametrize("name", REQUIRED_LINKS)
def test_every_link_is_sourced_and_classified(name: str) -> None:
    """Each link kind has a scope, a transport, a positive rate and sourced values."""
    s = link_spec(name)
    assert s.scope in ("nvlink", "pcie", "net")
    assert s.transport in ("nvlink", "pcie", "ib", "roce", "tcp")
    assert s.bandwidth_Bps > 0 and 0 < s.latency_s < 1e-3
    assert {"bandwidth", "latency"} <= set(s.sources)


def test_tcp_has_the_line_rate_of_roce_but_a_higher_message_overhead() -> None:
    """Same Ethernet and switches (same per-hop latency), a different stack: the kernel's
    TCP path costs several times RDMA's per-message overhead."""
    for rate in ("100g", "200g", "400g", "800g"):
        roce, tcp = link_spec(f"roce-{rate}"), link_spec(f"tcp-{rate}")
        assert tcp.bandwidth_Bps == roce.bandwidth_Bps and tcp.latency_s == roce.latency_s
        assert tcp.overhead_s >= 3 * roce.overhead_s
        assert (roce.transport, tcp.transport, tcp.scope) == ("roce", "tcp", "net")


def test_every_network_kind_names_its_overhead_source() -> None:
    """Per-message overheads are measured values like the rest: each carries a source."""
    for name in link_names():
        spec = link_spec(name)
        if spec.scope == "net":
            assert spec.overhead_s > 0 and "overhead" in spec.sources, name


def test_unknown_gpu_names_it_and_lists_known() -> None:
    """A typo gives one line with the bad name and the allowed ones."""
    with pytest.raises(TopologyError, match=r"unknown GPU 'H1OO'.*H100-SXM") as e:
        gpu_spec("H1OO")
    assert "\n" not in str(e.value)


def test_unknown_link_names_it_and_lists_known() -> None:
    """A typo gives one line with the bad name and the allowed ones."""
    with pytest.raises(TopologyError, match=r"unknown link kind 'ib-ndx'.*ib-ndr"):
        link_spec("ib-ndx")


def test_catalog_ships_as_package_data() -> None:
    """The YAML is found through importlib.resources, not a path relative to the source."""
    root = resources.files("topologies.catalog")
    assert root.joinpath("gpus.yaml").is_file() and root.joinpath("links.yaml").is_file()


def test_lookup_works_outside_the_source_tree(tmp_path: Path) -> None:
    """Copied like a wheel would install them, the packages find catalog and presets by name."""
    repo = Path(__file__).resolve().parents[1]
    for pkg in ("sim", "topologies"):
        shutil.copytree(repo / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    code = (
        "import sim, topologies\n"
        f"assert sim.__file__.startswith({str(tmp_path)!r}), sim.__file__\n"
        "from sim.catalog import gpu_spec\n"
        "from sim.topology.presets import load_topology\n"
        "print(gpu_spec('H100-SXM').hbm_bytes, load_topology('dgx-h100').num_gpus)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    run_dir = tmp_path / "elsewhere"
    run_dir.mkdir()
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=run_dir, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["80000000000.0", "8"]
