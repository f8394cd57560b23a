"""The pydantic models of the core scenario sections (sim.scenario.models)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.errors import ConfigError
from sim.scenario.load import scenario_from_dict
from sim.scenario.models import SECTION_MODELS, read_section
from sim.scenario.readers import CAPS, NULLABLE
from sim.scenario.sections import (
    ClusterSection,
    ParallelSection,
    PriceSection,
    TrainingSection,
)
from sim.workload.models import ModelSpec

BASE = {"model": {"preset": "gpt2-124m"}, "cluster": {"topology": "single-h100"},
        "training": {"global_batch": 8, "seq_len": 1024}}  # fmt: skip
#: Count keys of each section (integers, bool refused).
COUNTS = {
    "parallel": ("tp", "pp", "dp", "cp", "ep", "micro_batch", "virtual_stages", "shard_size",
                 "powersgd_rank", "ps_servers", "sync_every"),
    "model": ("layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab", "max_seq"),
    "training": ("global_batch", "seq_len", "lora_rank"),
}  # fmt: skip


#: The keys a section cannot do without, with a valid value.
REQUIRED: dict[str, dict[str, Any]] = {
    "cluster": {"topology": "single-h100"}, "training": {"global_batch": 8, "seq_len": 1024},
}  # fmt: skip


def _read(section: str, key: str, value: object) -> dict[str, Any]:
    """``read_section`` on the section's required keys with ``key: value`` put in."""
    return read_section(section, {**REQUIRED.get(section, {}), key: value})


def _names(cls: type, skip: str = "") -> list[str]:
    return [f.name for f in fields(cls) if f.name != skip]


def test_models_hold_the_dataclass_keys_in_order() -> None:
    """Each model's keys are its dataclass's fields (the ``allowed:`` lists are unchanged)."""
    assert list(SECTION_MODELS["model"].model_fields) == ["preset", *_names(ModelSpec, "name")]
    assert list(SECTION_MODELS["cluster"].model_fields) == _names(ClusterSection)
    assert list(SECTION_MODELS["parallel"].model_fields) == _names(ParallelSection, "fsdp")
    assert list(SECTION_MODELS["training"].model_fields) == _names(TrainingSection)
    assert list(SECTION_MODELS["price"].model_fields) == _names(PriceSection)


def test_defaults_match_the_dataclasses() -> None:
    """A model's default is its dataclass's default, so absent keys read as before."""
    for name, cls in (("parallel", ParallelSection), ("price", PriceSection)):
        model = SECTION_MODELS[name]
        for f in fields(cls):
            if f.name in model.model_fields and f.name != "zero":
                assert model.model_fields[f.name].default == f.default, f.name


@pytest.mark.parametrize(("section", "key"), [(s, k) for s, ks in COUNTS.items() for k in ks])
def test_counts_refuse_bool_float_and_the_cap(section: str, key: str) -> None:
    """A count is an int: True and 2.0 are refused; above CAPS is refused with the cap."""
    for bad in (True, 2.0, "2", 0):
        with pytest.raises(ConfigError, match=rf"^{section}\.{key}: expected an integer >= 1"):
            _read(section, key, bad)
    if key in CAPS:
        with pytest.raises(ConfigError, match=rf"^{section}\.{key}: .* above the largest"):
            _read(section, key, CAPS[key] + 1)
        assert _read(section, key, CAPS[key])[key] == CAPS[key]


@pytest.mark.parametrize(
    "key", [k for k in NULLABLE if k in SECTION_MODELS["parallel"].model_fields]
)
def test_null_means_not_given(key: str) -> None:
    """An explicit null on a nullable key reads as the key left out."""
    raw = {**BASE, "parallel": {key: None}}
    assert scenario_from_dict(raw) == scenario_from_dict(BASE)


@pytest.mark.parametrize(
    ("section", "key"),
    [("training", "cpu_adam_rate"), ("parallel", "topk_ratio"), ("price", "gpu_hour_usd"),
     ("model", "dropout")],
)  # fmt: skip
def test_floats_are_finite(section: str, key: str) -> None:
    """NaN and infinity are refused where a number belongs (inf was accepted before)."""
    for bad in (float("nan"), float("inf"), True):
        with pytest.raises(ConfigError, match=rf"^{section}\.{key}: expected "):
            _read(section, key, bad)


def test_special_parsers_read_as_before() -> None:
    """Units, FSDP names, placement strings and token strings keep their parsers."""
    out = read_section("parallel", {"bucket_bytes": "25MiB", "zero": "HYBRID_SHARD",
                                    "placement": "tp,dp,pp", "nccl_algo": "^nvls"})  # fmt: skip
    assert out == {"bucket_bytes": 25 * 2**20, "zero": 3, "fsdp": "HYBRID_SHARD",
                   "placement": ("tp", "dp", "pp"), "nccl_algo": "^nvls"}  # fmt: skip
    assert _read("training", "tokens", "15.6e12")["tokens"] == 15.6e12


@settings(max_examples=150, deadline=None)
@given(
    section=st.sampled_from(["model", "cluster", "parallel", "training", "price"]),
    data=st.data(),
    value=st.one_of(st.none(), st.booleans(), st.integers(-5, 10**9), st.floats(),
                    st.text(max_size=8), st.lists(st.integers(), max_size=3)),
)  # fmt: skip
def test_any_value_is_read_or_refused_in_one_line(section: str, data: Any, value: object) -> None:
    """Any value of any key either reads or fails with one line naming ``section.key``."""
    key = data.draw(st.sampled_from(list(SECTION_MODELS[section].model_fields)))
    try:
        _read(section, key, value)
    except ConfigError as err:
        text = str(err)
        assert text.startswith(f"{section}.{key}") and "\n" not in text


@pytest.mark.parametrize("key", ["layers", "gated_mlp", "norm", "dropout", "max_seq"])
def test_null_is_refused_where_not_nullable(key: str) -> None:
    """``model.gated_mlp: null`` is an error, as before (only NULLABLE keys take null)."""
    with pytest.raises(ConfigError, match=rf"^model\.{key}: .*got None"):
        scenario_from_dict({**BASE, "model": {"preset": "gpt2-124m", key: None}})
