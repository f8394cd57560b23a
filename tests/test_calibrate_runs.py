"""Measurements in and out: the file format, and real runs (gloo collectives, CPU compute,
a CPU training-step job). GPU cases carry ``@pytest.mark.gpu`` and skip, with the reason,
where no CUDA device exists."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

import calibrate.collectives
import calibrate.compute
import calibrate.measurements
import calibrate.nccl_tests
import calibrate.stepjob
from calibrate.measurements import (
    CollectiveRecord,
    Measurements,
    Meta,
    load_measurements,
    merge_measurements,
    save_measurements,
)
from sim.collectives.schedule import busbw_factor
from sim.errors import CalibrationError

torch = pytest.importorskip("torch", reason="real runs need torch (clustersim[calibrate])")
FIXED = "2025-01-01T00:00:00Z"
NO_CUDA = not torch.cuda.is_available()


def _example() -> Measurements:
    rec = CollectiveRecord(op="all_reduce", size_bytes=1024, count=256, dtype="float32",
                           time_s=1.5e-5, time_spread_s=2e-7, algbw_GBps=0.068,
                           busbw_GBps=0.119, in_place=True, n_ranks=8, iters=20)  # fmt: skip
    meta = Meta(source="live run", created=FIXED, hosts=("a", "b"), world_size=8, nodes=2,
                gpus_per_node=4, backend="nccl", spread="p90-p10",
                details={"n_ranks_source": "device lines"})  # fmt: skip
    return Measurements(kind="collectives", meta=meta, records=(rec,))


# --- the file format ---------------------------------------------------------------------


def test_public_api_is_pinned() -> None:
    """The names other modules and the CLI rely on."""
    assert set(calibrate.measurements.__all__) >= {
        "SCHEMA", "Measurements", "Meta", "CollectiveRecord", "ComputeRecord", "StepRecord",
        "load_measurements", "save_measurements"}  # fmt: skip
    assert calibrate.nccl_tests.__all__ == ["BINARY_OPS", "import_nccl_tests", "parse_nccl_tests"]
    assert "run_collectives" in calibrate.collectives.__all__
    assert "run_compute" in calibrate.compute.__all__
    assert "run_step_job" in calibrate.stepjob.__all__


def test_roundtrip_is_equal_and_bytes_are_deterministic(tmp_path: Path) -> None:
    """save → load gives an equal object; two saves give identical, sorted-keys bytes."""
    m = _example()
    save_measurements(m, tmp_path / "a.json")
    save_measurements(load_measurements(tmp_path / "a.json"), tmp_path / "b.json")
    assert load_measurements(tmp_path / "a.json") == m
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    data = json.loads((tmp_path / "a.json").read_text())
    assert data["schema"] == "clustersim.measurements/1"
    assert list(data) == sorted(data)


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda d: d.update(schema="clustersim.measurements/9"), "schema: expected"),
        (lambda d: d.update(kind="weather"), "kind: expected one of"),
        (lambda d: d["meta"].update(colour="red"), "meta: unknown key 'colour'"),
        (lambda d: d["meta"].pop("source"), "meta: missing key 'source'"),
        (lambda d: d["records"][0].update(time_s=-1.0), r"records\[0\].time_s: must be > 0"),
        (lambda d: d["records"][0].update(n_ranks="eight"), r"records\[0\].n_ranks: expected int"),
        (lambda d: d["records"][0].update(in_place=1), r"records\[0\].in_place: expected bool"),
    ],
)
def test_bad_files_name_the_file_and_field(tmp_path: Path, edit: object, needle: str) -> None:
    """Each schema violation: a CalibrationError with the path and the bad field."""
    path = tmp_path / "m.json"
    save_measurements(_example(), path)
    data = json.loads(path.read_text())
    edit(data)  # type: ignore[operator]
    path.write_text(json.dumps(data))
    with pytest.raises(CalibrationError, match=f"m.json: {needle}"):
        load_measurements(path)


def test_not_json_names_the_line(tmp_path: Path) -> None:
    """A file that is not JSON at all: the file and the line of the syntax error."""
    (tmp_path / "x.json").write_text('{\n "schema": oops\n}')
    with pytest.raises(CalibrationError, match=r"x\.json: not valid JSON \(line 2"):
        load_measurements(tmp_path / "x.json")


def test_nan_is_refused_on_save(tmp_path: Path) -> None:
    """NaN cannot be written: the file would not load back."""
    good = _example()
    bad = dataclasses.replace(
        good, records=(dataclasses.replace(good.records[0], time_s=math.nan),)
    )
    with pytest.raises(CalibrationError, match="cannot write"):
        save_measurements(bad, tmp_path / "nan.json")


def test_merge_keeps_common_meta_only() -> None:
    """Merged files: records concatenated; meta that differs becomes None."""
    a, b = _example(), _example()
    b = Measurements("collectives", Meta(source="other", created=FIXED, nodes=1), b.records)
    m = merge_measurements([a, b], created=FIXED)
    assert len(m.records) == 2 and m.meta.nodes is None and m.meta.source == "live run, other"


# --- real runs ---------------------------------------------------------------------------


def test_gloo_local_run_gives_sensible_records(tmp_path: Path) -> None:
    """2 local gloo ranks, 1 KiB–1 MiB: every size timed, bandwidth grows with size."""
    ops = ["all_reduce", "all_gather", "broadcast"]
    m = calibrate.collectives.run_collectives(
        "gloo", ops, min_bytes=1024, max_bytes=2**20, step_factor=2, iters=5, warmup=1,
        local=2, created=FIXED,
    )  # fmt: skip
    assert m.kind == "collectives" and len(m.records) == 3 * 11
    for op in ops:
        recs = [r for r in m.collectives if r.op == op]
        assert [r.size_bytes for r in recs] == [2**k for k in range(10, 21)]
        assert all(r.time_s > 0 and r.time_spread_s is not None for r in recs)
        assert all(r.n_ranks == 2 and r.iters == 5 for r in recs)
        for r in recs:
            assert r.algbw_GBps == pytest.approx(r.size_bytes / r.time_s / 1e9)
            assert r.busbw_GBps == pytest.approx(r.algbw_GBps * busbw_factor(op, 2))
        assert recs[-1].algbw_GBps > 5 * recs[0].algbw_GBps  # 1024× the bytes
    meta = m.meta
    assert (meta.backend, meta.world_size, meta.nodes, meta.created) == ("gloo", 2, 1, FIXED)
    assert meta.hosts and meta.torch_version == torch.__version__ and meta.details["cpu_model"]
    save_measurements(m, tmp_path / "gloo.json")
    assert load_measurements(tmp_path / "gloo.json") == m


def test_unsupported_op_is_an_error_or_a_recorded_note() -> None:
    """send_recv on 1 rank cannot run: an error naming op and backend, or with
    skip_unsupported a note beside the ops that did run."""
    kw = {"min_bytes": 1024, "max_bytes": 1024, "iters": 2, "warmup": 0, "local": 1}
    with pytest.raises(CalibrationError, match="op 'send_recv' is not supported by backend 'gloo'"):
        calibrate.collectives.run_collectives("gloo", ["send_recv"], **kw)  # type: ignore[arg-type]
    m = calibrate.collectives.run_collectives(
        "gloo",
        ["all_reduce", "send_recv"],
        skip_unsupported=True,
        **kw,  # type: ignore[arg-type]
    )
    assert [r.op for r in m.collectives] == ["all_reduce"]
    assert any("send_recv" in n for n in m.meta.notes)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"backend": "mpi"}, "backend 'mpi' is unknown; allowed: nccl, gloo"),
        ({"ops": ["allreduce"]}, "op 'allreduce' is unknown; allowed: all_reduce"),
        ({"dtype": "float33"}, "dtype 'float33' is unknown"),
        ({"min_bytes": 10, "max_bytes": 1}, "min_bytes <= max_bytes"),
    ],
)
def test_bad_collective_arguments(kwargs: dict[str, object], needle: str) -> None:
    """Mistakes are CalibrationErrors naming the value and what is allowed (no processes)."""
    args: dict[str, object] = {"backend": "gloo", "ops": ["all_reduce"], "local": 2, **kwargs}
    with pytest.raises(CalibrationError, match=needle):
        calibrate.collectives.run_collectives(**args)  # type: ignore[arg-type]


def test_neither_torchrun_nor_local_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside torchrun, a run needs local=N."""
    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(CalibrationError, match=r"not launched by torchrun.*--local N"):
        calibrate.collectives.run_collectives("gloo", ["all_reduce"])


