"""Fitting collective and compute parameters, validation, shipped profiles.

Real logs are read from ../shared/data/nccl-tests (never copied into the repo); tests
that need them skip, naming the path, when it is absent.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from calibrate.fit import fit_collectives
from calibrate.fit_compute import fit_compute
from calibrate.measurements import CollectiveRecord, ComputeRecord, Measurements, Meta
from calibrate.model import FastModel, points_from, simulate_points
from calibrate.nccl_tests import import_nccl_tests
from calibrate.profile_io import dump_profile, fit_profile, topology_for, write_profile
from calibrate.validate import validate
from sim.catalog import gpu_spec
from sim.collectives.params import default_params
from sim.collectives.simulate import CollectiveSetup, simulate_collective
from sim.errors import CalibrationError
from sim.profile import load_profile
from sim.topology.presets import load_topology
from sim.training.compute.kernels import gemm_time_s
from sim.training.compute.params import compute_params

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "nccl-tests"
CREATED = "2025-01-01T00:00:00Z"

#: shipped profile -> (source log, topology, nodes, GPUs per node)
SHIPPED = {
    "h100-nvlink": ("dgx-h100-1node-8gpu-all_reduce.txt", "dgx-h100", None, None),
    "h100-ib-2node": ("h100-2node-16gpu-ib-all_reduce.txt", "h100-ib-ndr", 2, 8),
    "l40s-tcp": ("l40s-2node-2gpu-tcp-all_reduce.txt", "l40s-tcp", 2, 1),
    "rtx4090-pcie": ("rtx4090-1node-2gpu-pcie-all_reduce.txt", "rtx4090-pcie", None, 2),
    "a100-efa-2node": ("a100-2node-16gpu-efa-all_reduce.txt", "aws-p4d-efa", 2, 8),
    "h100-tcpxo-2node": ("h100-2node-16gpu-tcpxo-all_gather.txt", "gcp-a3-mega-tcpxo", 2, 8),
}


def log(name: str) -> Measurements:
    path = DATA / name
    if not path.is_file():
        pytest.skip(f"public nccl-tests log not found: {path}")
    return import_nccl_tests([path], created=CREATED)


def gloo_steps(size: int) -> int:
    """Messages of gloo's ring all_reduce on 2 ranks (gloo/allreduce.cc): one per segment,
    ``roundUp(max(ceil(size / 1 MiB), 4), 2)`` segments."""
    segments = max(math.ceil(size / 2**20), 4)
    return segments + segments % 2


def synthetic(
    sizes: list[int],
    alpha_s: float = 60e-6,
    bw_Bps: float = 2e9,
    msg_s: float = 25e-6,
    **kw: float,
) -> Measurements:
    """A gloo-like all_reduce sweep on 2 ranks: a call overhead, one latency per message
    of gloo's ring, and 2(n-1)/n * size / bw on the wire."""
    recs = tuple(
        CollectiveRecord("all_reduce", s, s // 4, "float32",
                         kw.get("time", alpha_s + gloo_steps(s) * msg_s + s / bw_Bps),
                         None, 0.0, 0.0, True, 2, 10)
        for s in sizes
    )  # fmt: skip
    return Measurements(
        "collectives", Meta("synthetic", CREATED, backend="gloo", world_size=2), recs
    )


SIZES = [2**k for k in range(12, 26)]


@pytest.mark.parametrize(
    ("name", "topology", "nodes", "gpus", "max_ape_pct"),
    [("dgx-h100-1node-8gpu-all_reduce.txt", "dgx-h100", None, None, 15.0),
     ("h100-2node-16gpu-ib-all_reduce.txt", "h100-ib-ndr", 2, 8, 15.0)],
)  # fmt: skip
def test_holdout_on_real_h100_logs(name, topology, nodes, gpus, max_ape_pct) -> None:
    """Fit on even-indexed sizes, predict the others >= 64 KiB: median <= 5%, max <= 15%.

    Issue 4's acceptance bar, on the real DGX H100 (NVIDIA dgxc-benchmarking) and 2-node
    InfiniBand (dstack/Nebius) nccl-tests logs in ../shared/data/nccl-tests/.
    """
    m = log(name)
    v = validate(load_profile(None), [m], load_topology(topology, nodes=nodes), nodes=nodes,
                 gpus=gpus, holdout=True, min_bytes=64 * 1024)  # fmt: skip
    assert v.summary["median_ape_pct"] <= 5.0, v.summary
    assert v.summary["max_ape_pct"] <= max_ape_pct, v.summary


