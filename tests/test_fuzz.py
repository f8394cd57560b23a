"""Hostile and careless input never gives a traceback, a hang or a silent accept (issues 12, 23).

Every case of :mod:`fuzz_cases` runs the ``clustersim`` command line in-process (its
``main``): bad input must exit with status 2 and one error line (argparse's usage lines
aside), no ``Traceback``, within :data:`LIMIT_S`; valid input exits 0 and its ``--json``
output is strict JSON (no NaN or infinity). A few cases run the real entry point
(``python -m sim``) in a subprocess, and hypothesis draws scenarios over the parallel and
training keys, topologies over the node and network keys (links in the wrong role,
booleans, odd numbers) and measurement records over every field (with duplicate keys and
empty files): each gives a clean one-line error or a sound result. The big inputs and
the per-process caps are the corpus runner's (``benchmarks/fuzz_corpus.py``).
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fuzz_cases import YAML_BODIES, Case, all_cases, materialise
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.cli import main
from sim.errors import ClusterSimError
from sim.files import MAX_ALIASES, MAX_DEPTH, load_yaml

REPO = Path(__file__).resolve().parents[1]
#: Seconds one case may take (a hang or an unbounded allocation fails it).
LIMIT_S = 30
CASES = all_cases()


class _Hang(BaseException):
    """Raised by the alarm; a BaseException, so no ``except Exception`` swallows it."""


@contextmanager
def _deadline(seconds: int) -> Iterator[None]:
    def expire(signum: int, frame: Any) -> None:
        raise _Hang(f"no answer within {seconds} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _materialise(case: Case, folder: Path) -> list[str]:
    return materialise(case, folder)


def _invoke(argv: list[str]) -> int:
    try:
        with _deadline(LIMIT_S):
            return main(argv)
    except SystemExit as e:  # argparse's usage errors
        return int(e.code or 0)


def _strict_json(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} in JSON output")

    return json.loads(text, parse_constant=refuse)


def _error_lines(err: str) -> list[str]:
    """The lines from the first ``error:`` line on (argparse prints usage lines first)."""
    lines = err.strip().splitlines()
    first = next((i for i, line in enumerate(lines) if ": error: " in line), len(lines))
    return lines[first:]


def test_suite_is_large_and_covers_every_file_format() -> None:
    """At least 250 cases, every hostile YAML body in each of the five YAML file kinds."""
    assert len(CASES) >= 250
    ids = {c.id for c in CASES}
    for kind in ("scenario", "topology", "profile", "study", "layer-list"):
        assert all(f"{kind}-{body}" in ids for body in YAML_BODIES)
    assert sum(c.status == 0 for c in CASES) >= 10


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_input_fails_cleanly(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 2 with one error line for bad input, 0 and strict JSON for valid input."""
    argv = _materialise(case, tmp_path)
    code = _invoke(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in err + out
    assert code == case.status, f"exit {code}, stderr: {err[-500:]}"
    if code == 2:
        lines = _error_lines(err)
        assert 1 <= len(lines) <= 2, err
        assert all(len(line) <= 420 for line in lines), err
    elif "--json" in argv:
        _strict_json(out)
    leftovers = [p.name for p in tmp_path.rglob(".*.tmp")]
    assert not leftovers, f"temporary files left behind: {leftovers}"


def test_refused_outputs_leave_nothing_written(tmp_path: Path) -> None:
    """A refused fit (a one-rank log cannot fit dgx-h100) writes no profile, even partly."""
    case = next(c for c in CASES if c.id == "fit-one-rank")
    argv = _materialise(case, tmp_path)
    assert _invoke(argv) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]


def test_yaml_caps_name_the_problem() -> None:
    """The loader's refusals say which cap was hit, with the line."""
    cases = {
        "deep-flow": f"nested deeper than {MAX_DEPTH} levels",
        "many-aliases": f"more than {MAX_ALIASES} YAML aliases",
        "alias-bomb": "once aliases are followed",
        "duplicate-key": "line 2: duplicate key 'name'",
        "huge-int": "4300 digits",
    }
    for body_id, words in cases.items():
        body = YAML_BODIES[body_id]
        assert isinstance(body, str)
        with pytest.raises(ClusterSimError, match=words):
            load_yaml(body, "f.yaml")


