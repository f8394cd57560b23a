"""The pydantic validation layer of profile and measurement files refuses what it should.

Each bad file gives one error line naming the file, the key path and what is allowed:
a bool where a count belongs, NaN, a negative bandwidth, an unknown key in a nested
section, a section of the wrong type, and the cross-field rules.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from calibrate.measurements import (
    CollectiveRecord,
    Measurements,
    Meta,
    load_measurements,
    measurements_from_dict,
    measurements_to_dict,
)
from sim.errors import CalibrationError, ConfigError
from sim.profile import load_profile
from sim.profile_models import ComputeSection
from sim.schemas import schema
from sim.training.compute.params import tunable_keys
from tests.helpers import REPO

PROFILE = REPO / "calibrate" / "profiles" / "h100-nvlink.yaml"


def _doc() -> dict[str, Any]:
    rec = CollectiveRecord("all_reduce", 1024, 256, "float32", 1e-5, None, 0.1024, 0.1792,
                           False, 8, 20)  # fmt: skip
    m = Measurements("collectives", Meta("live run", "2025-01-01T00:00:00Z", world_size=8), (rec,))
    return json.loads(json.dumps(measurements_to_dict(m)))


def _profile(tmp_path: Path, edit: Any) -> Path:
    tree = yaml.safe_load(PROFILE.read_text())
    edit(tree)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda d: d["records"][0].update(n_ranks=True), r"records\[0\]\.n_ranks: expected int, got True"),
        (lambda d: d["meta"].update(world_size=False), r"meta\.world_size: expected int, got False"),
        (lambda d: d["records"][0].update(busbw_GBps=-3.0), r"records\[0\]\.busbw_GBps: must be >= 0, got -3\.0"),
        (lambda d: d["records"][0].update(time_s=math.nan), r"records\[0\]\.time_s: must be a finite number"),
        (lambda d: d["records"][0].update(iters=0), r"records\[0\]\.iters: must be >= 1"),
        (lambda d: d["records"][0].update(size_bytes="1KiB"), r"records\[0\]\.size_bytes: expected int"),
        (lambda d: d["meta"]["details"].update(x=[1]), r"meta\.details\.x: expected"),
        (lambda d: d.update(meta=[1, 2]), r"meta: expected a mapping, got \[1, 2\]"),
        (lambda d: d.update(records={}), r"records: expected a list"),
        (lambda d: d["records"].__setitem__(0, 7), r"records\[0\]: expected a mapping, got 7"),
        (lambda d: d["records"][0].update(colour=1), r"records\[0\]: unknown key 'colour'; allowed: op, size_bytes"),
        (lambda d: d.update(extra=1), r"unknown key 'extra'; allowed: schema, kind, meta, records"),
        (lambda d: d["meta"].update(nodes=9), r"meta: nodes \(9\) cannot exceed world_size \(8\)"),
    ],
)  # fmt: skip
def test_bad_measurements_are_one_line_naming_the_key(edit: Any, needle: str) -> None:
    """Strict types, finiteness, bounds, nesting and cross-field rules of measurement files."""
    data = _doc()
    edit(data)
    with pytest.raises(CalibrationError, match=f"^m.json: {needle}") as err:
        measurements_from_dict(data, "m.json")
    assert len(str(err.value).splitlines()) == 1


def test_step_time_must_lie_within_its_step_times() -> None:
    """A step record's time_s summarises step_times_s: outside their range it is refused."""
    rec = {"model": {"layers": 2, "hidden": 128}, "device": "cpu", "optimizer": "AdamW",
           "n_params": 10,
           "tokens_per_step": 512, "model_flops_per_step": 1e9, "warmup_steps": 1,
           "time_s": 0.5, "time_spread_s": None, "step_times_s": [0.1, 0.2],
           "tokens_per_s": 1024.0, "achieved_flops_per_s": 2e9}  # fmt: skip
    doc = {"schema": "clustersim.measurements/1", "kind": "step",
           "meta": {"source": "s", "created": "c"}, "records": [rec]}  # fmt: skip
    with pytest.raises(CalibrationError, match=r"records\[0\]: time_s \(0\.5\) must lie within"):
        measurements_from_dict(doc, "s.json")
    rec["time_s"] = 0.15
    assert measurements_from_dict(doc, "s.json").steps[0].step_times_s == (0.1, 0.2)