def test_fast_model_equals_the_simulator() -> None:
    """The compiled closed form the fit uses is simulate_collective(analytical) exactly."""
    m = log("dgx-h100-1node-8gpu-all_reduce.txt")
    pts = points_from([m], load_topology("dgx-h100"))
    params = default_params().merged({"link_efficiency": {"nvlink": 0.7}})
    fast = FastModel(pts).predict(params)
    slow = np.array([t for t, _ in simulate_points(pts, params)])
    assert np.allclose(fast, slow, rtol=1e-12)


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_profile_loads_and_reproduces_its_recorded_mape(name: str) -> None:
    """Each shipped profile carries its fit quality; validating on its log gives it back."""
    profile = load_profile(name)
    fit = profile.provenance["fit"]["collectives"]
    assert {"r2_log_time", "mape_pct", "max_ape_pct", "residuals"} <= set(fit)
    logname, topo, nodes, gpus = SHIPPED[name]
    assert any(logname in s for s in profile.provenance["sources"])
    m = log(logname)
    v = validate(profile, [m], load_topology(topo, nodes=nodes), nodes=nodes, gpus=gpus)
    assert v.summary["cases"] == fit["points"]
    assert math.isclose(v.summary["mean_ape_pct"], fit["mape_pct"], rel_tol=2e-3)


def test_too_few_points_is_an_error_naming_the_counts() -> None:
    with pytest.raises(CalibrationError, match="too few points to fit: 3 measured cases"):
        fit_collectives([synthetic(SIZES[:3])], load_topology("cpu-host"))


@pytest.mark.parametrize("bad", [float("nan"), -1e-6, 0.0])
def test_nan_or_non_positive_time_is_an_error(bad: float) -> None:
    with pytest.raises(CalibrationError, match="times must be finite and > 0"):
        fit_collectives([synthetic(SIZES, time=bad)], load_topology("cpu-host"))


def test_size_below_one_byte_is_an_error() -> None:
    m = synthetic([0, *SIZES])
    with pytest.raises(CalibrationError, match="sizes must be >= 1 byte"):
        fit_collectives([m], load_topology("cpu-host"))


def test_unknown_parameter_to_fit_names_the_allowed_ones() -> None:
    with pytest.raises(
        CalibrationError, match=r"cannot be fitted from this data; allowed: link_efficiency\.pcie"
    ):
        fit_collectives(
            [synthetic(SIZES)], load_topology("cpu-host"), params_to_fit=["nvls.efficiency"]
        )


def test_fit_recovers_a_known_bandwidth() -> None:
    """Synthetic alpha-beta data: the fit reproduces it closely in sample."""
    tree, report = fit_collectives([synthetic(SIZES)], load_topology("cpu-host"))
    assert report.median_ape_pct < 5
    assert tree["link_efficiency"]["pcie"]["value"] < 1


def test_round_trip_fit_write_load_simulate(tmp_path: Path) -> None:
    """A written profile loads, and the simulator then uses the fitted values."""
    topo = load_topology("cpu-host")
    profile = fit_profile([synthetic(SIZES)], topo, name="rt", created=CREATED)
    path = write_profile(profile, tmp_path / "rt.yaml")
    loaded = load_profile(str(path))
    fitted = profile["collectives"]["link_efficiency"]["pcie"]["value"]
    assert loaded.collectives.link_efficiency["pcie"] == fitted
    t_fit = simulate_collective(
        CollectiveSetup(topo, 2, loaded.collectives), "all_reduce", 2**24
    ).time_s
    t_def = simulate_collective(
        CollectiveSetup(topo, 2, default_params()), "all_reduce", 2**24
    ).time_s
    row = next(
        r for r in profile["provenance"]["fit"]["collectives"]["residuals"]["rows"] if r[1] == 2**24
    )
    assert math.isclose(t_fit * 1e6, row[4], rel_tol=1e-3)
    assert not math.isclose(t_fit, t_def, rel_tol=1e-2)