@pytest.mark.parametrize(
    "argv, status",
    [
        (["run", "/nonexistent/s.yaml"], 2),
        (["collective", "--topology", "dgx-h100", "-f", "1.0000001"], 2),
        (["run", "llama3-8b-dgx", "--set", "model.layers=1e9"], 2),
        (["schema", "profile"], 0),
    ],
)
def test_real_entry_point(argv: list[str], status: int) -> None:
    """``python -m sim``: the same exit status, no traceback, through the real interpreter."""
    proc = subprocess.run(
        [sys.executable, "-m", "sim", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == status, proc.stderr
    assert "Traceback" not in proc.stderr
    if status == 2:
        assert 1 <= len(_error_lines(proc.stderr)) <= 2


# --- hypothesis: the scenario space ---------------------------------------------------------

_ANY_VALUE = st.one_of(
    st.integers(min_value=-4, max_value=64),
    st.sampled_from([0, 2**31, 2**63, 10**12]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["abc", "", "1e9", "8", "FULL_SHARD", "1f1b", "interleaved", "full"]),
    st.booleans(),
    st.none(),
)
_KEYS = {
    "parallel": ("tp", "pp", "dp", "micro_batch", "zero", "virtual_stages", "schedule",
                 "recompute", "sp", "bucket_bytes"),
    "training": ("global_batch", "seq_len", "precision", "flash_attention", "grad_dtype"),
}  # fmt: skip


def _set_value(value: object) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")
    return json.dumps(value)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(
        st.sampled_from([f"{s}.{k}" for s, keys in _KEYS.items() for k in keys]),
        _ANY_VALUE,
        max_size=4,
    )
)
def test_scenario_space_gives_config_error_or_finite_result(overrides: dict[str, object]) -> None:
    """Any values of the parallel/training keys: a clean ConfigError, or a finite result."""
    from sim.scenario.load import load_scenario
    from sim.training.step import simulate_step

    sets = [f"{k}={_set_value(v)}" for k, v in overrides.items()]
    try:
        with _deadline(LIMIT_S):
            scenario = load_scenario("llama3-8b-dgx", ["network=analytical", *sets])
            result = simulate_step(scenario)
    except ClusterSimError as e:
        assert str(e) and len(str(e).splitlines()) <= 2
        return
    text = json.dumps(result.to_dict(), allow_nan=False)  # raises on NaN or infinity
    assert result.step_time_s > 0 and math.isfinite(result.step_time_s)
    assert _strict_json(text)


# --- hypothesis: the topology space (roles, booleans, numbers) ----------------------------

_LINK_KINDS = ["nvlink4", "nvlink3", "xgmi", "pcie-gen5", "pcie-gen4", "ib-ndr", "roce-400g",
               "efa-100g", "loopback", "nope"]  # fmt: skip
_TOPO_VALUE = st.one_of(
    st.integers(min_value=-2, max_value=16),
    st.sampled_from([0.5, 2.0, 1.5, float("nan"), float("inf"), 1e300]),
    st.booleans(),
    st.none(),
    st.sampled_from(["2:1", "no", "on", "8", "", "400Gb/s", "1.5us"]),
)
_NODE_KEYS = {
    "gpus": st.one_of(st.integers(1, 8), _TOPO_VALUE),
    "fabric": st.sampled_from(["nvswitch", "mesh", "pcie", "ethernet", True]),
    "nvlink": st.sampled_from(_LINK_KINDS),
    "pcie": st.sampled_from(_LINK_KINDS),
    "pcie_switches": st.one_of(st.integers(0, 4), _TOPO_VALUE),
    "p2p": st.one_of(st.booleans(), _TOPO_VALUE),
    "nics": st.one_of(st.integers(0, 8), _TOPO_VALUE),
    "nic": st.sampled_from(_LINK_KINDS),
    "nic_bandwidth": st.one_of(st.sampled_from(["200Gb/s", "50GB/s"]), _TOPO_VALUE),
}
_NET_KEYS = {
    "kind": st.sampled_from(["leaf-spine", "rail-optimized", "fat-tree-3tier", "none", 3]),
    "link": st.sampled_from(_LINK_KINDS),
    "oversubscription": st.one_of(st.sampled_from([1.0, 2, 4.0]), _TOPO_VALUE),
    "nodes_per_leaf": st.one_of(st.integers(1, 4), _TOPO_VALUE),
    "sharp": st.one_of(st.booleans(), _TOPO_VALUE),
}
#: The link scope each pair of part kinds must be joined by (the roles of sim.topology.links).
_EDGE_SCOPE = {
    frozenset({"gpu", "nvswitch"}): "nvlink", frozenset({"gpu"}): "nvlink",
    frozenset({"gpu", "pcie_switch"}): "pcie", frozenset({"gpu", "host"}): "pcie",
    frozenset({"nic", "pcie_switch"}): "pcie", frozenset({"nic", "host"}): "pcie",
    frozenset({"pcie_switch", "host"}): "pcie", frozenset({"nic", "leaf"}): "net",
    frozenset({"leaf", "spine"}): "net",
}  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.fixed_dictionaries({}, optional=_NODE_KEYS),
    st.fixed_dictionaries({}, optional=_NET_KEYS),
    st.one_of(st.integers(1, 3), _TOPO_VALUE),
)
def test_topology_space_gives_one_line_or_a_cluster_with_links_in_their_roles(
    node: dict[str, object], network: dict[str, object], nodes: object
) -> None:
    """Any values of the node and network keys: a one-line error, or a cluster whose every
    link joins parts of the kinds its scope serves (no NVLink as a NIC, no RoCE as PCIe)
    and whose numbers are finite and positive."""
    from sim.topology.build import build_topology
    from sim.topology.spec import parse_spec

    data = {"name": "h", "gpu": "H100-SXM", "nodes": nodes, "node": {"gpus": 8, **node}}
    if network:
        data["network"] = network
    try:
        with _deadline(LIMIT_S):
            topo = build_topology(parse_spec(data, "h.yaml"))
    except ClusterSimError as e:
        assert str(e) and len(str(e).splitlines()) <= 2
        return
    g = topo.graph
    for (u, v), scope in zip(topo.links, topo.link_scope, strict=True):
        kinds = frozenset({g.nodes[u]["kind"], g.nodes[v]["kind"]})
        want = _EDGE_SCOPE.get(kinds)
        assert want is None or want == scope, (u, v, scope)
    assert (topo.capacity_Bps > 0).all() and np.isfinite(topo.capacity_Bps).all()
    assert isinstance(topo.nodes, int) and not isinstance(topo.nodes, bool)


