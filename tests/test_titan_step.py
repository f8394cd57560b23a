"""The torchtitan-shaped Llama step job (calibrate/titan_step.py), at CPU sizes.

It is built for a lent GPU (the device script's ``titan`` pieces); here it runs tiny and
its checkpointing policy is checked against torchtitan's rule by counting the matmuls
that really execute.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="real runs need torch (clustersim[calibrate])")

from calibrate import titan_step  # noqa: E402
from calibrate.titan_step import QUICK, build_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _mm_calls(ac: str, early_stop: bool = True) -> int:
    """``aten.mm`` calls that execute in one forward and backward of the quick model."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            if func == torch.ops.aten.mm.default:
                Count.n += 1
            return func(*args, **(kwargs or {}))

    c = replace(QUICK, ac=ac, fsdp=False, attention="math", early_stop=early_stop)
    torch.manual_seed(0)
    model = build_model(c, torch.device("cpu"))
    tokens = torch.randint(0, c.vocab, (c.batch, c.seq))
    with Count():
        model(tokens).float().sum().backward()
    return Count.n


def test_per_op_sac_reruns_every_second_matmul_of_a_block() -> None:
    """7 matmuls per block and the head: 15 forward, 30 backward. torchtitan's per-op SAC
    re-runs wk, wo and w3 (3 per block); full checkpointing re-runs all but the last one,
    w2, whose output no backward needs (PyTorch's non-reentrant checkpoint stops early),
    or all seven with the early stop off, as torchtitan has it since August 2025."""
    assert _mm_calls("none") == 15 + 30
    assert _mm_calls("op") == 45 + 3 * QUICK.layers
    assert _mm_calls("full") == 45 + 6 * QUICK.layers
    assert _mm_calls("full", early_stop=False) == 45 + 7 * QUICK.layers  # torchtitan today


def test_the_job_runs_under_fsdp_on_one_rank_and_writes_its_record(tmp_path: Path) -> None:
    out, trace = tmp_path / "t.json", tmp_path / "trace.json"
    r = subprocess.run([sys.executable, "-m", "calibrate.titan_step", "--quick", "--device", "cpu",
                        "--attention", "math", "--steps", "2", "--warmup", "1", "--out", str(out),
                        "--trace", str(trace)], cwd=ROOT, capture_output=True, text=True,
                       timeout=600, check=False)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads(out.read_text())
    assert rec["config"]["fsdp"] and rec["config"]["ac"] == "op" and len(rec["step_s"]) == 2
    assert rec["tokens_per_s"] == pytest.approx(2 * 64 / rec["median_s"])
    from calibrate.trace_reader import STEP_ANNOTATION, read_trace

    assert read_trace(trace).steps and len(read_trace(trace).steps) == 2
    assert STEP_ANNOTATION == titan_step.STEP_ANNOTATION


def test_bad_choices_are_refused_in_one_line() -> None:
    r = subprocess.run([sys.executable, "-m", "calibrate.titan_step", "--ac", "most"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert r.returncode == 2 and "--ac: invalid choice: 'most'" in r.stderr


def _record(**over: object) -> dict[str, object]:
    """A titan_step record of Llama 3 8B's 16 layers on an H200 (the numbers are made up:
    only the configuration is read)."""
    from dataclasses import asdict

    from calibrate.titan_step import TitanConfig

    rec: dict[str, object] = {"config": asdict(TitanConfig()), "device": "cuda",
                              "gpu": "NVIDIA H200", "median_s": 1.0, "tokens_per_s": 16384.0,
                              "peak_allocated_bytes": 90 * 2**30}  # fmt: skip
    rec.update(over)
    return rec


def test_a_record_is_simulated_as_the_torchtitan_job_it_ran() -> None:
    """flash -> fa2, per-op SAC -> selective under the torchtitan preset, the record's
    sizes on one H200; cuDNN's attention is faster than FlashAttention-2's, full
    recomputation slower than SAC."""
    from calibrate.titan_compare import record_scenario
    from sim.training.step import simulate_step

    sc = record_scenario(_record(), "none")
    assert sc.training.attention_kernel == "fa2" and sc.parallel.recompute == "selective"
    assert sc.framework is not None and sc.framework.recompute_early_stop
    assert sc.model.layers == 16 and sc.model.vocab == 128256 and sc.training.seq_len == 8192
    step = {k: simulate_step(record_scenario(_record(config={**_record()["config"], **v}),
                                             "none"), network="analytical").step_time_s
            for k, v in {"fa2": {}, "cudnn": {"attention": "cudnn"},
                         "full": {"ac": "full"}}.items()}  # type: ignore[dict-item]  # fmt: skip
    assert step["cudnn"] < step["fa2"] < step["full"]


def test_compare_prints_records_layers_and_classes(tmp_path: Path) -> None:
    recs = []
    for layers in (2, 1):
        out = tmp_path / f"t{layers}.json"
        trace = tmp_path / f"t{layers}_trace.json"
        r = subprocess.run([sys.executable, "-m", "calibrate.titan_step", "--quick", "--device",
                            "cpu", "--layers", str(layers), "--attention", "math", "--steps", "1",
                            "--warmup", "1", "--out", str(out), "--trace", str(trace)], cwd=ROOT,
                           capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
        assert r.returncode == 0, r.stderr[-2000:]
        recs.append(str(out))
    from calibrate.titan_compare import main

    r = subprocess.run([sys.executable, "-m", "calibrate.titan_compare", *recs, "--trace",
                        str(tmp_path / "t2_trace.json")], cwd=ROOT, capture_output=True,
                       text=True, timeout=600, check=False)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert "t2.json" in r.stdout and "one layer (2 vs 1 layers, math, op)" in r.stdout
    assert "  gemm " in r.stdout and "optimizer" in r.stdout
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_record(gpu="NVIDIA A10")))
    assert main([str(bad)]) == 2
