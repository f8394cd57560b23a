"""Workload ops: FLOP counting against published formulas, TP/EP communication, kernels."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from sim.workload.comms import dp_buckets, rank_params, step_comm
from sim.workload.flops import megatron_flops, six_n_flops, step_flops
from sim.workload.models import megatron_gpt, model_preset, param_count
from sim.workload.ops import Op, OpContext, chunk_ops, layer_ops, tokens_per_expert
from sim.workload.plan import ParallelPlan

PUBLISHED = Path(__file__).resolve().parents[2] / "shared" / "data" / "published"


def _megatron_rows() -> list[dict[str, str]]:
    path = PUBLISHED / "megatron-lm-a100-weak-scaling.csv"
    if not path.exists():
        pytest.skip(f"published data not found at {path}")
    with path.open() as f:
        next(f)
        return list(csv.DictReader(f))


def test_full_recompute_flops_equal_megatron_formula_exactly() -> None:
    """Hardware FLOPs with full recompute == 96 B s l h^2 (1 + s/6h + V/16lh), exactly.

    Source: Narayanan et al. SC21 eq. 3, for every row of the Megatron weak-scaling table
    (vocab 51200, seq 2048). Same assumptions: matmuls only, full s x s attention.
    """
    for row in _megatron_rows():
        m = megatron_gpt(int(row["hidden_size"]), int(row["num_layers"]))
        batch = int(row["batch_size"])
        assert step_flops(m, 2048, batch, "full").hardware_flops == megatron_flops(m, 2048, batch)


def test_model_flops_are_three_quarters_of_full_recompute_layers() -> None:
    """Without recompute: 72 B s l h^2 (1 + s/6h + V/12lh) (the MFU numerator)."""
    m = megatron_gpt(4096, 36)
    b, s, n, h, v = 512, 2048, 36, 4096, 51200
    expected = 72 * b * s * n * h**2 + 12 * b * s**2 * n * h + 6 * b * s * h * v
    f = step_flops(m, s, b, "full")
    assert f.model_flops == expected
    assert step_flops(m, s, b, "none").hardware_flops == expected


def test_selective_recompute_adds_only_the_attention_core() -> None:
    """Selective recompute adds the forward attention core, 4 b s^2 h per layer."""
    m = megatron_gpt(2048, 4)
    base = step_flops(m, 1024, 8, "none").hardware_flops
    sel = step_flops(m, 1024, 8, "selective").hardware_flops
    assert sel - base == 8 * 4 * 1024**2 * 2048 * 4


def test_torchtitan_op_sac_recomputes_wk_wo_w3_and_every_elementwise_kernel() -> None:
    """torchtitan's per-op SAC (torchtitan/distributed/activation_checkpoint.py:
    ``_save_list``, ``_custom_policy``) keeps every odd ``aten.mm`` output in call order
    and SDPA's: a Llama block's backward re-runs ``wk``, ``wo`` and ``w3`` (closed form:
    ``2 b s h (kv + h + f)``), never the attention kernel, and every elementwise kernel
    of the forward, byte for byte. Model FLOPs do not move."""
    m, b, s = model_preset("llama3-8b"), 2, 8192
    plain = layer_ops(OpContext(m, b, s))
    sac = layer_ops(OpContext(m, b, s, recompute="selective", selective="op"))
    redo = [o for o in sac.bwd if o.recompute]
    kv = m.kv_heads * m.head_dim
    assert sac.hardware_flops - plain.hardware_flops == 2 * b * s * m.hidden * (
        kv + m.hidden + m.ffn_hidden
    )
    assert sac.model_flops == plain.model_flops
    assert not [o for o in redo if o.cls.startswith("attn")]
    assert [o.shape[1] for o in redo if o.cls == "gemm"] == [kv, m.hidden, m.ffn_hidden]
    elementwise = [o for o in plain.fwd if o.cls in ("memory", "stream")]
    assert sum(o.bytes for o in redo if o.cls in ("memory", "stream")) == sum(
        o.bytes for o in elementwise
    )
    megatron = layer_ops(OpContext(m, b, s, recompute="selective"))  # the attention core only
    assert [o.cls for o in megatron.bwd if o.recompute] == ["attn_fwd"]


def test_op_sac_under_sequence_parallelism_regathers_but_keeps_reduce_scatters() -> None:
    """Under TP with SP the recompute pass re-runs the two all-gathers (not on the save
    list) and takes the reduce-scatters' saved outputs. A GPT block (one up projection)
    makes six matmul calls: it re-runs ``wk``, the output projection and the down one."""
    m = model_preset("llama3-70b")
    ctx = OpContext(m, 1, 8192, tp=8, sp=True, recompute="selective", selective="op")
    redo = [o for o in layer_ops(ctx).bwd if o.recompute]
    assert sorted(o.comm_op for o in redo if o.comm_op) == ["all_gather", "all_gather"]
    gpt = megatron_gpt(1024, 2, heads=16)
    redo = [o for o in layer_ops(OpContext(gpt, 1, 512, recompute="selective",
                                           selective="op")).bwd if o.recompute]  # fmt: skip
    assert [(o.name, o.shape[1]) for o in redo if o.cls == "gemm"] == [
        ("recompute_qkv_1", 1024), ("recompute_attn_out", 1024), ("recompute_mlp_down", 1024)]  # fmt: skip


def test_six_n_approximation_within_three_percent_for_gpt3() -> None:
    """GPT-3 175B at s = 2048: model FLOPs ~ 6 N D (attention adds s/6h = 2.8%)."""
    m = model_preset("gpt3-175b")
    f = step_flops(m, 2048, 1536)
    assert f.model_flops == pytest.approx(six_n_flops(m, f.tokens), rel=0.03)


@pytest.mark.parametrize("name", ["llama2-7b", "llama2-70b", "llama3-8b", "llama3-405b"])
def test_llama_flops_match_6n_plus_attention(name: str) -> None:
    """Model FLOPs per token = 6 N' + 12 l s h (PaLM, Chowdhery et al. 2022, App. B) within
    0.5%, N' excluding the input embedding table (a lookup, no FLOPs; Llama is untied)."""
    m = model_preset(name)
    s = 4096
    f = step_flops(m, s, 16)
    per_token = 6 * (param_count(m) - m.vocab * m.hidden) + 12 * m.layers * s * m.hidden
    assert f.model_flops / f.tokens == pytest.approx(per_token, rel=0.005)