def test_fitting_twice_gives_byte_identical_yaml() -> None:
    topo = load_topology("cpu-host")
    a = dump_profile(fit_profile([synthetic(SIZES)], topo, name="d", created=CREATED))
    b = dump_profile(fit_profile([synthetic(SIZES)], topo, name="d", created=CREATED))
    assert a == b


def test_topology_is_sized_to_the_measured_servers() -> None:
    m = log("h100-2node-16gpu-ib-all_reduce.txt")
    assert topology_for("h100-ib-ndr", [m], gpus=8).nodes == 2


def gemm(flops: float, t: float, dtype: str = "bfloat16",
         shape: tuple[int, int, int] = (1, 1, 1)) -> ComputeRecord:  # fmt: skip
    return ComputeRecord("gemm", shape, dtype, flops, 0.0, t, None, flops / t, 0.0, 10, "cuda")


#: Square GEMMs from 2.7e8 to 1.1e12 FLOP.
SQUARE = [(n, n, n) for n in (512, 1024, 2048, 4096, 8192)]


def model_gemms(gpu_name: str, shapes: list[tuple[int, int, int]], dtype: str, key: str,
                device: str, **values: Any) -> list[ComputeRecord]:  # fmt: skip
    """GEMM records timed by the simulator's own GEMM model with ``values`` laid over the
    GPU's catalog parameters (no training factor: a micro-benchmark)."""
    gpu, base = gpu_spec(gpu_name), compute_params(gpu_name)
    p = replace(base, matmul_training_factor=1.0, **values)
    out = []
    for m, n, k in shapes:
        t = gemm_time_s(m, n, k, 1, key, gpu, p)
        f = 2.0 * m * n * k
        out.append(ComputeRecord("gemm", (m, n, k), dtype, f, 0.0, t, None, f / t, 0.0, 10, device))
    return out


def test_compute_fit_recovers_the_matmul_curve_and_memory_efficiency() -> None:
    """Records timed by the simulator's GEMM model (wave quantization, K ramp and the mamf
    anchor of the H100 entry) with eff_max 0.7, F_half 2e9 come back as those values; a
    copy timed by its memory-bound model (launch included) gives mem_eff 0.8."""
    gpu = load_topology("dgx-h100").gpu
    recs = model_gemms("H100-SXM", SQUARE, "bfloat16", "bf16", "cuda", matmul_eff_max=0.7,
                       matmul_half_flops=2e9, launch_overhead_s=5e-6)  # fmt: skip
    t_copy = 1e9 / (0.8 * gpu.hbm_Bps) + 5e-6
    recs.append(ComputeRecord("copy", (1,), "bfloat16", 0.0, 1e9, t_copy, None, 0.0, 1e9 / t_copy,
                              10, "cuda"))  # fmt: skip
    recs.append(
        ComputeRecord("launch", (1,), "float32", 0.0, 0.0, 5e-6, None, 0.0, 0.0, 10, "cuda")
    )
    tree, info = fit_compute(
        [Measurements("compute", Meta("synthetic", CREATED), tuple(recs))], gpu
    )
    assert math.isclose(tree["matmul_eff_max"], 0.7, rel_tol=1e-3)
    assert math.isclose(tree["matmul_half_flops"], 2e9, rel_tol=1e-2)
    assert math.isclose(tree["mem_eff"], 0.8, rel_tol=1e-3)
    assert tree["launch_overhead_s"] == 5e-6 and info["gemm_records"] == 5
    assert info["gemm_mape_pct"] < 0.1


def test_compute_fit_with_too_few_gemms_is_an_error() -> None:
    gpu = load_topology("dgx-h100").gpu
    m = Measurements("compute", Meta("synthetic", CREATED), (gemm(1e9, 1e-5),))
    with pytest.raises(CalibrationError, match="too few GEMM records"):
        fit_compute([m], gpu)
