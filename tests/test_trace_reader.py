"""Profiler traces: the Chrome-trace reader (calibrate/trace_reader.py), traces as fit input,
``calibrate compare`` and the simulated-timeline adapter.

Synthetic traces pin the reader's rules exactly (leaf and self times, what counts as a
kernel, classes, the optimizer's span, GPU kernels attributed through their launch's
correlation id, minimum over steps); a real profiled step job (torch, tiny model) checks
that a trace torch writes today reads as the same kinds of kernels; where
HolisticTraceAnalysis is installed, its parser must give the same kernels.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from calibrate.compare import compare, format_comparison
from calibrate.fit_compute import fit_compute
from calibrate.measurements import save_measurements
from calibrate.trace_reader import (
    STEP_ANNOTATION,
    classify,
    is_chrome_trace,
    kernel_gap_s,
    kernel_table,
    read_trace,
    trace_measurements,
    trace_records,
)
from sim.catalog import gpu_spec
from sim.cli import main
from sim.errors import CalibrationError
from sim.topology.presets import load_topology


def _op(name: str, ts: float, dur: float, dims: list[Any] | None = None, tid: int = 1,
        cat: str = "cpu_op", **args: Any) -> dict[str, Any]:  # fmt: skip
    a = {"Input Dims": dims or [], "Input type": ["float"] * len(dims or []), **args}
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 1,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": a,
    }


def _cpu_step(t0: float, slow: float = 0.0) -> list[dict[str, Any]]:
    """One step: linear (addmm holding a metadata op and a bias copy), GELU, SDPA, a view,
    then an optimizer span with two tensors' lerp_; ``slow`` stretches the GEMM."""
    return [
        _op(STEP_ANNOTATION, t0, 1000, cat="user_annotation"),
        _op("aten::linear", t0 + 10, 200 + slow),
        _op("aten::addmm", t0 + 12, 190 + slow, [[384], [512, 128], [128, 384], [], []]),
        _op("aten::t", t0 + 13, 2, [[128, 384]]),
        _op("aten::copy_", t0 + 20, 30, [[512, 384], [384]]),
        _op("aten::gelu", t0 + 300, 50, [[512, 384]]),
        _op(
            "aten::_scaled_dot_product_flash_attention_for_cpu",
            t0 + 400,
            80,
            [[4, 4, 128, 32], [4, 4, 128, 32], [4, 4, 128, 32], [], []],
            **{"Concrete Inputs": ["", "", "", "0.", "True"]},
        ),
        _op("aten::view", t0 + 500, 3, [[512, 384]]),
        _op("Optimizer.step#AdamW.step", t0 + 600, 300, cat="user_annotation"),
        _op("aten::lerp_", t0 + 610, 20, [[1000], [1000], []]),
        _op("aten::lerp_", t0 + 640, 10, [[24], [24], []]),
        _op("aten::mul_", t0 + 660, 5, [[24], []]),
    ]


def _write(tmp_path: Path, events: list[dict[str, Any]], name: str = "t.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events,
                             "clustersim": {"device": "cpu", "cpu_threads": 1}}))  # fmt: skip
    return p


def test_cpu_kernels_are_working_ops_at_their_self_time(tmp_path: Path) -> None:
    """addmm holds a bias copy (a working op): the GEMM is addmm's self time (190 - 30 us),
    the copy a kernel of its own; linear (a wrapper), t and view (metadata) are not
    kernels; lerp_ and mul_ inside the optimizer's span are optimizer kernels."""
    p = _write(tmp_path, _cpu_step(0.0) + _cpu_step(2000.0, slow=400.0))
    t = read_trace(p)
    assert t.device == "cpu" and len(t.steps) == 2 and t.metadata["cpu_threads"] == 1
    first = [k for k in t.kernels if k.step == 0]
    assert [(k.op, k.cls) for k in first] == [
        ("aten::addmm", "gemm"), ("aten::copy_", "memory"), ("aten::gelu", "memory"),
        ("aten::_scaled_dot_product_flash_attention_for_cpu", "attn_fwd"),
        ("aten::lerp_", "optimizer"), ("aten::lerp_", "optimizer"), ("aten::mul_", "optimizer"),
    ]  # fmt: skip
    assert first[0].dur_s == pytest.approx(160e-6)
    rows, step_s, how = kernel_table(t)
    assert how == "minimum over 2 identical steps" and step_s == pytest.approx(1e-3)
    assert rows[0].time_s == pytest.approx(160e-6)  # the slow second step is not taken


