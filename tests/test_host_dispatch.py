"""The host-dispatch bound of eager frameworks (sim.training.compute.host): a step of a
layer-list model is no faster than its host launches its kernels, and unchanged when the
host keeps ahead."""

from __future__ import annotations

import pytest

from calibrate.kernel_benchmarks import LENT_HOST_DISPATCH_S
from sim.scenario.layer_list import LayerScenario, any_scenario_from_dict
from sim.training.compute.conv import conv_kernels
from sim.training.compute.host import host_bound_s
from sim.training.layers.step import simulate_layer_step
from sim.workload.cnn import cnn_preset


def _step_s(
    model: str, batch: int, dispatch_s: float, tmp_path_factory: pytest.TempPathFactory
) -> float:
    raw = {"model": {"preset": model}, "cluster": {"topology": "single-h100"},
           "parallel": {"micro_batch": batch},
           "training": {"global_batch": batch, "precision": "bf16", "fused_kernels": True},
           "network": "analytical"}  # fmt: skip
    if dispatch_s:
        folder = tmp_path_factory.mktemp("profile")
        (folder / "p.yaml").write_text(
            f"schema: clustersim.profile/1\ncompute:\n  host_dispatch_s: {dispatch_s!r}\n"
        )
        raw["profile"] = str(folder / "p.yaml")
    sc = any_scenario_from_dict(raw)
    assert isinstance(sc, LayerScenario)
    return simulate_layer_step(sc, "analytical").step_time_s


def test_a_host_that_keeps_ahead_changes_nothing() -> None:
    assert host_bound_s([3e-3, 1e-3], [5, 5], 0.0) == [3e-3, 1e-3]
    assert host_bound_s([3e-3, 1e-3], [5, 5], 1e-6) == pytest.approx([3e-3, 1e-3])


def test_the_gpu_waits_for_a_slow_host_but_banks_time_on_long_kernels() -> None:
    """Two ops of 10 kernels at 100 us each: the first (1 ms on the GPU) ends when its last
    kernel is launched (1 ms); the second (5 ms) runs as soon as launched, ending at 6 ms;
    a third of 10 tiny kernels was launched by 3 ms, so it costs only its own run."""
    out = host_bound_s([1e-3, 5e-3, 1e-6], [10, 10, 10], 1e-4)
    assert sum(out) == pytest.approx(6e-3 + 1e-6)
    assert out[0] == pytest.approx(1e-3)


def test_a_step_is_no_faster_than_its_kernels_are_launched(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Inception V3 at 1 ms per kernel: the step is its launches (plus the optimizer), far
    slower than the GPU alone."""
    m = cnn_preset("inception-v3")
    kernels = sum(conv_kernels(lay.conv, bwd, i == 0) for i, lay in enumerate(m.layers)
                  for bwd in (False, True) if lay.conv is not None)  # fmt: skip
    slow = _step_s("inception-v3", 32, 1e-3, tmp_path_factory)
    assert slow >= kernels * 1e-3
    assert slow == pytest.approx(kernels * 1e-3, rel=0.02)
    assert _step_s("inception-v3", 32, 0.0, tmp_path_factory) < 0.1 * slow


def test_the_lent_hosts_dispatch_binds_inception_not_resnet_or_vgg(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """At the 57.5 us per kernel eager PyTorch 2.11 measured on the lent device host (the
    shipped h200-ops profile's host_dispatch_s), the
    H100 runs of calibrate/kernel_benchmarks.py: Inception V3 (batch 128, ~900 kernels
    of small 17x17 and 8x8 convolutions) is host-bound, ResNet-50 (256) and VGG-16 (128)
    are not."""
    d = LENT_HOST_DISPATCH_S
    for model, batch, bound in (("inception-v3", 128, True), ("resnet50-v1.5", 256, False),
                                ("vgg16", 128, False)):  # fmt: skip
        gpu_only = _step_s(model, batch, 0.0, tmp_path_factory)
        with_host = _step_s(model, batch, d, tmp_path_factory)
        assert (with_host > 1.2 * gpu_only) is bound, model
        assert with_host >= gpu_only
