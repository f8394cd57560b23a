"""The gradient-accumulation pass (``training.grad_accum_fusion``): when it applies, what
it moves, and that a step pays exactly its kernels."""

from __future__ import annotations

import pytest

from sim.catalog import gpu_spec
from sim.errors import ConfigError
from sim.scenario.load import load_scenario
from sim.training.compute.kernels import memory_time_s
from sim.training.compute.params import compute_params
from sim.training.graph.costs import grad_accum_bytes, op_context
from sim.training.setup import prepare_step
from sim.training.step import simulate_step
from sim.workload.lora import lora_layer_ops, lora_layer_params
from sim.workload.models import layer_params
from sim.workload.ops import layer_ops

ANALYTICAL = ["network=analytical"]


def _bytes(name: str, sets: list[str]) -> float:
    return grad_accum_bytes(prepare_step(load_scenario(name, [*ANALYTICAL, *sets])))


def test_ddp_reads_the_new_fp32_gradient_and_reads_and_writes_the_buffer() -> None:
    """gpt2-1gpu: DDP, fp32 parameters and gradients, 8 micro-batches: 12 x 7/8 bytes."""
    assert _bytes("gpt2-1gpu", []) == pytest.approx(12 * 7 / 8)
    assert _bytes("gpt2-1gpu", ["training.global_batch=8"]) == 0.0  # one micro-batch


def test_fused_accumulation_and_sharded_gradients_have_no_pass() -> None:
    assert _bytes("gpt2-1gpu", ["framework.grad_accum_fusion=true"]) == 0.0
    assert _bytes("gpt2-1gpu", ["training.grad_accum_fusion=true"]) == 0.0
    assert _bytes("gpt2-1gpu", ["parallel.zero=3"]) == 0.0  # sharded after each reduce
    assert _bytes("llama2-70b-256-ib", []) == 0.0  # megatron-core fuses it


def test_without_a_framework_the_key_decides_in_the_gradient_dtype() -> None:
    """No framework: fused by default; unfused, 2-byte new gradients and the buffer in
    ``training.grad_dtype``."""
    sets = ["training.framework=null", "training.grad_dtype=fp16"]
    assert _bytes("gpt2-1gpu", sets) == 0.0
    assert _bytes("gpt2-1gpu", [*sets, "training.grad_accum_fusion=false"]) == pytest.approx(
        6 * 7 / 8
    )


def test_the_step_pays_one_kernel_per_layer_per_micro_batch() -> None:
    """One GPU, no communication: the step grows by m x layers x the kernel's time
    (bytes at ``stream_eff``, plus its launch), and by nothing else."""
    fused = load_scenario("gpt2-1gpu", [*ANALYTICAL, "training.grad_accum_fusion=true"])
    plain = load_scenario("gpt2-1gpu", ANALYTICAL)
    setup = prepare_step(plain)
    m, layers = setup.plan.num_microbatches, plain.model.layers
    params = layer_params(plain.model)
    gpu, p = gpu_spec("H100-SXM"), compute_params("H100-SXM")
    kernel = memory_time_s(params * 12 * (m - 1) / m, params, gpu, p, fused=True)
    grown = simulate_step(plain).step_time_s - simulate_step(fused).step_time_s
    assert grown == pytest.approx(m * layers * kernel, rel=1e-9)


def test_the_kernel_is_in_every_layer_backward_and_lora_shrinks_it() -> None:
    ctx = op_context(prepare_step(load_scenario("gpt2-1gpu", ANALYTICAL)))
    [op] = [o for o in layer_ops(ctx).bwd if o.name == "grad_accumulate"]
    assert op.cls == "stream" and op.bytes == pytest.approx(layer_params(ctx.model) * 10.5)
    sc = load_scenario("gpt2-1gpu", [*ANALYTICAL, "training.finetune=lora"])
    tech = sc.training.techniques
    [small] = [o for o in lora_layer_ops(layer_ops(ctx), ctx, tech).bwd
               if o.name == "grad_accumulate"]  # fmt: skip
    ratio = lora_layer_params(ctx.model, tech) / layer_params(ctx.model)
    assert small.bytes == pytest.approx(op.bytes * ratio) and ratio < 0.1


def test_a_bad_value_is_one_line_naming_the_key() -> None:
    with pytest.raises(ConfigError, match="grad_accum_fusion"):
        load_scenario("gpt2-1gpu", ["training.grad_accum_fusion=3"])
