"""The layers over a simulated step, end to end, against a published training run.

Llama 3.1's model card reports 30.84M H100-80GB GPU-hours for the 405B model. clustersim's
step (analytical network, Meta's TP 8 / PP 16 / DP 128 plan, 128 layers so that 16 x 2
virtual stages divide them) times 15.6T tokens, stretched by the reliability layer's
expected goodput under the Llama 3 failure log, should land within 10% of it. The card's
figure covers all of pre-training (including the long-context stage), so this is a check
of the chain's order of magnitude, not a calibration. Numbers: benchmarks/beyond_the_step.py.
"""

from __future__ import annotations

import pytest

from sim import simulate_step
from sim.cost import training_cost
from sim.reliability import ReliabilityConfig, goodput_estimate
from sim.training.scenario import scenario_from_dict

SCENARIO = {
    "model": {"preset": "llama3-405b", "layers": 128},
    "cluster": {"topology": "h100-roce-400g", "nodes": 2048},
    "parallel": {"tp": 8, "pp": 16, "micro_batch": 1, "schedule": "interleaved",
                 "virtual_stages": 2, "sp": True, "zero": 1},
    "training": {"global_batch": 2048, "seq_len": 8192},
}  # fmt: skip


def test_llama31_405b_gpu_hours_within_ten_percent_of_the_model_card() -> None:
    step = simulate_step(scenario_from_dict(SCENARIO, "llama3-405b-16k"), network="analytical")
    tokens, per_step = 15.6e12, 2048 * 8192
    est = goodput_estimate(
        step_time_s=step.step_time_s, gpus=16384, gpus_per_node=8, params=405e9,
        config=ReliabilityConfig(), tokens=tokens, tokens_per_step=per_step,
    )  # fmt: skip
    cost = training_cost(
        tokens=tokens, tokens_per_step=per_step, step_time_s=step.step_time_s, gpus=16384,
        usd_per_gpu_hour=None, wall_time_s=est.expected_wall_time_s,
    )  # fmt: skip
    assert cost.gpu_hours == pytest.approx(30.84e6, rel=0.10)
    assert cost.gpu_hours > cost.useful_time_s * 16384 / 3600  # failures cost GPU-hours