@pytest.mark.skipif(not NO_CUDA, reason="this machine has CUDA; the no-GPU message cannot show")
def test_without_cuda_nccl_and_cuda_device_are_errors() -> None:
    """NCCL or --device cuda with no GPU: a clear message, no traceback-worthy failure."""
    with pytest.raises(CalibrationError, match="backend 'nccl' needs CUDA"):
        calibrate.collectives.run_collectives("nccl", ["all_reduce"], local=1)
    with pytest.raises(CalibrationError, match="no CUDA device; use --device cpu"):
        calibrate.compute.run_compute("cuda")
    with pytest.raises(CalibrationError, match="no CUDA device; use --device cpu"):
        calibrate.stepjob.run_step_job("cuda")


def test_compute_quick_on_cpu() -> None:
    """GEMMs (fp32, bf16), SDPA, memory-bound ops and launch overhead, all timed."""
    m = calibrate.compute.run_compute("cpu", quick=True, created=FIXED)
    ops = {(r.op, r.dtype) for r in m.computes}
    assert {("gemm", "float32"), ("gemm", "bfloat16"), ("sdpa", "float32")} <= ops
    assert {"copy", "add", "gelu", "layernorm", "launch"} <= {op for op, _ in ops}
    fp8 = ("gemm", "float8_e4m3fn") in ops or any("fp8" in n for n in m.meta.notes)
    assert fp8 and any("pinned" in n for n in m.meta.notes)
    for r in m.computes:
        assert r.time_s > 0 and r.device == "cpu"
        assert r.achieved_flops_per_s == pytest.approx(r.flops / r.time_s)
    gemm = next(r for r in m.computes if r.op == "gemm")
    assert gemm.flops == 2.0 * gemm.shape[0] * gemm.shape[1] * gemm.shape[2]
    assert m.kind == "compute" and m.meta.details["device"] == "cpu"


