"""Collective parameters validated by the shared pydantic models: the same parameters as the
hand-written checkers built, and one-line errors naming the key path."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.collectives.param_models import OPTIONAL, CompleteCollectives
from sim.collectives.params import PROTOCOLS, SCOPES, CollectiveParams, default_params
from sim.errors import ConfigError
from sim.files import load_yaml
from sim.profile_models import CollectivesSection

GOLDEN = json.loads((Path(__file__).parent / "collective_params_golden.json").read_text())
DEFAULTS = load_yaml(
    resources.files("sim.collectives").joinpath("defaults.yaml").read_text(), "defaults.yaml"
)
Tree = dict[str, Any]


def plain(p: CollectiveParams) -> Tree:
    """The parameters as JSON values, field by field (the golden file's shape)."""
    d = {f.name: getattr(p, f.name) for f in dataclasses.fields(p) if f.name != "raw"}
    d["algorithms"] = {k: dataclasses.asdict(v) for k, v in p.algorithms.items()}
    d["channels"] = dataclasses.asdict(p.channels)
    d["transports"] = {k: dataclasses.asdict(v) for k, v in p.transports.items()}
    return json.loads(json.dumps(d))


def leaves(tree: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every (path, value) under ``tree`` whose value is not a mapping."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from leaves(v, (*path, k))
    else:
        yield path, tree


def nest(items: dict[tuple[str, ...], Any]) -> Tree:
    out: Tree = {}
    for path, value in items.items():
        node = out
        for k in path[:-1]:
            node = node.setdefault(k, {})
        node[path[-1]] = value
    return out


def merge(base: Tree, over: Tree) -> Tree:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


@pytest.mark.parametrize("name", sorted(k for k in GOLDEN if not k.startswith("_")))
def test_same_parameters_as_the_hand_checked_code(name: str) -> None:
    """Golden objects built by the hand-written checkers (commit 842a5b5), field by field."""
    got = plain(default_params().merged(GOLDEN[name]["override"]))
    assert got == GOLDEN[name]["params"]


# --- random valid overrides --------------------------------------------------------------

COUNTS = {"threads", "per_server", "per_nic", "sockets_per_thread"}


def value_strategy(path: tuple[str, ...]) -> st.SearchStrategy[Any] | None:
    """Valid values of one leaf of ``defaults.yaml`` (None: not a tunable number)."""
    key, parent = path[-1], path[-2] if len(path) > 1 else ""
    if key in ("source", "protocols", "backend"):
        return None
    if parent == "pipeline" and key.endswith("_chunks"):
        return st.integers(1, 8) if key == "min_chunks" else st.integers(8, 256)
    if key in COUNTS or parent == "threads":
        return st.integers(1, 1024)
    if key in ("efficiency", "value") or parent == "link_efficiency":
        return st.floats(0, 1, exclude_min=True) | st.just(1)
    if any(p.endswith("_us") for p in path):
        return st.floats(0, 1e3) | st.integers(0, 100)
    if key.endswith("_bytes"):  # whole bytes (sim.validation.ByteCount)
        return st.integers(1, 2**30) | st.integers(1, 2**30).map(float)
    return st.floats(1e-3, 1e10) | st.integers(1, 2**30)


TUNABLE = [(p, s) for p, _ in leaves(DEFAULTS) if (s := value_strategy(p)) is not None]


@st.composite
def overrides(draw: st.DrawFn, keep_values: bool) -> Tree:
    picked = draw(st.lists(st.sampled_from(range(len(TUNABLE))), unique=True, max_size=12))
    values = dict(leaves(DEFAULTS))
    items = {
        TUNABLE[i][0]: values[TUNABLE[i][0]] if keep_values else draw(TUNABLE[i][1]) for i in picked
    }
    return nest(items)


def reference(tree: Tree) -> Tree:
    """What the parameters mean, read straight off a valid merged tree (the units the
    simulator uses: seconds, bytes/s); the shape of :func:`plain`."""
    pick = {s: tree["link_efficiency"][s] for s in SCOPES}
    algos = {}
    for name, a in tree["algorithms"].items():
        protos = list(a.get("protocols", PROTOCOLS))
        us = {"base": a["base_latency_us"], **a["step_latency_us"]}
        sec = {k: {p: float(v[p]) * 1e-6 for p in protos} for k, v in us.items()}
        base = sec.pop("base")
        algos[name] = {"efficiency": float(a["efficiency"]), "protocols": protos,
                       "base_latency_s": base, "step_latency_s": sec}  # fmt: skip
    ch, pipe = tree["channels"], tree["pipeline"]
    ports = {}
    for name, t in tree.get("transports", {}).items():
        socks = t["threads"] * t["sockets_per_thread"] if "socket_GBps" in t else 1
        rate = t["socket_GBps"] * 1e9 if "socket_GBps" in t else math.inf
        ports[name] = {"efficiency": float(t["efficiency"]), "socket_Bps": rate, "sockets": socks}
    return json.loads(json.dumps({
        "link_efficiency": {s: float(v["value"] if isinstance(v, dict) else v)
                            for s, v in pick.items()},
        "protocol_efficiency": {p: float(tree["protocols"][p]["efficiency"]) for p in PROTOCOLS},
        "algorithms": algos,
        "pipeline_chunk_bytes": float(pipe["chunk_bytes"]),
        "pipeline_max_chunks": pipe["max_chunks"],
        "pipeline_min_chunks": pipe.get("min_chunks", 1),
        "channels": {"threads": dict(ch["threads"]),
                     "thread_threshold_bytes": {p: float(v)
                                                for p, v in ch["thread_threshold_bytes"].items()},
                     "bandwidth_Bps": {p: v * 1e9 for p, v in ch["bandwidth_GBps"].items()},
                     "per_server": ch["per_server"], "per_nic": ch["per_nic"],
                     "slice_bytes": float(ch.get("slice_bytes", 524288))},
        "transports": ports,
    }))  # fmt: skip


def test_the_reference_reads_the_defaults_as_the_old_code_did() -> None:
    assert reference(DEFAULTS) == GOLDEN["defaults"]["params"]


@settings(max_examples=60, deadline=None)
@given(overrides(keep_values=True))
def test_a_subset_of_the_defaults_changes_nothing(override: Tree) -> None:
    """Any subset of defaults.yaml laid on the defaults builds the defaults' parameters."""
    assert plain(default_params().merged(override)) == GOLDEN["defaults"]["params"]


@settings(max_examples=80, deadline=None)
@given(overrides(keep_values=False))
def test_valid_overrides_build_what_the_merged_tree_says(override: Tree) -> None:
    """Random valid values on random keys: the parameters are the merged tree's values."""
    merged = merge(DEFAULTS, override)
    params = default_params().merged(override)
    assert plain(params) == reference(merged)
    assert params.raw == merged


# --- errors ------------------------------------------------------------------------------


def one_line_error(override: Any, where: str = "profile.collectives") -> str:
    with pytest.raises(ConfigError) as err:
        default_params().merged(override, where)
    text = str(err.value)
    assert len(text.splitlines()) == 1, text
    return text


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"algorithms": {"ring": {"efficiency": True}}},
         "algorithms.ring.efficiency: expected a number, got True"),
        ({"channels": {"per_nic": True}}, "channels.per_nic: expected int, got True"),
        ({"pipeline": {"max_chunks": 64.0}}, "pipeline.max_chunks: expected int, got 64.0"),
        ({"transports": {"tcp": {"socket_GBps": False}}},
         "transports.tcp.socket_GBps: expected a number, got False"),
        ({"gloo": {"local_GBps": math.nan}}, "gloo.local_GBps: must be a finite number, got nan"),
        ({"algorithms": {"tree": {"step_latency_us": {"net": {"ll": math.inf}}}}},
         "algorithms.tree.step_latency_us.net.ll: must be a finite number, got inf"),
        ({"protocols": {"ll": {"efficiency": math.nan}}},
         "protocols.ll.efficiency: must be a finite number, got nan"),
        ({"algorithms": {"ring": {"base_latency_us": {"simple": -1}}}},
         "algorithms.ring.base_latency_us.simple: must be >= 0, got -1"),
        ({"algorithms": {"nvls": {"step_latency_us": {"pcie": {"simple": -0.5}}}}},
         "algorithms.nvls.step_latency_us.pcie.simple: must be >= 0, got -0.5"),
        ({"algorithms": {"ring": {"efficiency": 1.5}}},
         "algorithms.ring.efficiency: must be <= 1, got 1.5"),
        ({"link_efficiency": {"net": {"value": 0}}},
         "link_efficiency.net.value: must be > 0, got 0"),
        ({"channels": {"bandwidth_GBps": {"ll": -1.0}}},
         "channels.bandwidth_GBps.ll: must be > 0, got -1.0"),
        ({"backend": "mpi"}, "backend: expected one of 'nccl' or 'gloo', got 'mpi'"),
        ({"algorithms": {"ring": {"protocols": ["warp"]}}},
         "algorithms.ring.protocols[0]: expected one of 'll', 'll128' or 'simple', got 'warp'"),
        ({"pipeline": {"min_chunks": 65}}, "pipeline: min_chunks (65) must be <= max_chunks (64)"),
        ({"pipeline": {"max_chunks": 4, "min_chunks": 8}},
         "pipeline: min_chunks (8) must be <= max_chunks (4)"),
        ({"algorithms": {"ring": [1]}}, "algorithms.ring: expected a mapping, got [1]"),
    ],
)  # fmt: skip
def test_bad_values_are_one_line_naming_the_key(override: Tree, message: str) -> None:
    assert one_line_error(override) == f"profile.collectives: {message}"


