"""Memory as each framework holds it: closed forms from the frameworks' documents."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.training.memory.activations import (
    LOGIT_BYTES,
    activation_bytes_per_layer,
    op_sac_bytes_per_token,
)
from sim.training.memory.advice import memory_advice
from sim.training.memory.allocator import device_memory_bytes
from sim.training.memory.report import memory_per_gpu, memory_per_stage
from sim.workload.comms import end_params, layer_rank_params, rank_params
from sim.workload.framework_section import framework_semantics
from sim.workload.frameworks import PRESETS
from sim.workload.models import ModelSpec, megatron_gpt, model_preset, param_count
from sim.workload.plan import ParallelPlan

GIB = 2**30
LLAMA = model_preset("llama3-8b")
GPT = megatron_gpt(4096, 8, heads=32)


def _states(model: ModelSpec, plan: ParallelPlan, framework: str, **over: object) -> float:
    sem = framework_semantics(framework, over)
    r = memory_per_gpu(model, plan, 2048, 80e9, semantics=sem)
    return r.weights_bytes + r.grads_bytes + r.optimizer_bytes


@pytest.mark.parametrize(
    ("plan", "framework"),
    [
        (ParallelPlan(global_batch=8), None),
        (ParallelPlan(tp=2, pp=2, dp=2, sp=True, zero=1, global_batch=8), None),
        (ParallelPlan(dp=8, zero=3, fsdp="FULL_SHARD", global_batch=8), None),
    ],
)
def test_without_a_framework_nothing_changes(plan: ParallelPlan, framework: None) -> None:
    """semantics=None is the framework-neutral model, call for call."""
    a = memory_per_gpu(LLAMA, plan, 4096, 80e9)
    b = memory_per_gpu(LLAMA, plan, 4096, 80e9, semantics=framework)
    assert a == b


def test_megatron_distributed_optimizer_bytes_per_parameter() -> None:
    """Megatron-LM dist_optimizer.md: bf16 params + fp32 grads take 18 bytes per parameter,
    6 + 12/d with the distributed optimizer; fp16 params + fp16 grads take 20 and
    4 + 16/d (the optimizer's fp32 copy of the gradient shard)."""
    n, d = param_count(GPT), 8
    assert _states(GPT, ParallelPlan(global_batch=8), "megatron-core") == 18 * n
    plan = ParallelPlan(dp=d, zero=1, global_batch=8)
    assert _states(GPT, plan, "megatron-core") == pytest.approx((6 + 12 / d) * n)
    fp16 = {"main_grad_dtype": "fp16", "grad_reduce_dtype": "fp16", "fp32_grad_copy": True}
    assert _states(GPT, ParallelPlan(global_batch=8), "megatron-core", **fp16) == 20 * n
    assert _states(GPT, plan, "megatron-core", **fp16) == pytest.approx((4 + 16 / d) * n)


@pytest.mark.parametrize(("zero", "per_param"), [(0, 16.0), (1, 4 + 12 / 64), (2, 2 + 14 / 64)])
def test_zero_paper_model_states(zero: int, per_param: float) -> None:
    """Rajbhandari et al. 2020, Figure 1 / Table 1 (K = 12, Nd = 64): (2 + 2 + K) Psi,
    2 Psi + 2 Psi + K Psi / Nd, 2 Psi + (2 + K) Psi / Nd; DeepSpeed's bf16 regime with
    the paper's accounting (no fp32 gradient copy, no staging bucket)."""
    plan = ParallelPlan(dp=64, zero=zero, global_batch=64)
    got = _states(GPT, plan, "deepspeed", fp32_grad_copy=False, grad_bucket_copy="none")
    layer = layer_rank_params(GPT, plan).total
    transient = layer * 2 if zero == 2 else 0.0  # one unit's unsharded bf16 gradients
    assert got == pytest.approx(per_param * param_count(GPT) + transient)


def test_torchtitan_fsdp_holds_16_bytes_over_d_and_two_gathered_blocks() -> None:
    """FSDP2 with fp32 sharded params: fp32 param + grad + Adam m, v = 16/d per parameter;
    bf16 gathered: two blocks and the root (embedding, norm, output); one block's bf16
    gradients and their fp32 cast for the reduce-scatter."""
    d = 8
    plan = ParallelPlan(dp=d, zero=3, global_batch=8)
    n = param_count(LLAMA)
    layer = layer_rank_params(LLAMA, plan).total
    root = end_params(LLAMA, plan, 0)
    expected = 16 * n / d + 2 * (2 * layer + root) + layer * (2 + 4)
    assert _states(LLAMA, plan, "torchtitan") == pytest.approx(expected)


def test_fsdp2_with_pipeline_keeps_the_stage_gathered_and_its_grads_unsharded() -> None:
    """torch.distributed.pipelining + FSDP2 (no reshard after forward, gradient sync off
    until the last backward): bf16 stage parameters and their fp32 unsharded gradients
    live for the whole step, on top of the 16/d sharded states."""
    d = 8
    plan = ParallelPlan(pp=4, dp=d, zero=3, global_batch=32)
    p = rank_params(LLAMA, plan, 1).total
    layer = layer_rank_params(LLAMA, plan).total
    sem = PRESETS["torchtitan"]
    r = memory_per_stage(LLAMA, plan, 4096, 80e9, semantics=sem)[1]
    assert r.weights_bytes == pytest.approx(2 * p)
    assert r.grads_bytes == pytest.approx(4 * p / d + 4 * p + 2 * layer)
    per_microbatch = replace(sem, pp_gather_once=False)
    r2 = memory_per_stage(LLAMA, plan, 4096, 80e9, semantics=per_microbatch)[1]
    assert r2.weights_bytes + r2.grads_bytes < r.weights_bytes + r.grads_bytes


def test_ddp_with_autocast_holds_22_bytes_per_parameter() -> None:
    """fp32 params (with Adam: 16), fp32 .grad (4)... PyTorch DDP's bucket copy (4) and
    the autocast bf16 weight cache (2): 12 + 4 + 4 + 2."""
    n = param_count(GPT)
    assert _states(GPT, ParallelPlan(dp=4, global_batch=8), "ddp") == 22 * n
    no_copy = _states(GPT, ParallelPlan(dp=4, global_batch=8), "ddp", grad_bucket_copy="none")
    assert no_copy == 18 * n  # gradient_as_bucket_view=True saves "the total gradients size"


def test_deepspeed_zero2_stages_gradients_in_bucket_sized_buffers() -> None:
    """contiguous_gradients: one reduce_bucket_size staging buffer, two with overlap_comm."""
    plan = ParallelPlan(dp=8, zero=2, global_batch=8)
    base = _states(GPT, plan, "deepspeed", grad_bucket_copy="none")
    one = _states(GPT, plan, "deepspeed")
    two = _states(GPT, plan, "deepspeed", overlap_grad_reduce=[2])
    staged = min(5e8, param_count(GPT)) * 2
    assert one - base == pytest.approx(staged - layer_rank_params(GPT, plan).total * 2)
    assert two - one == pytest.approx(staged)


def test_op_sac_keeps_q_v_attention_w1_w2_and_reduce_scatter_outputs_under_tp() -> None:
    """torchtitan per-op SAC under TP 8 with SP: sharded input, Q, V (one KV head per
    rank), attention output + fp32 LSE, w1, the full-width partial sum of w2, and the two
    reduce-scatter outputs."""
    m, t = LLAMA, 8
    h, f = m.hidden, m.ffn_hidden
    expected = 2 * (h / t + h / t + 128 + h / t + f / t + h + 2 * h / t) + 4 * m.heads / t
    assert op_sac_bytes_per_token(m, t, True) == pytest.approx(expected)
    full = activation_bytes_per_layer(m, 4096, 1, t, True, "none")
    sac = activation_bytes_per_layer(m, 4096, 1, t, True, "selective", True, "op")
    assert sac == pytest.approx(4096 * expected) and sac < full


def test_dtensor_keeps_the_two_matmul_inputs_all_gathered() -> None:
    """Under TP with SP, PyTorch DTensor's column-parallel matmuls save their gathered
    inputs: 2 x 2h (1 - 1/t) more bytes per token than Megatron, which saves them
    sharded and gathers them again in the backward."""
    t = 4
    meg = activation_bytes_per_layer(LLAMA, 1024, 1, t, True)
    dt = activation_bytes_per_layer(LLAMA, 1024, 1, t, True, gathered=True)
    assert dt - meg == pytest.approx(1024 * 2 * 2 * LLAMA.hidden * (1 - 1 / t))


def test_pipeline_outputs_and_receive_buffers_when_not_deallocated() -> None:
    """A stage that keeps its sent outputs holds one per micro-batch in flight; a runtime
    that allocates receive buffers per micro-batch holds 2 per micro-batch of the step."""
    plan = ParallelPlan(pp=4, dp=1, global_batch=8, recompute="full")
    meg = framework_semantics("megatron-core")
    keep = replace(meg, deallocate_pipeline_outputs=False)
    recv = replace(meg, recv_buffers_per_microbatch=True)
    stage = 1  # 1F1B: 3 micro-batches in flight, 8 in the step
    acts = [memory_per_stage(GPT, plan, 2048, 80e9, semantics=s)[stage].activations_bytes
            for s in (meg, keep, recv)]  # fmt: skip
    boundary = 2 * 2048 * GPT.hidden
    assert acts[1] - acts[0] == pytest.approx(3 * boundary)
    assert acts[2] - acts[0] == pytest.approx(8 * 2 * boundary)


def test_interleaved_last_stage_holds_one_micro_batch_of_logits() -> None:
    """Interleaved 1F1B runs the last chunk's forward and backward back to back, so the
    last stage keeps the fp32 logits of one micro-batch, though it holds more than one
    micro-batch of activations in flight."""
    plan = ParallelPlan(pp=2, dp=1, global_batch=8, schedule="interleaved", virtual_stages=2,
                        recompute="full")  # fmt: skip
    sem = PRESETS["megatron-core"]
    last = memory_per_stage(GPT, plan, 2048, 80e9, semantics=sem)[1].activations_bytes
    rest = memory_per_stage(replace(GPT, vocab=1), plan, 2048, 80e9, semantics=sem)[1]
    kept, extra = LOGIT_BYTES["fp32"]
    logits = 2048 * (GPT.vocab - 1)
    redo = activation_bytes_per_layer(GPT, 2048, 1)  # the block redone outweighs the loss
    assert redo > extra * logits
    assert last - rest.activations_bytes == pytest.approx(kept * logits)
    legacy = memory_per_stage(GPT, plan, 2048, 80e9)[1].activations_bytes
    legacy_rest = memory_per_stage(replace(GPT, vocab=1), plan, 2048, 80e9)[1].activations_bytes
    assert legacy - legacy_rest > 1.4 * kept * logits  # the neutral model: chunks in flight


def test_checkpoints_on_the_host_leave_only_the_redone_block() -> None:
    plan = ParallelPlan(dp=8, zero=3, global_batch=8, recompute="full")
    ds = framework_semantics("deepspeed")
    on_host = framework_semantics("deepspeed", {"cpu_checkpointing": True})
    a = memory_per_gpu(GPT, plan, 2048, 80e9, semantics=ds).activations_bytes
    b = memory_per_gpu(GPT, plan, 2048, 80e9, semantics=on_host).activations_bytes
    kept = GPT.layers * activation_bytes_per_layer(GPT, 2048, 1, recompute="full")
    assert a - b == pytest.approx(kept)


def test_reserved_reads_the_allocated_memory_on_a_roomy_device() -> None:
    r = memory_per_gpu(LLAMA, ParallelPlan(dp=8, zero=3, global_batch=8), 4096, 80e9,
                       semantics=PRESETS["torchtitan"])  # fmt: skip
    assert r.total_bytes - r.fragmentation_bytes - r.outside_allocator_bytes == pytest.approx(
        r.reserved_bytes * (1 - 0.0875)
    )
    assert r.outside_allocator_bytes == 1.24e9


def test_capacity_is_nvml_less_the_driver_reservation() -> None:
    """Modal's nvidia-smi table: H100 80 GB 81,559 MiB, A100 80 GB 81,920 MiB; a process
    on the probed H100 saw 480 MiB less (calibrate/memory_probe_h100.yaml)."""
    assert device_memory_bytes("H100-SXM", 80e9) == 85017493504
    assert device_memory_bytes("A100-SXM-80GB", 80e9) == 81920 * 2**20 - 480 * 2**20


def test_advice_holds_the_candidates_as_the_framework_does() -> None:
    """A plan that does not fit under torchtitan gets candidates checked under torchtitan."""
    plan = ParallelPlan(dp=8, zero=3, global_batch=16, micro_batch=2)
    sem = PRESETS["torchtitan"]
    r = memory_per_gpu(LLAMA, plan, 8192, 80e9, semantics=sem)
    notes = memory_advice(LLAMA, plan, 8192, r, semantics=sem)
    assert not r.fits and notes[0].startswith("DOES NOT FIT")
    assert "parallel.recompute=full" in notes[1] and "parallel.recompute=selective" in notes[1]


def test_fp32_parameters_stay_whole_under_zero1() -> None:
    """torchtitan holds fp32 parameters (they are the master weights): under ZeRO-1 they
    stay whole on every rank and only Adam's moments are sharded, so the rank holds 4 bytes
    per parameter of weights plus 8 / DP of moments (it counted 12 / DP, losing the weights)."""
    from sim.scenario.load import load_scenario
    from sim.training.step import simulate_step

    z0 = simulate_step(load_scenario("llama3-8b-dgx", ["parallel.zero=0"]), "analytical")
    z1 = simulate_step(load_scenario("llama3-8b-dgx", ["parallel.zero=1"]), "analytical")
    m0, m1 = z0.memory_breakdown, z1.memory_breakdown
    assert m0["weights"] == 0.0  # ZeRO-0: the fp32 parameters count with the optimizer
    assert m1["weights"] == pytest.approx(m0["optimizer"] / 3)  # 4 of the 12 bytes, whole
    assert m1["optimizer"] == pytest.approx(m0["optimizer"] * 2 / 3 / 8)  # moments / DP 8


def test_lora_under_fsdp_gathers_its_frozen_layers() -> None:
    """A LoRA model under FSDP2 gathers whole units, frozen base included: its weights are
    the base's shard plus the gathered units, which the full fine-tune gathers as well."""
    from sim.scenario.load import load_scenario
    from sim.training.step import simulate_step

    full = simulate_step(load_scenario("llama3-8b-dgx"), "analytical").memory_breakdown
    lora = simulate_step(
        load_scenario("llama3-8b-dgx", ["training.finetune=lora"]), "analytical"
    ).memory_breakdown
    assert lora["weights"] > full["weights"]  # the gathered units and the bf16 base shard
