"""fp8 under sequence parallelism: operands cast on the shard and gathered in fp8, and the
backward re-gather that frameworks keeping the gathered input do not do.

Sources: Transformer Engine ``TransformerEngineBaseModule.grad_output_preprocess`` ("FP8
case with gather: ... cast, transpose for efficient gather"); torchao
``float8_tensor_parallel.Float8ColwiseParallel`` / ``Float8RowwiseParallel`` (the input
cast to fp8 before ``redistribute``; the output gradient cast by
``_NoopFwToFloat8BwDynamic`` after the reduce-scatter, so its all-gather moves fp8).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.scenario.load import scenario_from_dict
from sim.training.graph.costs import op_context
from sim.training.setup import prepare_step
from sim.workload.models import model_preset
from sim.workload.ops import OpContext, layer_ops
from sim.workload.primitives import (
    ACT_BYTES,
    FP8_CAST_BYTES,
    FP8_SHARD_CAST_BYTES,
    FP8_TRANSPOSE_BYTES,
)

LLAMA = model_preset("llama3-70b")
MIXTRAL = model_preset("mixtral-8x7b")


def _comms(ctx: OpContext) -> dict[str, tuple[str, float]]:
    ops = layer_ops(ctx)
    return {o.name: (o.comm_op, o.comm_bytes) for o in ops.fwd + ops.bwd if o.kind == "tp_comm"}


def _ops(ctx: OpContext) -> dict[str, float]:
    ops = layer_ops(ctx)
    return {o.name: o.bytes for o in ops.fwd + ops.bwd if o.kind == "compute"}


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_fp8_all_gathers_move_one_byte_and_reductions_stay_bf16(tp: int) -> None:
    """The forward input gathers, the re-gathers and the backward output-gradient gathers
    of an fp8 layer move 1 byte per element; every reduce-scatter moves bf16."""
    ctx = OpContext(LLAMA, 1, 8192, tp=tp, sp=True, precision="fp8")
    full = ctx.tokens * LLAMA.hidden
    comms = _comms(ctx)
    for name in ("attn_ag", "mlp_ag", "attn_rs_bwd", "mlp_rs_bwd", "qkv_regather",
                 "mlp_up_regather"):  # fmt: skip
        assert comms[name] == ("all_gather", full), name
    for name in ("attn_rs", "mlp_rs", "attn_ag_bwd", "mlp_ag_bwd"):
        assert comms[name] == ("reduce_scatter", ACT_BYTES * full), name


def test_bf16_and_fp8_without_sequence_parallelism_keep_bf16_collectives() -> None:
    """Only fp8 with SP and TP > 1 gathers fp8: bf16 layers and fp8 without SP move
    2 bytes per element (an all-reduce under plain TP reduces partial sums)."""
    bf16 = OpContext(LLAMA, 1, 8192, tp=8, sp=True, precision="bf16")
    assert bf16.fp8_gathers is False
    assert _comms(bf16)["attn_ag"][1] == ACT_BYTES * bf16.tokens * LLAMA.hidden
    no_sp = OpContext(LLAMA, 1, 8192, tp=8, sp=False, precision="fp8")
    assert no_sp.fp8_gathers is False
    assert _comms(no_sp)["attn_ar"] == ("all_reduce", ACT_BYTES * no_sp.tokens * LLAMA.hidden)


def test_a_moe_layer_gathers_its_router_input_in_bf16() -> None:
    """The MLP gather of a MoE layer feeds the bf16 router: it stays bf16 under fp8, while
    its attention gather (feeding the fp8 QKV projection) is fp8."""
    ctx = OpContext(MIXTRAL, 1, 4096, tp=2, sp=True, precision="fp8")
    comms, full = _comms(ctx), ctx.tokens * MIXTRAL.hidden
    assert comms["mlp_ag"][1] == ACT_BYTES * full
    assert comms["attn_ag"][1] == full


@settings(max_examples=30, deadline=None)
@given(tp=st.sampled_from([2, 4, 8]), mb=st.integers(1, 4))
def test_gathered_operands_are_cast_on_the_shard_and_transposed_once(tp: int, mb: int) -> None:
    """The QKV input and the output projection's gradient are cast on this rank's
    1/tp shard (3 bytes per element) and transposed once gathered (2 bytes), fewer bytes
    than one fused cast-transpose of the whole gathered tensor (4 bytes)."""
    ctx = OpContext(LLAMA, mb, 4096, tp=tp, sp=True, precision="fp8")
    ops = _ops(ctx)
    x = ctx.tokens * LLAMA.hidden  # the gathered QKV input, elements
    assert ops["qkv_cast_x"] == pytest.approx(FP8_SHARD_CAST_BYTES * x / tp)
    assert ops["qkv_cast_x_transpose"] == pytest.approx(FP8_TRANSPOSE_BYTES * x)
    dy = ctx.tokens * LLAMA.hidden  # the output projection's gathered gradient
    assert ops["attn_out_cast_dy"] == pytest.approx(FP8_SHARD_CAST_BYTES * dy / tp)
    assert ops["qkv_cast_x"] + ops["qkv_cast_x_transpose"] < FP8_CAST_BYTES * x
    # an operand that is not gathered keeps the one fused cast-transpose
    k_out = LLAMA.hidden // tp
    assert ops["attn_out_cast_x"] == pytest.approx(FP8_CAST_BYTES * ctx.tokens * k_out)


def test_fp8_gathers_leave_the_flops_unchanged() -> None:
    """Where the casts happen moves bytes, not work: model and hardware FLOPs of an fp8
    layer with SP equal those without."""
    sp = layer_ops(OpContext(LLAMA, 1, 8192, tp=8, sp=True, precision="fp8"))
    plain = layer_ops(OpContext(LLAMA, 1, 8192, tp=8, sp=False, precision="fp8"))
    assert sp.model_flops == plain.model_flops
    assert sp.hardware_flops == plain.hardware_flops


def test_keeping_the_gathered_input_drops_the_backward_regathers() -> None:
    """tp_regather False (the input gathered in forward is kept for the weight gradient)
    removes exactly the two backward re-gathers of a layer."""
    kept = _comms(OpContext(LLAMA, 1, 8192, tp=8, sp=True, tp_regather=False))
    again = _comms(OpContext(LLAMA, 1, 8192, tp=8, sp=True))
    assert set(again) - set(kept) == {"qkv_regather", "mlp_up_regather"}


def _context(framework: str) -> OpContext:
    raw = {
        "model": {"preset": "llama3-8b"},
        "cluster": {"topology": "dgx-h100"},
        "parallel": {"tp": 8, "sp": True, "micro_batch": 1},
        "training": {"global_batch": 1, "seq_len": 2048, "framework": framework},
        "network": "analytical",
    }
    return op_context(prepare_step(scenario_from_dict(raw, "t"), "analytical"))


def test_the_framework_decides_whether_the_input_is_gathered_again() -> None:
    """torchtitan (DTensor keeps the gathered input: tp_saves_gathered_input) does not
    re-gather in backward; Megatron-Core (keeps the shard) does; the memory model reads
    the same framework switch."""
    assert _context("torchtitan").tp_regather is False
    assert _context("megatron-core").tp_regather is True