UNKNOWN = [
    (),
    ("link_efficiency",),
    ("link_efficiency", "nvlink"),
    ("protocols",),
    ("protocols", "ll128"),
    ("algorithms", "ring"),
    ("algorithms", "ring", "base_latency_us"),
    ("algorithms", "ring", "step_latency_us"),
    ("algorithms", "ring", "step_latency_us", "net"),
    ("pipeline",),
    ("channels",),
    ("channels", "threads"),
    ("channels", "thread_threshold_bytes"),
    ("channels", "bandwidth_GBps"),
    ("transports", "tcp"),
    ("gloo",),
]


@pytest.mark.parametrize("path", UNKNOWN, ids=".".join)
def test_unknown_key_at_each_level_is_named_with_the_allowed_ones(path: tuple[str, ...]) -> None:
    text = one_line_error(nest({(*path, "warp"): 1}))
    head = f"profile.collectives: {'.'.join(path)}" if path else "profile.collectives"
    assert text.startswith(f"{head}: unknown key 'warp'; allowed: ")


def test_unknown_key_lists_what_is_allowed() -> None:
    text = one_line_error({"pipeline": {"chunks": 3}})
    assert text.endswith("allowed: source, chunk_bytes, max_chunks, min_chunks")


def _may_go(path: tuple[str, ...]) -> bool:
    """Keys of ``defaults.yaml`` a complete tree may leave out (see ``OPTIONAL``): sources,
    defaulted keys, whole optional sections, one algorithm or transport of a mapping."""
    return (
        path[-1] in ("source", "min_chunks", "slice_bytes", "socket_GBps")
        or path in (("transports",), ("backend",), ("gloo",))
        or (path[0] in ("algorithms", "transports") and len(path) == 2)
        or (
            len(path) == 3
            and path[2] == "protocols"
            and DEFAULTS[path[0]][path[1]][path[2]] == list(PROTOCOLS)
        )
    )