def test_step_job_quick_on_cpu(tmp_path: Path) -> None:
    """A small GPT trains for a few steps; the record carries its exact config."""
    m = calibrate.stepjob.run_step_job("cpu", quick=True, steps=3, warmup=1, created=FIXED)
    (r,) = m.steps
    c = calibrate.stepjob.StepJobConfig()
    h, f, v = c.hidden, c.ffn_hidden, c.vocab
    per_layer = 2 * 2 * h + (3 * h * h + 3 * h) + (h * h + h) + (h * f + f) + (f * h + h)
    assert r.n_params == v * h + c.seq * h + c.layers * per_layer + 2 * h + h * v
    assert (r.model["layers"], r.model["hidden"], r.model["heads"]) == (c.layers, h, c.heads)
    assert len(r.step_times_s) == 3 and r.time_s > 0 and r.optimizer == "AdamW"
    assert r.model_flops_per_step == calibrate.stepjob.model_flops_per_step(c)
    save_measurements(m, tmp_path / "step.json")
    assert load_measurements(tmp_path / "step.json") == m


def test_bad_step_config_is_an_error() -> None:
    """hidden not a multiple of heads is refused when the config is made."""
    with pytest.raises(CalibrationError, match=r"hidden \(100\) must be a multiple of heads"):
        calibrate.stepjob.StepJobConfig(hidden=100, heads=3)


@pytest.mark.gpu
@pytest.mark.skipif(NO_CUDA, reason="no CUDA device here: GPU calibration not exercised")
def test_gpu_compute_step_and_nccl() -> None:
    """On a GPU: bf16 GEMMs, pinned copies, the step job and a 1-rank NCCL sweep run."""
    comp = calibrate.compute.run_compute("cuda", quick=True)
    assert {("gemm", "bfloat16"), ("h2d", "uint8")} <= {(r.op, r.dtype) for r in comp.computes}
    assert comp.meta.gpu_model
    step = calibrate.stepjob.run_step_job("cuda", quick=True, steps=3, warmup=1)
    assert step.records[0].time_s > 0
    coll = calibrate.collectives.run_collectives("nccl", ["all_reduce"], 2**20, 2**22, local=1)
    assert coll.meta.backend == "nccl" and all(r.time_s > 0 for r in coll.collectives)
