"""Framework semantics: the presets, their sources, the scenario reader and its errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.errors import ConfigError
from sim.workload.framework_section import framework_semantics, read_framework
from sim.workload.frameworks import (
    BEHAVIOURS,
    CHOICES,
    FRAMEWORKS,
    PRESETS,
    SOURCES,
    Semantics,
    grad_bucket_bytes,
    overlaps_grad_reduce,
    semantics_table,
)

DOCS = Path(__file__).resolve().parents[1] / "docs" / "frameworks.md"
BOOL_KEYS = [k for k in BEHAVIOURS if isinstance(getattr(PRESETS["ddp"], k), bool)]


def test_the_six_frameworks_of_the_issue_are_presets() -> None:
    assert FRAMEWORKS == ("megatron-core", "nemo", "torchtitan", "deepspeed", "fsdp", "ddp")
    assert all(PRESETS[name].name == name for name in FRAMEWORKS)


def test_every_behaviour_of_every_preset_cites_where_it_comes_from() -> None:
    """No value without a source: each (framework, behaviour) names code, docs or a paper."""
    for name in FRAMEWORKS:
        assert set(SOURCES[name]) == set(BEHAVIOURS), name
        assert all(len(text) > 10 for text in SOURCES[name].values()), name


def test_docs_table_is_the_presets_rendering() -> None:
    """docs/frameworks.md carries semantics_table() verbatim, so it cannot drift."""
    assert semantics_table() in DOCS.read_text()


def test_megatron_bucket_grows_with_data_parallelism() -> None:
    """Megatron-Core: max(40M, 1M x dp) parameters per bucket, fp32 main grads."""
    sem = PRESETS["megatron-core"]
    assert grad_bucket_bytes(sem, 8) == 40e6 * 4
    assert grad_bucket_bytes(sem, 64) == 64e6 * 4
    assert grad_bucket_bytes(PRESETS["nemo"], 64) == 64e6 * 2  # bf16 grads


def test_ddp_bucket_is_25_mib_and_fsdp_reduces_per_unit() -> None:
    assert grad_bucket_bytes(PRESETS["ddp"], 8) == 25 * 2**20
    assert grad_bucket_bytes(PRESETS["torchtitan"], 8) is None


def test_deepspeed_overlaps_the_reduction_only_at_zero_3() -> None:
    """DeepSpeed's overlap_comm defaults to stage == 3 (deepspeed/runtime/zero/config.py)."""
    ds = PRESETS["deepspeed"]
    assert [overlaps_grad_reduce(ds, z) for z in range(4)] == [False, False, False, True]


def test_userbuffers_slowdown_is_the_sm_share_of_the_nemo_config() -> None:
    """NeMo's userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192 gives communication 4, 24,
    2, 4 (bulk), 1 x 4 (ring exchange) and 24, 16 (pipelined) of the H100's 132 SMs."""
    sms = [4, 24, 2, 4, 1, 1, 1, 1, 24, 16]
    assert PRESETS["megatron-core"].tp_overlap_slowdown == pytest.approx(
        sum(sms) / len(sms) / 132, abs=5e-4
    )


def test_override_replaces_one_behaviour_and_keeps_the_rest() -> None:
    sem = framework_semantics("megatron-core", {"grad_reduce_dtype": "bf16"})
    assert sem.grad_reduce_dtype == "bf16" and sem.name == "megatron-core"
    base = PRESETS["megatron-core"]
    assert {k for k in BEHAVIOURS if getattr(sem, k) != getattr(base, k)} == {"grad_reduce_dtype"}


@given(key=st.sampled_from(BOOL_KEYS), value=st.booleans(), name=st.sampled_from(FRAMEWORKS))
def test_any_boolean_behaviour_can_be_set_on_any_preset(key: str, value: bool, name: str) -> None:
    assert getattr(framework_semantics(name, {key: value}), key) is value


def test_stage_lists_read_from_yaml_lists() -> None:
    sem = framework_semantics("deepspeed", {"overlap_grad_reduce": [3, 2, 2]})
    assert sem.overlap_grad_reduce == (2, 3)


@pytest.mark.parametrize(
    ("name", "overrides", "message"),
    [
        ("megatron", {}, "training.framework: 'megatron' is not one of megatron-core, nemo"),
        ("nemo", {"overlap": True}, "training.overlap: unknown framework behaviour; known:"),
        ("ddp", {"overlap_param_gather": "yes"}, "expected true or false, got 'yes'"),
        ("ddp", {"autocast_cache": 1}, "training.autocast_cache: expected true or false, got 1"),
        ("ddp", {"default_zero": 4}, "training.default_zero: expected a ZeRO stage 0-3"),
        ("ddp", {"cross_entropy": "xent"}, "'xent' is not one of fp32, fused, upcast"),
        ("ddp", {"tp_overlap_hidden": 1.5}, "expected a fraction in [0, 1], got 1.5"),
        ("ddp", {"gathered_units": 0}, "training.gathered_units: expected an integer >= 1"),
    ],
)
def test_bad_names_keys_and_values_are_one_line_errors(
    name: str, overrides: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        framework_semantics(name, overrides)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_section_without_a_framework_reads_as_none_and_overrides_need_one() -> None:
    assert read_framework({}) is None
    with pytest.raises(ConfigError, match=r"training\.pp_gather_once: a framework behaviour needs"):
        read_framework({"pp_gather_once": True})
    assert read_framework({"framework": "fsdp"}) == PRESETS["fsdp"]


def test_choices_cover_every_named_value_of_the_presets() -> None:
    for key, allowed in CHOICES.items():
        assert {getattr(PRESETS[f], key) for f in FRAMEWORKS} <= set(allowed), key


def test_semantics_is_frozen() -> None:
    with pytest.raises(AttributeError):
        PRESETS["ddp"].autocast_cache = False  # type: ignore[misc]
    assert isinstance(PRESETS["ddp"], Semantics)