def test_tensor_parallel_ranks_split_the_matmul_flops() -> None:
    """tp ranks each do 1/tp of a layer's matmul FLOPs (MHA, no replication)."""
    m = model_preset("llama2-13b")
    one = layer_ops(OpContext(m, 1, 4096)).model_flops
    eight = layer_ops(OpContext(m, 1, 4096, tp=8)).model_flops
    assert 8 * eight == one


def test_gqa_shrinks_the_qkv_projection() -> None:
    """Llama-2-70B's 8 KV heads: QKV output width h + 2 * 8 * 128, not 3h."""
    m = model_preset("llama2-70b")
    qkv = next(o for o in layer_ops(OpContext(m, 1, 4096)).fwd if o.name == "qkv")
    assert qkv.flops == 2 * 4096 * 8192 * (8192 + 2 * 1024)


def _comms(ops: tuple[Op, ...]) -> list[tuple[str, float]]:
    return [(o.comm_op or "", o.comm_bytes) for o in ops if o.kind == "tp_comm"]


def test_tp_without_sp_all_reduces_twice_forward_and_twice_backward() -> None:
    """Megatron TP: g all-reduces after attention and MLP; f all-reduces in backward."""
    m = model_preset("llama2-7b")
    ops = layer_ops(OpContext(m, 2, 4096, tp=8))
    size = 2 * 2 * 4096 * 4096  # b s h bf16
    assert _comms(ops.fwd) == [("all_reduce", size)] * 2
    assert _comms(ops.bwd) == [("all_reduce", size)] * 2


def test_sequence_parallel_uses_gather_and_scatter() -> None:
    """SP: forward all-gather + reduce-scatter per block; backward their conjugates and
    the re-gather of the sharded input for the weight gradient."""
    m = model_preset("llama2-7b")
    ops = layer_ops(OpContext(m, 1, 4096, tp=8, sp=True))
    fwd = [op for op, _ in _comms(ops.fwd)]
    bwd = sorted(op for op, _ in _comms(ops.bwd))
    assert fwd == ["all_gather", "reduce_scatter", "all_gather", "reduce_scatter"]
    assert bwd == ["all_gather"] * 4 + ["reduce_scatter"] * 2


def test_full_recompute_replays_the_forward_first() -> None:
    """Full recompute: the backward starts with the whole forward, TP comms included."""
    ctx = OpContext(model_preset("llama2-7b"), 1, 4096, tp=8, recompute="full")
    ops = layer_ops(ctx)
    replay = ops.bwd[: len(ops.fwd)]
    assert [o.name for o in replay] == [f"recompute_{o.name}" for o in ops.fwd]
    assert all(o.recompute for o in replay)
    assert ops.hardware_flops == pytest.approx(ops.model_flops * 4 / 3)


def test_moe_layer_dispatches_and_combines_over_ep() -> None:
    """Mixtral: two all-to-alls each way, experts compute top_k x a dense MLP's FLOPs."""
    m = model_preset("mixtral-8x7b")
    ctx = OpContext(m, 1, 4096)
    ops = layer_ops(ctx)
    a2a = [o for o in ops.fwd if o.kind == "ep_comm"]
    assert [o.comm_op for o in a2a] == ["all_to_all", "all_to_all"]
    assert a2a[0].comm_bytes == 2 * 4096 * 2 * 4096  # tokens * top_k * h * bf16
    experts = sum(o.flops for o in ops.fwd if o.name.startswith("expert_") and o.matmul)
    assert experts == 2 * (3 * 2 * 4096 * 4096 * 14336)
    assert tokens_per_expert(ctx, ep=8) == 4096 * 2


