"""CNN training memory: the runs that ran fit, activations are stored at the step's
precision, and each layer keeps the tensors its framework's backward reads."""

from __future__ import annotations

import pytest

from calibrate.cnn_memory import BatchFit, cnn_fit_rows
from sim.scenario.layer_list import any_scenario_from_dict
from sim.training.layers.step import (
    ELEMENT_BYTES,
    WORKSPACE_BYTES,
    activation_bytes,
    simulate_layer_step,
    state_bytes,
)
from sim.workload.cnn import cnn_preset
from sim.workload.layer_model import layer_model_from_list

ROWS = cnn_fit_rows()


@pytest.mark.parametrize(
    ("row", "used"), ROWS, ids=[f"{r.label}-{r.model}-{r.precision}-b{r.batch}" for r, _ in ROWS]
)
def test_every_cnn_run_fits_as_it_ran(row: BatchFit, used: float) -> None:
    """Published runs ran on their cards; DLE's batch sizes fit theirs, and FP32 at 256 (the
    batch DLE halves on 16 GB cards only) does not fit 16 GB (calibrate/cnn_memory.py)."""
    assert (used <= row.card_gb * 1e9) == row.fits, f"{used / 1e9:.1f} GB on {row.card_gb} GB"


def test_rows_cover_every_kind_of_evidence() -> None:
    assert len(ROWS) >= 20
    assert any(not r.fits for r, _ in ROWS)  # a configuration that must not fit
    assert {r.precision for r, _ in ROWS} == {"fp16", "bf16", "fp32"}


@pytest.mark.parametrize("name", ["resnet50", "vgg16", "inception-v3"])
def test_half_precision_stores_half_the_activations(name: str) -> None:
    m = cnn_preset(name)
    assert m.activation_element_bytes == 4
    half = activation_bytes(m, ELEMENT_BYTES["bf16"], 8) - 8 * m.input_bytes
    full = activation_bytes(m, ELEMENT_BYTES["fp32"], 8) - 8 * m.input_bytes
    assert half == pytest.approx(full / 2, rel=1e-12)
    assert full == pytest.approx(8 * m.activation_bytes_per_sample, rel=1e-12)


def test_a_users_activation_bytes_are_taken_as_given() -> None:
    m = layer_model_from_list([{"name": "fc", "params": 10, "flops": 20, "activation_bytes": 8}])
    assert m.activation_element_bytes == 0
    assert activation_bytes(m, 2, 3) == activation_bytes(m, 4, 3) == 24


def test_kept_tensors_by_layer_kind() -> None:
    """ResNet-50's stem keeps its convolution's and ReLU's outputs (112x112x64 each) and
    the max-pooled 56x56x64 map; a projection shortcut (batch norm, no ReLU) keeps its
    convolution's output only; VGG-16's biased convolutions keep their ReLU's output."""
    layers = {lay.name: lay for lay in cnn_preset("resnet50").layers}
    assert layers["conv1_0"].activation_bytes == 4 * (2 * 64 * 112 * 112 + 64 * 56 * 56)
    assert layers["shortcut_1"].activation_bytes == 4 * 256 * 56 * 56
    assert layers["reduce_2"].activation_bytes == 4 * 2 * 64 * 56 * 56
    vgg = cnn_preset("vgg16").layers
    assert vgg[0].activation_bytes == 4 * 64 * 224 * 224
    assert vgg[1].activation_bytes == 4 * (64 * 224 * 224 + 64 * 112 * 112)  # + the pooled map


def test_inception_keeps_each_concatenation() -> None:
    """Each block's concatenated output is a tensor of its own (the next block's input):
    Inception A's first output, 256 x 35 x 35, sits with the block's last layer."""
    m = cnn_preset("inception-v3")
    names = [lay.name for lay in m.layers]
    first_block_last = names.index("mixed_11")  # 5 stem layers, then 7 in block A's branches
    lay = m.layers[first_block_last]
    assert lay.conv is not None and lay.conv.cout == 32  # the pool branch's 1x1
    pooled, concat = 192 * 35 * 35, 256 * 35 * 35
    assert lay.activation_bytes == 4 * (2 * 32 * 35 * 35 + pooled + concat)


def test_mixed_precision_states_and_the_total() -> None:
    sc = any_scenario_from_dict({
        "model": {"preset": "resnet50-v1.5"},
        "cluster": {"topology": "dgx-h100"},
        "parallel": {"micro_batch": 256},
        "training": {"global_batch": 8 * 256, "precision": "fp16"},
        "network": "analytical",
    })  # fmt: skip
    r = simulate_layer_step(sc)
    p = sc.model.params
    assert state_bytes(p, "fp16") == {"weights": 6.0 * p, "grads": 4.0 * p, "optimizer": 4.0 * p}
    assert state_bytes(p, "fp32") == {"weights": 4.0 * p, "grads": 4.0 * p, "optimizer": 4.0 * p}
    want = sum(state_bytes(p, "fp16").values()) + activation_bytes(sc.model, 2, 256)
    assert r.memory_per_gpu_bytes == pytest.approx(want + WORKSPACE_BYTES, rel=1e-12)
    assert r.fits