def test_infinity_in_a_file_is_refused(tmp_path: Path) -> None:
    """JSON's non-standard Infinity never reaches a record."""
    path = tmp_path / "m.json"
    path.write_text(json.dumps(_doc()).replace("1e-05", "Infinity"))
    with pytest.raises(CalibrationError, match=r"m\.json: Infinity is not a JSON number"):
        load_measurements(path)


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda t: t["hardware"].update(gpus=True), r"hardware\.gpus: expected int, got True"),
        (lambda t: t["error_bars"][0].update(cases=True), r"error_bars\[0\]\.cases: expected int"),
        (lambda t: t["error_bars"][0].update(value=math.nan), r"error_bars\[0\]\.value: must be a finite number"),
        (lambda t: t["collectives"]["channels"].update(bandwidth_GBps={"ll": -1.0}),
         r"collectives\.channels\.bandwidth_GBps\.ll: must be > 0, got -1\.0"),
        (lambda t: t["collectives"]["channels"].update(per_nic=True), r"collectives\.channels\.per_nic: expected int"),
        (lambda t: t["collectives"]["algorithms"]["ring"].update(colour=1),
         r"collectives\.algorithms\.ring: unknown key 'colour'; allowed: source, efficiency, protocols"),
        (lambda t: t["collectives"]["algorithms"]["ring"]["step_latency_us"]["nvlink"].update(ll=-1.0),
         r"collectives\.algorithms\.ring\.step_latency_us\.nvlink\.ll: must be >= 0"),
        (lambda t: t["collectives"]["link_efficiency"].update(nvlink=1.5),
         r"collectives\.link_efficiency\.nvlink: must be <= 1"),
        (lambda t: t["collectives"].update(pipeline={"min_chunks": 8, "max_chunks": 4}),
         r"collectives\.pipeline: min_chunks \(8\) must be <= max_chunks \(4\)"),
        (lambda t: t["collectives"].update(backend="mpi"), r"collectives\.backend: expected one of 'nccl' or 'gloo'"),
        (lambda t: t.update(collectives=[1]), r"collectives: expected a mapping, got \[1\]"),
        (lambda t: t.update(compute="fast"), r"compute: expected a mapping, got 'fast'"),
        (lambda t: t.update(compute={"mem_eff": "0.8"}), r"compute\.mem_eff: expected a number"),
        (lambda t: t.update(compute={"mem_ef": 0.8}), r"compute: unknown key 'mem_ef'; allowed: matmul_eff_max"),
        (lambda t: t["hardware"].update(nodes=16), r"hardware: nodes \(16\) cannot exceed gpus \(8\)"),
        (lambda t: t.update(schema="clustersim.profile/2"), r"schema: expected one of 'clustersim.profile/1'"),
    ],
)  # fmt: skip
def test_bad_profiles_are_one_line_naming_the_key(tmp_path: Path, edit: Any, needle: str) -> None:
    """Strict types, finiteness, bounds and unknown keys at every depth of a profile."""
    path = _profile(tmp_path, edit)
    with pytest.raises(ConfigError, match=f"^profile '.*p.yaml': {needle}") as err:
        load_profile(str(path))
    assert len(str(err.value).splitlines()) == 1


def test_a_good_override_still_loads_and_applies(tmp_path: Path) -> None:
    """Valid overrides pass the model and reach the parameters (a bare number for an
    efficiency, an integer for a float key, a time string for the launch overhead)."""

    def edit(t: dict[str, Any]) -> None:
        t["collectives"]["link_efficiency"]["nvlink"] = 0.5
        t["collectives"]["pipeline"] = {"max_chunks": 32, "chunk_bytes": 1048576}
        t["compute"] = {"launch_overhead_s": "3us", "matmul_k_half": 64}

    prof = load_profile(str(_profile(tmp_path, edit)))
    assert prof.collectives.link_efficiency["nvlink"] == 0.5
    assert prof.collectives.pipeline_max_chunks == 32
    assert prof.compute == {"launch_overhead_s": "3us", "matmul_k_half": 64}


def test_compute_section_keys_are_the_tunable_keys() -> None:
    """The model's compute keys equal the compute model's tunable keys (no drift)."""
    assert set(ComputeSection.model_fields) == {*tunable_keys(), "vector_dtype"}


def test_profile_schema_comes_from_the_model() -> None:
    """The JSON Schema carries the model's bounds, e.g. channel counts >= 1."""
    defs = schema("profile")["$defs"]
    assert defs["Channels"]["properties"]["per_nic"]["anyOf"][0] == {
        "minimum": 1,
        "type": "integer",
    }
    assert defs["HardwareModel"]["additionalProperties"] is False


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.booleans(), st.text(max_size=3), st.floats(allow_nan=True),
                 st.integers(-5, 0), st.none(), st.lists(st.integers(), max_size=2)))  # fmt: skip
def test_any_bad_rank_count_is_refused(value: Any) -> None:
    """n_ranks takes only whole numbers >= 1: anything else is a one-line CalibrationError."""
    data = _doc()
    data["records"][0]["n_ranks"] = value
    with pytest.raises(CalibrationError, match=r"records\[0\]\.n_ranks"):
        measurements_from_dict(data, "m.json")