def test_flash_and_unfused_attention_count_the_same_flops() -> None:
    """Fusing attention changes bytes, not FLOPs."""
    m = model_preset("gpt2-124m")
    fused = layer_ops(OpContext(m, 4, 1024, flash_attention=True))
    unfused = layer_ops(OpContext(m, 4, 1024, flash_attention=False))
    assert fused.model_flops == unfused.model_flops
    assert sum(o.bytes for o in fused.fwd) < sum(o.bytes for o in unfused.fwd)


def test_chunks_put_embedding_first_and_logits_last() -> None:
    """The first pipeline chunk starts with the embedding, the last ends with the loss."""
    ctx = OpContext(model_preset("llama2-7b"), 1, 4096)
    first, last = chunk_ops(ctx, 2, True, False), chunk_ops(ctx, 2, False, True)
    assert first.fwd[0].name == "embedding" and last.fwd[-1].name == "cross_entropy"
    assert last.bwd[0].name == "cross_entropy_bwd"


def test_ranks_hold_every_parameter_once() -> None:
    """Summing the parameters over all tp x pp ranks gives the model (untied)."""
    m = model_preset("llama2-70b")
    plan = ParallelPlan(tp=8, pp=4, dp=1, global_batch=4)
    total = sum(rank_params(m, plan, s).total for s in range(4)) * 8
    norms = m.hidden * (2 * m.layers + 1)  # replicated over tp: counted tp times
    assert total - 7 * norms == pytest.approx(param_count(m))


def test_step_comm_volumes() -> None:
    """PP sends b s h / t with SP; DP reduces the rank's fp32 main grads (4 bytes, or 2
    with bf16 reduction); ZeRO-3 gathers layers in bf16."""
    m = model_preset("llama2-70b")
    plan = ParallelPlan(tp=8, pp=4, dp=8, sp=True, zero=0, global_batch=64)
    c = step_comm(m, plan, 4096, stage=1)
    assert c.pp_send_bytes == 2 * 4096 * 8192 / 8
    assert c.dp_grad_op == "all_reduce"
    assert c.dp_grad_bytes == 4 * rank_params(m, plan, 1).dense
    bf16 = ParallelPlan(tp=8, pp=4, dp=8, sp=True, zero=0, global_batch=64, grad_bytes=2)
    assert step_comm(m, bf16, 4096, stage=1).dp_grad_bytes == c.dp_grad_bytes / 2
    z3 = step_comm(m, ParallelPlan(dp=8, zero=3, global_batch=8), 4096)
    assert z3.dp_grad_op == "reduce_scatter" and z3.layer_gather_bytes > 0
    assert dp_buckets(100.0, 25.0) == [25.0] * 4


def test_an_early_stopping_recompute_skips_the_block_s_last_matmul_and_its_tail() -> None:
    """PyTorch's non-reentrant checkpoint (torchtitan's, ``recompute_early_stop``) stops
    once the saved tensors are back: under full recompute a Llama block re-runs all but
    ``w2``, its reduce-scatter and the residual add (closed form: the forward's matmul
    FLOPs less ``2 b s f h``); under per-op SAC only the residual add drops out."""
    m, b, s = model_preset("llama3-8b"), 2, 8192
    plain = layer_ops(OpContext(m, b, s))
    full = layer_ops(OpContext(m, b, s, recompute="full"))
    stop = layer_ops(OpContext(m, b, s, recompute="full", early_stop=True))
    down = 2 * b * s * m.ffn_hidden * m.hidden
    assert full.hardware_flops - stop.hardware_flops == down
    assert stop.model_flops == plain.model_flops
    redo = [o for o in stop.bwd if o.recompute]
    names = [o.name for o in redo]
    assert "recompute_mlp_down" not in names and "recompute_mlp_residual" not in names
    assert [o.cls for o in redo].count("attn_fwd") == 1  # full recompute re-runs attention
    sac = [o.name for o in layer_ops(OpContext(m, b, s, recompute="selective", selective="op",
                                               early_stop=True)).bwd if o.recompute]  # fmt: skip
    sac_all = [o.name for o in layer_ops(OpContext(m, b, s, recompute="selective",
                                                   selective="op")).bwd if o.recompute]  # fmt: skip
    assert sac_all[-1] == "recompute_mlp_residual" and sac == sac_all[:-1]
    tp = OpContext(m, 1, 8192, tp=8, sp=True, recompute="full", early_stop=True)
    rs = [o.name for o in layer_ops(tp).bwd if o.recompute and o.comm_op == "reduce_scatter"]
    assert rs == ["recompute_attn_rs"]
