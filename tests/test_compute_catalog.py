"""Per-GPU compute parameters: every GPU has its own, sourced; estimates say so loudly."""

from __future__ import annotations

import pytest

from sim.catalog import gpu_names
from sim.errors import ConfigError
from sim.scenario.load import scenario_from_dict
from sim.training.compute.params import compute_entry_names, compute_params, tunable_keys
from sim.training.step import simulate_step

FITTED = ("H100-SXM", "A100-SXM-80GB", "A100-SXM-40GB")


def test_every_catalog_gpu_has_its_own_compute_entry() -> None:
    """No GPU silently borrows another's parameters: gpus.yaml and compute.yaml agree."""
    assert set(compute_entry_names()) == set(gpu_names())


@pytest.mark.parametrize("gpu", sorted(gpu_names()))
def test_every_value_is_sourced_and_estimates_name_their_basis(gpu: str) -> None:
    p = compute_params(gpu)
    assert set(tunable_keys()) <= set(p.sources) | {"launch_overhead_s"}
    assert "launch_overhead" in p.sources
    assert all(len(s) > 5 for s in p.sources.values())
    assert p.estimate == (gpu not in FITTED)
    if p.estimate:
        assert p.notes and "ESTIMATE" in p.notes[0] and len(p.basis) > 40
    else:
        assert not p.notes and "fit" in p.basis


@pytest.mark.parametrize("gpu", FITTED)
def test_fitted_entries_carry_their_validation(gpu: str) -> None:
    """A fitted entry states its error on the published rows it was fitted to."""
    v = compute_params(gpu).validation
    assert v["rows"] > 50 and 0 < v["mean_abs_error"] < 0.1
    if gpu.startswith("H100"):  # A100's hold-out (~18 refits of 149 rows) was not rerun
        assert v["holdout_mean_abs_error"] > 0


def test_unknown_gpu_and_unknown_override_name_the_problem() -> None:
    with pytest.raises(ConfigError, match=r"no compute parameters.*H100-SXM"):
        compute_params("H900")
    with pytest.raises(ConfigError, match=r"profile\.compute\.mem_effi"):
        compute_params("H100-SXM", {"mem_effi": 0.9})
    with pytest.raises(ConfigError, match=r"compute\.mem_eff"):
        compute_params("H100-SXM", {"mem_eff": 1.5})


def test_profile_overrides_change_the_basis() -> None:
    p = compute_params("H100-SXM", {"launch_overhead_s": "2us"})
    assert p.launch_overhead_s == 2e-6 and "profile.compute" in p.basis


def _l40s(topology: str = "l40s-pcie") -> dict[str, object]:
    return {
        "model": {"preset": "gpt2-124m"},
        "cluster": {"topology": topology},
        "parallel": {"micro_batch": 1, "dp": 8} if topology == "dgx-h100" else {"dp": 32},
        "training": {"global_batch": 32, "seq_len": 1024},
        "network": "analytical",
    }


def test_a_result_on_estimated_parameters_says_so_in_notes_and_json() -> None:
    """L40S has no fitted parameters: the result's notes and JSON carry the estimate."""
    r = simulate_step(scenario_from_dict(_l40s(), "l40s"))
    assert any("ESTIMATE" in n and "L40S" in n for n in r.notes)
    assert r.to_dict()["compute_params"]["estimate"] is True
    h100 = simulate_step(scenario_from_dict(_l40s("dgx-h100"), "h100"))
    assert h100.compute_params["estimate"] is False
    assert not any("ESTIMATE" in n for n in h100.notes)
