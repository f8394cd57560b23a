"""Elementwise bandwidth in two parts, as the GEMM ceiling is: the kernel-level ``mem_eff``
(what eager kernels timed one by one reach; what a profile measured kernel by kernel
sets) and the training-level ``mem_training_factor`` (what a training step keeps of it;
fitted on end-to-end tables). Before the split a profile's kernel-level value replaced
the catalog's training-level one, and the H200 profile ran a training step's elementwise
kernels 2.55x too fast (its own step job: memory -47%; torchtitan's H200 runs +38%)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from sim.catalog import gpu_spec
from sim.errors import ConfigError
from sim.profile import load_profile
from sim.training.compute.kernels import eager_mem_eff, memory_time_s
from sim.training.compute.params import ComputeParams, compute_entry_names, compute_params

#: H100 SXM's training-level mem_eff as calibrate/fit_training.py fitted it on the
#: llm-foundry H100 tables before the split (topologies/catalog/compute.yaml history)
H100_FITTED = 0.2551


def test_the_split_keeps_every_catalog_prediction_bit_for_bit() -> None:
    """Every entry that took H100 SXM's fitted value takes both parts now, and their
    product is that value exactly: no catalog prediction moved."""
    split = [n for n in compute_entry_names() if compute_params(n).mem_training_factor != 1.0]
    assert "H100-SXM" in split and "H200" in split
    for name in split:
        assert eager_mem_eff(compute_params(name)) == H100_FITTED, name


def test_entries_without_a_kernel_level_value_are_not_split() -> None:
    """A100's value is fitted at training level with nothing kernel-level beside it."""
    p = compute_params("A100-SXM-80GB")
    assert p.mem_training_factor == 1.0 and eager_mem_eff(p) == p.mem_eff


def test_a_kernel_level_profile_keeps_the_catalog_s_training_factor() -> None:
    """h200-ops measured PyTorch's eager elementwise kernels on an H200 (0.6518 of HBM):
    laid over the catalog it keeps H200's training factor, so a training step's
    elementwise kernels run at the catalog's training-level rate, not the isolated one."""
    shipped = load_profile("h200-ops").compute
    assert "mem_eff" in shipped and "mem_training_factor" not in shipped
    p = compute_params("H200", shipped)
    catalog = compute_params("H200")
    assert p.mem_training_factor == catalog.mem_training_factor < 1.0
    assert math.isclose(eager_mem_eff(p), shipped["mem_eff"] * catalog.mem_training_factor)
    gpu = gpu_spec("H200")
    p = replace(p, launch_overhead_s=0.0)
    fast = replace(p, mem_training_factor=1.0)  # what the profile did before the split
    t, t_before = memory_time_s(1e9, 0.0, gpu, p), memory_time_s(1e9, 0.0, gpu, fast)
    assert t / t_before == pytest.approx(1 / catalog.mem_training_factor, rel=1e-3)


@pytest.mark.parametrize("bad", [0.0, 1.5, -0.1])
def test_the_factor_is_a_fraction(bad: float) -> None:
    with pytest.raises(ConfigError, match="mem_training_factor"):
        ComputeParams(mem_training_factor=bad)
