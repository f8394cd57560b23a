"""Layer-list models: the CNN presets match their papers, users' lists load, the DP step adds up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from sim.errors import ConfigError
from sim.scenario.layer_list import LayerScenario, any_scenario_from_dict, load_any_scenario
from sim.training.layers import simulate_any, simulate_layer_step
from sim.training.layers.step import ELEMENT_BYTES, OPTIMIZER_ACCESSES
from sim.workload.cnn import cnn_preset


@pytest.mark.parametrize(
    ("name", "params", "gmacs", "tolerance"),
    [
        # He et al. 2016, Table 1: 3.8 and 7.6 x 10^9 FLOPs (multiply-adds); parameters as
        # torchvision's resnet50/101 count them (25,557,032 / 44,549,160, BN included).
        ("resnet50", 25_557_032, 3.8, 0.02),
        ("resnet101", 44_549_160, 7.6, 0.02),
        # v1.5 (stride in the 3x3): torchvision's resnet50 docs give 4.09 GFLOPS
        # (multiply-adds), the same parameters.
        ("resnet50-v1.5", 25_557_032, 4.09, 0.01),
        # Simonyan & Zisserman 2015, config D: 138M parameters (Table 2); He et al. 2016
        # quote VGG-16 at 15.3 x 10^9 FLOPs (multiply-adds).
        ("vgg16", 138_357_544, 15.3, 0.02),
        # Szegedy et al. 2016: 23.8M parameters without the auxiliary head (torchvision's
        # Inception3 has 27,161,264 with it), 5.7 x 10^9 multiply-adds (torchvision docs).
        ("inception-v3", 23_834_568, 5.71, 0.01),
    ],
)
def test_cnn_presets_match_their_papers(
    name: str, params: int, gmacs: float, tolerance: float
) -> None:
    m = cnn_preset(name)
    assert m.params == params
    assert m.flops_per_sample / 2e9 == pytest.approx(gmacs, rel=tolerance)
    assert all(lay.activation_bytes > 0 for lay in m.layers)


def _scenario(**training: object) -> dict:
    return {
        "model": {"preset": "resnet50"},
        "cluster": {"topology": "h100-ib-ndr", "nodes": 2},
        "parallel": {"micro_batch": 32},
        "training": {"global_batch": 512, "precision": "bf16", **training},
        "network": "analytical",
    }


def test_the_step_is_compute_then_exposed_reduction_then_optimizer() -> None:
    sc = any_scenario_from_dict(_scenario())
    assert isinstance(sc, LayerScenario)
    r = simulate_layer_step(sc)
    assert sum(r.breakdown.values()) == pytest.approx(r.step_time_s, rel=1e-12)
    # mixed precision: fp32 weights plus their bf16 copy, fp32 gradients and momentum
    assert r.memory_breakdown["weights"] == (4 + ELEMENT_BYTES["bf16"]) * sc.model.params
    assert r.memory_breakdown["grads"] == r.memory_breakdown["optimizer"] == 4 * sc.model.params
    opt = OPTIMIZER_ACCESSES * 4 * sc.model.params
    assert r.breakdown["optimizer"] > 0 and opt > 0
    # 512 images, 16 GPUs, micro-batch 32: one micro-batch per GPU
    assert r.plan["micro_batches"] == 1 and r.gpus == 16
    # model FLOPs: 3 x forward per image, all images, over the step and the GPUs
    flops = 3 * sc.model.flops_per_sample * 512
    assert r.tflops_per_gpu == pytest.approx(flops / r.step_time_s / 16 / 1e12, rel=1e-12)
    assert r.tokens_per_s == pytest.approx(512 / r.step_time_s)


def test_overlapping_the_reduction_never_slows_the_step() -> None:
    on = simulate_layer_step(any_scenario_from_dict(_scenario()))
    raw = _scenario()
    raw["parallel"]["overlap_dp"] = False
    off = simulate_layer_step(any_scenario_from_dict(raw))
    assert on.step_time_s <= off.step_time_s
    assert on.breakdown["compute"] == off.breakdown["compute"]


def test_a_users_layer_list_file(tmp_path: Path) -> None:
    layers = [
        {"name": "conv", "params": 1000, "flops": 2e9, "activation_bytes": 4e6},
        {"name": "fc", "params": 4096 * 1000, "flops": 2 * 4096 * 1000, "activation_bytes": 4000},
    ]
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(layers))
    raw = {**_scenario(), "model": {"layer_list": "tiny.yaml"}}
    (tmp_path / "sc.yaml").write_text(yaml.safe_dump(raw))
    sc = load_any_scenario(tmp_path / "sc.yaml")
    assert isinstance(sc, LayerScenario) and sc.model.params == 1000 + 4096 * 1000
    assert simulate_any(sc).fits


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"model": {"layer_list": [{"name": "x", "params": 1, "flops": 1}]}},
            "activation_bytes: missing",
        ),
        (
            {"model": {"layer_list": [{"params": -1, "flops": 1, "activation_bytes": 1}]}},
            "expected a number >= 0",
        ),
        ({"model": {"preset": "resnet50", "layers": 3}}, "unknown key for a layer-list model"),
        ({"parallel": {"tp": 2}}, "data-parallel only"),
        ({"parallel": {"zero": 1}}, "ZeRO is not modelled"),
        ({"training": {"global_batch": 100, "precision": "fp32"}}, "must be a multiple"),
        ({"training": {"global_batch": 512, "precision": "fp8"}}, "fp32, fp16, bf16"),
        (
            {"training": {"global_batch": 512, "conv_stack": "caffe"}},
            "training.conv_stack: 'caffe' is not one of pytorch, tensorflow, xla",
        ),
    ],
)
def test_bad_layer_scenarios_name_the_key(change: dict, message: str) -> None:
    raw = {**_scenario(), **change}
    with pytest.raises(ConfigError, match=message):
        simulate_any(any_scenario_from_dict(raw))


def test_the_conv_stack_sets_the_convolutions_rate() -> None:
    """VGG-16 (all 3x3) under each stack: the stack with the lower factor trains slower,
    pytorch is the default, and nothing but compute changes."""
    steps = {}
    for stack in ("pytorch", "tensorflow", "xla"):
        raw = {**_scenario(conv_stack=stack), "model": {"preset": "vgg16"}}
        steps[stack] = simulate_layer_step(any_scenario_from_dict(raw))
    default = simulate_layer_step(
        any_scenario_from_dict({**_scenario(), "model": {"preset": "vgg16"}})
    )
    assert default.step_time_s == steps["pytorch"].step_time_s
    t = {k: r.breakdown["compute"] for k, r in steps.items()}
    assert t["tensorflow"] > t["pytorch"] > t["xla"]
    assert steps["tensorflow"].memory_breakdown == steps["xla"].memory_breakdown
    assert any(
        "training.conv_stack tensorflow keeps 0.5543" in n for n in steps["tensorflow"].notes
    )
    fp32 = {**_scenario(precision="fp32"), "model": {"preset": "vgg16"}}
    assert not any(
        "conv_stack" in n for n in simulate_layer_step(any_scenario_from_dict(fp32)).notes
    )


def test_a_transformer_scenario_refuses_a_conv_stack() -> None:
    raw = {
        "model": {"preset": "gpt2-small"},
        "cluster": {"topology": "h100-ib-ndr", "nodes": 1},
        "training": {"global_batch": 8, "seq_len": 1024, "conv_stack": "xla"},
    }
    with pytest.raises(ConfigError, match=r"training\.conv_stack: only CNN"):
        any_scenario_from_dict(raw)


def test_a_gpu_without_the_precision_is_refused() -> None:
    raw = {**_scenario(), "cluster": {"topology": "p100-pcie-1"}, "training": {"global_batch": 64}}
    raw["training"]["precision"] = "bf16"
    with pytest.raises(ConfigError, match="P100-PCIe-16GB has no bf16"):
        simulate_any(any_scenario_from_dict(raw))


def test_run_command_takes_a_cnn(capsys: pytest.CaptureFixture[str]) -> None:
    from sim.cli import main

    assert main(["run", "gpt2-1gpu", "--set", "model.preset=resnet50", "--set", "training.global_batch=64",
                 "--set", "parallel.micro_batch=64", "--network", "analytical"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "layer-list model resnet50" in out


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["model.preset=resnet50", "training.global_batch=64", "parallel.micro_batch=64",
          "training.conv_stack=bogus"], "'bogus' is not one of pytorch, tensorflow, xla"),
        (["training.conv_stack=xla"], "only CNN (layer-list) models run convolutions"),
    ],
)  # fmt: skip
def test_the_run_command_refuses_a_bad_conv_stack(
    sets: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--set training.conv_stack=...``: an unknown stack on a CNN, or any stack on a
    transformer, is a two-line error naming the key, exit status 2."""
    from sim.cli import main

    argv = ["run", "gpt2-1gpu", "--network", "analytical"]
    for item in sets:
        argv += ["--set", item]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "training.conv_stack" in err and message in err and "Traceback" not in err


def test_the_run_command_takes_a_conv_stack(capsys: pytest.CaptureFixture[str]) -> None:
    from sim.cli import main

    argv = ["run", "gpt2-1gpu", "--set", "model.preset=vgg16", "--set", "training.global_batch=64",
            "--set", "parallel.micro_batch=64", "--network", "analytical", "--json"]  # fmt: skip
    assert main([*argv, "--set", "training.conv_stack=tensorflow"]) == 0
    slow = capsys.readouterr().out
    assert main([*argv, "--set", "training.conv_stack=xla"]) == 0
    fast = capsys.readouterr().out
    assert json.loads(slow)["step_time_s"] > json.loads(fast)["step_time_s"]
