"""JSON Schemas of scenario, topology and profile files: generated, shipped, pointed at.

The shipped ``sim/schemas/*.schema.json`` equal what ``clustersim schema KIND`` prints;
every shipped YAML file names its schema on its first line (``yaml-language-server``) and
validates against it; invalid files are refused by the schema as by the loader.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from sim.cli import main
from sim.schemas import KINDS, schema, schema_text, shipped_schema_text
from tests.helpers import REPO

jsonschema = pytest.importorskip("jsonschema", reason="schema validation needs jsonschema ([test])")

FILES = {
    "scenario": sorted((REPO / "scenarios").glob("*.yaml")),
    "topology": sorted((REPO / "topologies").glob("*.yaml")),
    "profile": sorted((REPO / "calibrate" / "profiles").glob("*.yaml")),
}


def validator(kind: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema(kind))


@pytest.mark.parametrize("kind", KINDS)
def test_shipped_schema_is_what_the_command_prints(
    kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["schema", kind]) == 0
    out = capsys.readouterr().out
    assert out == schema_text(kind) == shipped_schema_text(kind)
    jsonschema.Draft202012Validator.check_schema(json.loads(out))


@pytest.mark.parametrize(("kind", "path"), [(k, p) for k, ps in FILES.items() for p in ps],
                         ids=lambda x: x if isinstance(x, str) else x.name)  # fmt: skip
def test_every_shipped_file_names_and_meets_its_schema(kind: str, path: Path) -> None:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# yaml-language-server: $schema=") and first.endswith(
        f"sim/schemas/{kind}.schema.json"
    )
    target = (path.parent / first.split("$schema=", 1)[1]).resolve()
    assert target == (REPO / "sim" / "schemas" / f"{kind}.schema.json").resolve()
    errors = list(validator(kind).iter_errors(yaml.safe_load(path.read_text())))
    assert not errors, errors[0].message


BAD_SCENARIOS = [
    ({"parallel": {"tpp": 2}}, "tpp"),
    ({"parallel": {"tp": "8"}}, "'8'"),
    ({"parallel": {"tp": True}}, "True"),
    ({"parallel": {"zero": 4}}, "4"),
    ({"parallel": {"schedule": "zigzag"}}, "zigzag"),
    ({"training": {"precision": "fp4"}}, "fp4"),
    ({"network": "packet"}, "packet"),
    ({"extra": 1}, "extra"),
]


@pytest.mark.parametrize(("change", "named"), BAD_SCENARIOS)
def test_invalid_scenarios_are_refused_by_the_schema(change: dict, named: str) -> None:
    base = yaml.safe_load((REPO / "scenarios" / "llama3-8b-dgx.yaml").read_text())
    for key, value in change.items():
        if isinstance(value, dict):
            base[key] = {**base.get(key, {}), **value}
        else:
            base[key] = value
    errors = list(validator("scenario").iter_errors(base))
    assert errors and any(named in e.message for e in errors), [e.message for e in errors]


def test_fsdp_names_and_byte_strings_are_valid() -> None:
    base = yaml.safe_load((REPO / "scenarios" / "llama3-8b-dgx.yaml").read_text())
    base["parallel"].update(zero="HYBRID_SHARD", shard_size=8, bucket_bytes="64MiB")
    assert not list(validator("scenario").iter_errors(base))


def test_invalid_topology_and_profile_are_refused() -> None:
    topo = yaml.safe_load((REPO / "topologies" / "dgx-h100.yaml").read_text())
    assert list(validator("topology").iter_errors({**topo, "nodez": 2}))
    prof = yaml.safe_load((REPO / "calibrate" / "profiles" / "h100-nvlink.yaml").read_text())
    assert list(validator("profile").iter_errors({**prof, "colectives": {}}))
    bar = {**prof["error_bars"][0], "value": -1}
    assert list(validator("profile").iter_errors({**prof, "error_bars": [bar]}))


def test_a_written_profile_points_at_the_installed_schema(tmp_path: Path) -> None:
    from calibrate.profile_io import write_profile
    from sim.profile import load_profile

    tree = yaml.safe_load((REPO / "calibrate" / "profiles" / "h100-nvlink.yaml").read_text())
    out = write_profile(tree, tmp_path / "p.yaml")
    first = out.read_text().splitlines()[0]
    ref = (tmp_path / first.split("$schema=", 1)[1]).resolve()
    assert ref.name == "profile.schema.json" and ref.exists()
    assert load_profile(str(out)).name == "h100-nvlink"


def test_unknown_schema_kind_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "bogus"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "scenario, topology, profile" in err
