"""Collective parameters: defaults load with sources; overrides validate and name the key."""

from __future__ import annotations

import pytest

from sim.collectives.params import default_params
from sim.errors import ConfigError


def test_defaults_have_every_scope_protocol_and_algorithm() -> None:
    p = default_params()
    assert set(p.link_efficiency) == {"nvlink", "pcie", "net"}
    assert set(p.protocol_efficiency) == {"ll", "ll128", "simple"}
    assert {"ring", "tree", "rhd", "hierarchical", "nvls", "direct"} <= set(p.algorithms)
    assert p.algorithm("nvls").protocols == ("simple",)
    assert p.algorithm("ring").base_latency_s["simple"] == pytest.approx(8.4e-6)


def test_override_merges_a_subset() -> None:
    p = default_params().merged({"algorithms": {"ring": {"efficiency": 0.5}}})
    assert p.algorithm("ring").efficiency == 0.5
    assert p.algorithm("tree").efficiency == default_params().algorithm("tree").efficiency


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ({"algorithms": {"ring": {"efficiency": 1.5}}}, "ring.efficiency"),
        ({"link_efficiency": {"net": 0}}, "link_efficiency.net"),
        ({"bogus": 1}, "'bogus'"),
        ({"algorithms": {"ring": {"base_latency_us": {"simple": -1}}}}, "base_latency_us.simple"),
        ({"algorithms": {"ring": {"protocols": ["warp"]}}}, "'warp'"),
    ],
)
def test_bad_override_names_the_key(override: dict, needle: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.").replace("'", "'")):
        default_params().merged(override)


def test_the_shipped_defaults_pass_the_check_they_skip_at_load() -> None:
    """default_params() builds the shipped tree unchecked (a cold command's validator
    build); checked, the same tree validates and builds equal parameters, bit for bit."""
    from importlib import resources

    from sim.collectives.params import CollectiveParams
    from sim.files import load_yaml

    text = resources.files("sim.collectives").joinpath("defaults.yaml").read_text()
    checked = CollectiveParams.from_dict(load_yaml(text, "defaults.yaml"), "defaults")
    assert checked == default_params()
    assert repr(checked) == repr(default_params())


def test_an_unchecked_merge_is_the_checked_one_for_a_valid_override() -> None:
    over = {"algorithms": {"ring": {"efficiency": 0.5}}, "pipeline": {"min_chunks": 2}}
    checked = default_params().merged(over)
    assert default_params().merged(over, check=False) == checked
    assert checked.pipeline_min_chunks == 2 and checked.algorithm("ring").efficiency == 0.5