def test_trace_records_carry_shapes_bytes_and_the_optimizer(tmp_path: Path) -> None:
    t = read_trace(_write(tmp_path, _cpu_step(0.0)))
    rows, _, _ = kernel_table(t)
    recs = {r.op: r for r in trace_records(rows, "cpu")}
    assert recs["gemm"].shape == (512, 384, 128) and recs["gemm"].flops == 2.0 * 512 * 384 * 128
    assert recs["sdpa"].shape == (4, 4, 128, 32, 1)
    assert recs["gelu"].bytes == 2 * 512 * 384 * 4 and recs["gelu"].flops == 8 * 512 * 384
    assert recs["optimizer"].shape == (2, 512) and recs["optimizer"].time_s == pytest.approx(35e-6)


def test_gpu_kernels_belong_to_the_op_that_launched_them(tmp_path: Path) -> None:
    """Two kernels on stream 7 launched inside aten::mm and aten::add_; their step is the
    launch's; the stream idles 400 of 1000 us over 2 kernels: 200 us per kernel."""
    ev = [
        _op(STEP_ANNOTATION, 0, 1000, cat="user_annotation"),
        _op("aten::mm", 10, 50, [[64, 32], [32, 16]]),
        {**_op("cudaLaunchKernel", 20, 5, cat="cuda_runtime"), "args": {"correlation": 7}},
        _op("aten::add_", 100, 40, [[64, 16], [64, 16]]),
        {**_op("cudaLaunchKernel", 110, 5, cat="cuda_runtime"), "args": {"correlation": 8}},
        {**_op("sm90_xmma_gemm_bf16", 200, 500, tid=7, cat="kernel"),
         "args": {"correlation": 7, "stream": 7}},
        {**_op("vectorized_elementwise_kernel", 700, 100, tid=7, cat="kernel"),
         "args": {"correlation": 8, "stream": 7}},
    ]  # fmt: skip
    t = read_trace(_write(tmp_path, ev))
    assert t.device == "cuda"
    assert [(k.op, k.cls, k.stream) for k in t.kernels] == [
        ("aten::mm", "gemm", "stream 7"), ("aten::add_", "memory", "stream 7")]  # fmt: skip
    rows, step_s, _ = kernel_table(t)
    assert kernel_gap_s(rows, step_s) == pytest.approx(200e-6)
    m = trace_measurements(_write(tmp_path, ev, "g.json"))
    assert {r.op for r in m.records} == {"gemm", "add", "kernel_gap"}


def test_kernel_classes_by_op_and_by_kernel_name() -> None:
    assert classify("aten::_scaled_dot_product_cudnn_attention_backward", "", False) == "attn_bwd"
    assert classify("", "flash_fwd_kernel", False) == "attn_fwd"
    assert classify("", "nvjet_tst_128x256", False) == "gemm"
    assert classify("aten::layer_norm", "", False) == "memory"


def test_not_a_trace_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"traceEvents": []}))
    assert is_chrome_trace(bad) and not is_chrome_trace(tmp_path / "none.json")
    with pytest.raises(CalibrationError, match="no 'clustersim_step' spans"):
        read_trace(bad)
    with pytest.raises(CalibrationError, match="--reader 'perfetto' is unknown"):
        read_trace(bad, "perfetto")


def test_hostile_traces_are_one_line_refusals(tmp_path: Path) -> None:
    """Strict JSON (an integer of 5,000 digits, NaN) and a FIFO named ``.json.gz``, which
    is refused from what it is instead of being opened (that would wait for a writer)."""
    huge = tmp_path / "huge.json"
    huge.write_text('{"traceEvents": [{"ph": "X", "dur": ' + "9" * 5000 + "}]}")
    with pytest.raises(CalibrationError, match=r"huge\.json: cannot read a value"):
        read_trace(huge)
    nan = tmp_path / "nan.json"
    nan.write_text('{"traceEvents": [{"ph": "X", "dur": NaN}]}')
    with pytest.raises(CalibrationError, match="NaN is not a JSON number"):
        trace_measurements(nan)
    fifo = tmp_path / "x.json.gz"
    os.mkfifo(fifo)
    with pytest.raises(CalibrationError, match=r"is a FIFO \(named pipe\), not a regular file"):
        read_trace(fifo)
    with pytest.raises(CalibrationError, match="no such file"):
        read_trace(tmp_path / "none.json.gz")


