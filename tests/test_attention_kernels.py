"""Fused attention by kernel family, timed from the FlashAttention papers' benchmarks."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.catalog import gpu_spec
from sim.errors import ConfigError
from sim.scenario.load import scenario_from_dict
from sim.training.compute.attention import (
    attention_fraction,
    attention_tables,
    convention_flops,
)
from sim.training.compute.kernels import attention_time_s, op_time_s, sustain
from sim.training.compute.params import compute_params
from sim.workload.models import model_preset
from sim.workload.ops import OpContext, layer_ops

H100 = gpu_spec("H100-SXM")
PEAK = H100.peak_flops["bf16"]


@pytest.mark.parametrize(
    ("family", "causal", "dim", "seq", "tflops"),
    [("cudnn", True, 128, 8192, 529), ("fa3", False, 256, 16384, 756),
     ("fa2", False, 64, 512, 282), ("triton", True, 128, 2048, 323)],
)  # fmt: skip
def test_published_forward_points_are_reproduced(family: str, causal: bool, dim: int,
                                                 seq: int, tflops: float) -> None:  # fmt: skip
    """At a published column the rate is the printed bar value (FlashAttention-3 paper,
    arXiv:2407.08608v1, Fig. 5: H100 80GB SXM5, forward)."""
    frac = attention_fraction("H100-SXM", family, dim, seq, causal, False)
    assert frac is not None
    assert frac * 989.4e12 == pytest.approx(tflops * 1e12, rel=1e-9)


def test_fa2_backward_closes_the_published_forward_plus_backward() -> None:
    """FlashAttention-2 on H100: with the derived backward, 3.5 F / (F/fwd + 2.5 F/bwd)
    gives the FA2 README's forward + backward bar (causal, head dim 128, 16k: 328)."""
    f = attention_fraction("H100-SXM", "fa2", 128, 16384, True, False)
    b = attention_fraction("H100-SXM", "fa2", 128, 16384, True, True)
    assert f is not None and b is not None
    assert 3.5 / (1 / f + 2.5 / b) * 989.4 == pytest.approx(328, rel=1e-9)


def test_kernel_ordering_on_h100_follows_the_papers() -> None:
    """Long causal sequences, head dim 128: FA3 > cuDNN > FA2 > llm-foundry's parametric
    Triton kernel, forward and backward."""
    p = compute_params("H100-SXM")

    def t(kernel: str, bwd: bool) -> float:
        return attention_time_s(2, 32, 8192, 128, True, bwd, "bf16", H100, p, kernel)

    for bwd in (False, True):
        assert t("fa3", bwd) < t("cudnn", bwd) < t("fa2", bwd) < t("fa_triton", bwd)


def test_sequence_ends_clamp_and_short_sequences_slow_down() -> None:
    at = lambda s: attention_fraction("H100-SXM", "fa2", 128, s, True, False)  # noqa: E731
    assert at(65536) == at(16384)
    assert at(256) < at(512) < at(1024)
    assert at(16) == pytest.approx(0.25 * at(512))


def test_head_dim_112_runs_as_128() -> None:
    """Kernels compile head sizes in multiples of 32: 112 costs what 128 does."""
    p = compute_params("H100-SXM")
    assert attention_time_s(1, 8, 4096, 112, True, False, "bf16", H100, p, "fa2") == pytest.approx(
        attention_time_s(1, 8, 4096, 128, True, False, "bf16", H100, p, "fa2")
    )


def test_time_is_convention_flops_over_rate_times_sustain() -> None:
    p = replace(compute_params("H100-SXM"), matmul_training_factor=0.5, launch_overhead_s=0.0)
    frac = attention_fraction("H100-SXM", "cudnn", 128, 4096, True, True)
    assert frac is not None
    want = convention_flops(4, 16, 4096, 128, True, True) / (PEAK * frac * sustain(p))
    got = attention_time_s(4, 16, 4096, 128, True, True, "bf16", H100, p, "cudnn")
    assert got == pytest.approx(want, rel=1e-12)


def test_a_family_not_measured_on_a_gpu_is_a_config_error() -> None:
    """FlashAttention-3 runs on Hopper only: asking for it on an A100 names what exists."""
    with pytest.raises(ConfigError, match=r"fa3.*A100-SXM-80GB.*fa2"):
        attention_fraction("A100-SXM-80GB", "fa3", 128, 4096, True, False)


def test_parametric_families_fall_back_to_the_fitted_model() -> None:
    """llm-foundry's Triton kernel has no H100 benchmark: the fitted model times it."""
    assert attention_tables()["H100-SXM"]["fa_triton"] is None
    p = compute_params("H100-SXM")
    args = (2, 16, 4096, 128, True, False, "bf16", H100, p)
    assert attention_time_s(*args, "fa_triton") == attention_time_s(*args, "fitted")


def test_the_scenario_key_reaches_the_attention_ops() -> None:
    base = {"model": {"preset": "llama3-8b"}, "cluster": {"topology": "dgx-h100"},
            "training": {"global_batch": 8, "seq_len": 4096}}  # fmt: skip
    assert scenario_from_dict(base).training.attention_kernel == "fitted"
    sc = scenario_from_dict({**base, "training": {**base["training"], "attention_kernel": "cudnn"}})
    assert sc.training.attention_kernel == "cudnn"
    ctx = OpContext(model_preset("llama3-8b"), 1, 4096, attention_kernel="cudnn")
    attn = [o for o in layer_ops(ctx).fwd if o.cls == "attn_fwd"]
    assert [o.kernel for o in attn] == ["cudnn"]
    assert op_time_s(attn[0], H100, compute_params("H100-SXM")) > 0
    with pytest.raises(ConfigError, match=r"training.attention_kernel.*fa2, fa3, cudnn"):
        scenario_from_dict({**base, "training": {**base["training"], "attention_kernel": "fa9"}})
