"""Per-op fits of calibrate/fit_compute.py added for trace-driven calibration: attention
(forward rate and backward ratio) and elementwise kernels (bandwidth and, where a kernel
is compute-bound, the vector rate), and a GPU trace's kernel gaps as the launch overhead.
Records are timed by the simulator's own kernel models, so the fit must return the values
that made them."""

from __future__ import annotations

import math
from dataclasses import replace

from calibrate.fit_compute import fit_compute
from calibrate.measurements import ComputeRecord, Measurements, Meta
from sim.catalog import gpu_spec
from sim.training.compute.kernels import attention_time_s, memory_time_s
from sim.training.compute.params import compute_params

CREATED = "2025-01-01T00:00:00Z"
SHAPES = [(4, 32, 2048, 128, 1), (2, 32, 4096, 128, 0), (1, 64, 8192, 64, 1)]


def _rec(op: str, shape: tuple[int, ...], t: float, flops: float = 0.0, nbytes: float = 0.0,
         device: str = "cuda", dtype: str = "bfloat16") -> ComputeRecord:  # fmt: skip
    return ComputeRecord(
        op, shape, dtype, flops, nbytes, t, None, flops / t, nbytes / t, 10, device
    )


def _fit(recs: list[ComputeRecord], gpu: str) -> tuple[dict, dict]:
    return fit_compute([Measurements("compute", Meta("synthetic", CREATED), tuple(recs))],
                       gpu_spec(gpu))  # fmt: skip


def test_attention_rate_and_backward_ratio_come_back() -> None:
    """SDPA forward and backward records at attn_eff_max 0.35, attn_bwd_ratio 0.7 (a
    micro-benchmark: no training factor; launch 4 us as the catalog's)."""
    gpu = gpu_spec("H100-SXM")
    p = replace(compute_params("H100-SXM"), matmul_training_factor=1.0, attn_eff_max=0.35,
                attn_bwd_ratio=0.7)  # fmt: skip
    recs = []
    for b, h, s, d, c in SHAPES:
        recs.append(
            _rec(
                "sdpa",
                (b, h, s, d, c),
                attention_time_s(b, h, s, d, bool(c), False, "bf16", gpu, p),
            )
        )
        recs.append(
            _rec(
                "sdpa_bwd",
                (b, h, s, d, c),
                attention_time_s(b, h, s, d, bool(c), True, "bf16", gpu, p),
            )
        )
    recs.append(_rec("launch", (1,), p.launch_overhead_s, dtype="float32"))
    tree, info = _fit(recs, "H100-SXM")
    assert math.isclose(tree["attn_eff_max"], 0.35, rel_tol=1e-3)
    assert math.isclose(tree["attn_bwd_ratio"], 0.7, rel_tol=1e-3)
    assert info["sdpa_records"] == 3 and info["sdpa_mape_pct"] < 0.1


def test_backend_records_are_reported_not_applied() -> None:
    gpu = gpu_spec("H100-SXM")
    p = replace(compute_params("H100-SXM"), matmul_training_factor=1.0, attn_eff_max=0.5)
    recs = [_rec("sdpa_flash", sh, attention_time_s(*sh[:4], bool(sh[4]), False, "bf16", gpu, p))
            for sh in SHAPES]  # fmt: skip
    recs.append(_rec("launch", (1,), p.launch_overhead_s, dtype="float32"))
    tree, info = _fit(recs, "H100-SXM")
    assert "attn_eff_max" not in tree
    assert math.isclose(info["sdpa_flash_fit"]["attn_eff_max"], 0.5, rel_tol=1e-3)


def test_bandwidth_and_a_compute_bound_kernel_both_come_back() -> None:
    """On a CPU thread, copy and add run at mem_eff 0.6 of the bandwidth while GELU's erf
    is compute-bound at vector_eff 0.004: both come back, where one median bandwidth could
    not fit either."""
    gpu = gpu_spec("CPU-HOST")
    p = replace(compute_params("CPU-HOST"), mem_eff=0.6, vector_eff=0.004, launch_overhead_s=0.0)
    n = 2**19
    cases = [("copy", 0.0, 8.0 * n), ("add", 1.0 * n, 12.0 * n), ("gelu", 8.0 * n, 8.0 * n),
             ("softmax", 5.0 * n, 8.0 * n), ("layernorm", 5.0 * n, 8.0 * n)]  # fmt: skip
    recs = [_rec(op, (512, 1024), memory_time_s(b, f, gpu, p), f, b, "cpu", "float32")
            for op, f, b in cases]  # fmt: skip
    recs.append(_rec("launch", (1,), 1e-12, device="cpu", dtype="float32"))
    tree, info = _fit(recs, "CPU-HOST")
    assert math.isclose(tree["mem_eff"], 0.6, rel_tol=1e-3)
    assert math.isclose(tree["vector_eff"], 0.004, rel_tol=1e-3)
    assert info["mem_mape_pct"] < 0.1


def test_the_kernel_level_bandwidth_is_fitted_on_a_gpu_with_a_training_factor() -> None:
    """Elementwise records timed at mem_eff 0.6 on an H100 (whose catalog keeps a
    mem_training_factor of 0.39 for training steps) fit back to 0.6: the fit sees a
    micro-benchmark (factor 1), not a training step (tests/test_mem_training_factor.py)."""
    gpu = gpu_spec("H100-SXM")
    p = replace(compute_params("H100-SXM"), mem_eff=0.6, mem_training_factor=1.0,
                launch_overhead_s=0.0)  # fmt: skip
    n = 2**24
    cases = [("copy", 4.0 * n), ("add", 6.0 * n), ("gelu", 4.0 * n), ("layernorm", 4.0 * n)]
    recs = [_rec(op, (4096, 4096), memory_time_s(b, 0.0, gpu, p), 0.0, b) for op, b in cases]
    recs.append(_rec("launch", (1,), 1e-12))
    tree, _ = _fit(recs, "H100-SXM")
    assert math.isclose(tree["mem_eff"], 0.6, rel_tol=1e-3)
    assert "mem_training_factor" not in tree


def test_a_gpu_trace_s_kernel_gaps_set_the_launch_overhead() -> None:
    recs = [_rec("launch", (1,), 5e-6, dtype="float32"), _rec("kernel_gap", (900,), 12e-6)]
    tree, info = _fit(recs, "H100-SXM")
    assert tree["launch_overhead_s"] == 12e-6 and info["tiny_kernel_launch_s"] == 5e-6