REQUIRED = sorted({p[:i] for p, _ in leaves(DEFAULTS) for i in range(1, len(p) + 1)})


@pytest.mark.parametrize("path", REQUIRED, ids=".".join)
def test_each_key_of_a_complete_tree_is_required_unless_optional(path: tuple[str, ...]) -> None:
    """Dropping a key from the complete tree: refused in one line naming it and its parent,
    unless it may be left out. An algorithm's protocols may go where it lists all three
    (the default); nvls's may not: then it lacks latencies for ll and ll128."""
    tree = copy.deepcopy(DEFAULTS)
    node = tree
    for k in path[:-1]:
        node = node[k]
    del node[path[-1]]
    if _may_go(path):
        CollectiveParams.from_dict(tree)
        return
    with pytest.raises(ConfigError) as err:
        CollectiveParams.from_dict(tree, "defaults")
    text = str(err.value)
    assert len(text.splitlines()) == 1
    parent, key = ".".join(("defaults", *path[:-1])), path[-1]
    if path[0] == "algorithms" and key == "protocols":
        parent, key = ".".join(("defaults", *path[:-1], "base_latency_us")), "ll"
    assert f"{parent}.missing key {key!r}" in text.replace(": ", "."), text


def test_an_algorithm_needs_latencies_for_each_protocol_it_runs() -> None:
    text = one_line_error({"algorithms": {"nvls": {"protocols": ["ll", "simple"]}}})
    assert text == (
        "profile.collectives: algorithms.nvls: base_latency_us: missing key 'll' "
        "(the algorithm runs ll, simple)"
    )
    text = one_line_error({"algorithms": {"mine": {"efficiency": 0.5}}}, "profile p: collectives")
    assert text == "profile p: collectives: algorithms.mine: missing key 'base_latency_us'"


def test_a_socket_rate_needs_the_socket_counts() -> None:
    text = one_line_error({"transports": {"new": {"efficiency": 0.5, "socket_GBps": 1.0}}})
    assert text == "profile.collectives: transports.new: missing key 'threads' (socket_GBps is set)"


def test_a_tree_that_is_not_a_mapping() -> None:
    assert one_line_error([1]) == "profile.collectives: expected a mapping, got [1]"
    with pytest.raises(ConfigError, match=r"^c: expected a mapping, got 5$"):
        CollectiveParams.from_dict(5, "c")  # type: ignore[arg-type]


def test_the_complete_model_is_derived_from_the_profile_section() -> None:
    """Same keys at every level as the profile's model, and only OPTIONAL keys optional."""
    assert set(CompleteCollectives.model_fields) == set(CollectivesSection.model_fields)
    optional = {n for n, f in CompleteCollectives.model_fields.items() if not f.is_required()}
    assert optional == OPTIONAL["CollectivesSection"]
    assert issubclass(CompleteCollectives, CollectivesSection)