def test_calibrate_fit_on_a_hostile_trace_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.json"
    trace.write_text('{"traceEvents": [{"ph": "X", "dur": ' + "9" * 5000 + "}]}")
    code = main(["calibrate", "fit", str(trace), "--topology", "cpu-single", "--out",
                 str(tmp_path / "p.yaml")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and "cannot read a value" in err
    assert len(err.strip().splitlines()) == 1


# --- a real profiled step job -----------------------------------------------------------------


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny step job, profiled: (step file, trace)."""
    torch = pytest.importorskip("torch", reason="real runs need torch (clustersim[calibrate])")
    from calibrate.stepjob import StepJobConfig, run_step_job

    d = tmp_path_factory.mktemp("traced")
    before = torch.get_num_threads()
    try:
        c = StepJobConfig(layers=1, hidden=32, heads=2, ffn_hidden=64, vocab=64, seq=16, batch=2)
        m = run_step_job("cpu", config=c, steps=2, warmup=1, threads=1, trace=str(d / "t.json"),
                         trace_steps=2, created="2025-01-01T00:00:00Z")  # fmt: skip
    finally:
        torch.set_num_threads(before)
    save_measurements(m, d / "s.json")
    return d / "s.json", d / "t.json"


def test_a_real_trace_reads_as_gemms_attention_elementwise_and_optimizer(
    traced: tuple[Path, Path],
) -> None:
    _, trace = traced
    t = read_trace(trace)
    assert len(t.steps) == 2 and t.metadata["cpu_threads"] == 1
    rows, _, how = kernel_table(t)
    assert how == "minimum over 2 identical steps"
    classes = {r.cls for r in rows}
    assert {"gemm", "attn_fwd", "attn_bwd", "memory", "optimizer"} <= classes
    ops = {r.op for r in trace_records(rows, "cpu")}
    assert {"gemm", "sdpa", "sdpa_bwd", "optimizer"} <= ops


def test_a_trace_fits_per_op_parameters(traced: tuple[Path, Path]) -> None:
    """The trace as a compute file: GEMM, attention, elementwise and optimizer parameters,
    and the CPU's threads as sm_count."""
    _, trace = traced
    m = trace_measurements(trace)
    tree, info = fit_compute([m], gpu_spec("CPU-HOST"))
    assert {"matmul_eff_max", "attn_eff_max", "mem_eff", "vector_eff"} <= set(tree)
    assert info["gemm_records"] >= 4


def test_compare_sets_the_simulated_step_beside_the_trace(traced: tuple[Path, Path],
                                                           capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    step, trace = traced
    from calibrate.measurements import load_measurements

    c = compare(load_measurements(step), trace, load_topology("cpu-single"), {})
    assert c.simulated_step_s > 0 and {"gemm", "attn_fwd", "overhead"} <= set(c.classes)
    assert c.streams["measured"]["exposed_comm_s"] == 0.0
    assert any(cls == "gemm" and m > 0 and s > 0 for cls, _, m, s, _, _ in c.ops)
    assert "per kernel class" in format_comparison(c)
    assert main(["calibrate", "compare", str(step), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["step"]["measured_s"] > 0 and "gemm" in out["classes"]


def test_compare_without_a_trace_is_exit_2(tmp_path: Path, traced: tuple[Path, Path],
                                           capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    from calibrate.measurements import load_measurements

    step, _ = traced
    m = load_measurements(step)
    bare = type(m)(m.kind, type(m.meta)(**{**m.meta.__dict__, "details": {}}), m.records)
    save_measurements(bare, tmp_path / "bare.json")
    assert main(["calibrate", "compare", str(tmp_path / "bare.json")]) == 2
    assert "names no trace; give --trace FILE" in capsys.readouterr().err


def test_hta_reads_the_same_kernels(traced: tuple[Path, Path]) -> None:
    """HolisticTraceAnalysis (optional, ``clustersim[trace]``) parses the same events and
    gives the same GEMM and attention records: ops, shapes, and times to 5 us. HTA rounds
    every timestamp and duration to a whole microsecond, which moves some ops of a
    microsecond or two (``aten::_to_copy`` around its own copy) in or out of their parents,
    so the lists of the tiniest kernels, and a step's optimizer (hundreds of them), may
    differ by such amounts; this tiny model's kernels are tens of microseconds."""
    pytest.importorskip("hta", reason="HolisticTraceAnalysis not installed (clustersim[trace])")
    _, trace = traced
    a, b = trace_measurements(trace), trace_measurements(trace, "hta")
    main_ops = ("gemm", "sdpa", "sdpa_bwd")
    ra = {(r.op, r.shape): r.time_s for r in a.records if r.op in main_ops}
    rb = {(r.op, r.shape): r.time_s for r in b.records if r.op in main_ops}
    assert set(ra) == set(rb) and len(ra) >= 3
    assert [ra[k] for k in sorted(ra)] == pytest.approx([rb[k] for k in sorted(ra)], abs=5e-6)