# --- hypothesis: the measurement file ------------------------------------------------------

_FIELD_VALUE = st.one_of(
    st.integers(min_value=-3, max_value=2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.sampled_from(["float32", "float128", "bf16", "", "1e3", "all_reduce"]),
)
_RECORD = {
    "op": "all_reduce", "size_bytes": 1024, "count": 256, "dtype": "float32", "time_s": 1e-5,
    "time_spread_s": None, "algbw_GBps": 0.1, "busbw_GBps": 0.2, "in_place": False,
    "n_ranks": 8, "iters": 20,
}  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(st.sampled_from(sorted(_RECORD)), _FIELD_VALUE, max_size=3),
    st.sampled_from(["plain", "duplicate", "no-records"]),
)
def test_measurement_space_gives_one_line_or_sound_records(
    changes: dict[str, object], shape: str
) -> None:
    """Any values of a collective record, written as JSON (with a duplicated key, or no
    records): a one-line CalibrationError, or records with known dtypes, whole counts
    (never bools) and finite positive times."""
    from calibrate.measurements import DTYPE_BYTES, load_measurements

    record = {**_RECORD, **changes}
    body = {"schema": "clustersim.measurements/1", "kind": "collectives",
            "meta": {"source": "x", "created": "t"}, "records": [record]}  # fmt: skip
    if shape == "no-records":
        body["records"] = []
    text = json.dumps(body)  # NaN/Infinity written as the non-standard tokens
    if shape == "duplicate":
        text = text.replace('"kind": "collectives"', '"kind": "compute", "kind": "collectives"')
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.json"
        path.write_text(text)
        try:
            m = load_measurements(path)
        except ClusterSimError as e:
            assert str(e) and len(str(e).splitlines()) <= 2
            return
    assert shape != "duplicate"
    for r in m.collectives:
        assert r.dtype in DTYPE_BYTES
        assert type(r.n_ranks) is int and r.n_ranks >= 1
        assert type(r.size_bytes) is int and r.size_bytes >= 0
        assert math.isfinite(r.time_s) and r.time_s > 0
