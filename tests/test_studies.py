"""The shipped studies (scenarios/studies/): each runs in one command and shows its finding."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sim.studies.grid import study_names, sweep_spec
from sim.studies.runner import run_sweep
from tests.helpers import REPO

STUDIES = (
    "dp-scaling-cnn",
    "dp-scaling-llm",
    "fabrics-256",
    "horovod",
    "h100-vs-a100",
    "nvlink-vs-pcie",
)


def rows_of(name: str, *grid: str) -> list[dict]:
    return run_sweep(sweep_spec(f"studies/{name}", grid, ["network=analytical"]), progress=False)


def test_every_study_is_shipped_and_found_by_name() -> None:
    assert sorted(study_names()) == sorted(f"studies/{n}" for n in STUDIES)


def test_a_study_runs_in_one_command() -> None:
    p = subprocess.run([sys.executable, "-m", "sim", "sweep", "studies/h100-vs-a100", "--no-progress", "--csv"],
                       capture_output=True, text=True, check=False, cwd=REPO)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert len(p.stdout.splitlines()) == 1 + 16


def test_horovod_brackets_the_published_efficiencies() -> None:
    """Horovod README / docs/benchmarks.rst (128 servers x 4 Pascal GPUs, 25 Gbit/s RoCE):
    90% scaling efficiency at 512 GPUs for Inception V3 and ResNet-101, 68% for VGG-16.
    With the reduction overlapped the model gives 93-94% for the first two (within 5
    points) and 74% for VGG-16 (within 8): with its convolutions timed as cuDNN runs them
    (Winograd in fp32: 123 images/s on one P100 PCIe, TensorFlow's published P100 SXM2
    figure is 154) VGG-16's backward pass no longer hides its 553 MB all-reduce."""
    rows = rows_of("horovod")
    at512 = {(r["model.preset"], r["parallel.overlap_dp"]): r["scaling_efficiency"]
             for r in rows if r["gpus"] == 512}  # fmt: skip
    for model in ("inception-v3", "resnet101"):
        assert at512[(model, True)] == pytest.approx(0.90, abs=0.05)
    assert at512[("vgg16", True)] == pytest.approx(0.68, abs=0.08)
    assert at512[("vgg16", False)] < 0.68
    for model in ("inception-v3", "resnet101", "vgg16"):
        assert at512[(model, False)] < at512[(model, True)]
    assert all(r["scaling_efficiency"] == 1.0 for r in rows if r["gpus"] == 1)


def test_data_parallel_llm_scaling_is_worst_on_tcp() -> None:
    rows = rows_of("dp-scaling-llm")
    eff = {(r["cluster.topology"], r["gpus"]): r["scaling_efficiency"] for r in rows}
    for gpus in (64, 256):
        assert (
            eff[("h100-tcp-100g", gpus)]
            < eff[("h100-roce-400g", gpus)]
            <= eff[("h100-ib-ndr", gpus)] + 1e-3
        )
    assert all(eff[(t, 8)] == 1.0 for t in ("h100-ib-ndr", "h100-roce-400g", "h100-tcp-100g"))


@pytest.mark.slow
def test_data_parallel_cnn_scaling_falls_with_gpus_on_tcp() -> None:
    rows = rows_of("dp-scaling-cnn")
    eff = {
        (r["cluster.topology"], r["model.preset"], r["gpus"]): r["scaling_efficiency"] for r in rows
    }
    for model in ("resnet50", "vgg16"):
        assert eff[("h100-tcp-100g", model, 256)] <= eff[("h100-tcp-100g", model, 64)] < 1.0
        assert eff[("h100-tcp-100g", model, 256)] < eff[("h100-ib-ndr", model, 256)]


def test_one_dgx_h100_beats_two_dgx_a100_on_data_parallel_jobs() -> None:
    """With TP 1 (ZeRO/FSDP data parallelism, what llm-foundry's tables measure) one DGX
    H100 beats two DGX A100, by the per-GPU ratio those tables show: MPT-7B at 4096
    tokens on 8 GPUs, 8611 vs 3684 tokens/s per GPU (2.34x). TP 8 on an 8B-13B model is
    not in any published table here; the model puts the A100 pair ahead there (small
    per-GPU GEMMs quantize worse on 132 SMs, exposed TP all-reduces): not asserted."""
    rows = rows_of("h100-vs-a100")
    by = {}
    for r in rows:
        by.setdefault((r["model.preset"], r["parallel.tp"], r["parallel.zero"]), {})[
            r["cluster.topology"]
        ] = r
    for job, pair in by.items():
        assert pair["a100-ib-hdr"]["gpus"] == 16 and pair["dgx-h100"]["gpus"] == 8
        if job[1] == 1:
            h100, a100 = pair["dgx-h100"]["step_time_s"], pair["a100-ib-hdr"]["step_time_s"]
            assert h100 < a100, job
            assert 2 * a100 / h100 == pytest.approx(2.34, rel=0.15), job


def test_nvlink_matters_most_for_tensor_parallelism() -> None:
    rows = rows_of("nvlink-vs-pcie")
    t = {
        (r["model.preset"], r["parallel.tp"], r["cluster.topology"]): r["step_time_s"] for r in rows
    }

    def slowdown(model: str, tp: int) -> float:
        return t[(model, tp, "h100-sxm-on-pcie-8")] / t[(model, tp, "dgx-h100")]

    assert slowdown("llama3-8b", 8) > slowdown("llama3-8b", 1) > slowdown("gpt2-124m", 1) >= 1.0
    assert slowdown("gpt2-124m", 1) < 1.1  # DDP of a small model barely communicates
