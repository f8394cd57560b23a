"""Topology files, builders, presets and routes."""

from __future__ import annotations

import copy
import functools
import itertools
import random
import time
from pathlib import Path
from typing import Any

import networkx as nx
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.catalog import link_spec
from sim.errors import TopologyError
from sim.topology.build import build_topology
from sim.topology.fabric import add_link
from sim.topology.model import Topology
from sim.topology.presets import load_spec, load_topology, preset_names
from sim.topology.spec import parse_spec

PRESETS = {  # name -> (GPUs, servers, GPUs per server) at the preset's default size
    "single-h100": (1, 1, 1),
    "grand-teton-h100": (64, 8, 8),
    "dgx-h100": (8, 1, 8),
    "h100-ib-ndr": (256, 32, 8),
    "h200-ib-ndr": (256, 32, 8),
    "h100-ib-ndr-3tier": (2048, 256, 8),
    "h100-roce-400g": (256, 32, 8),
    "h100-tcp-100g": (32, 4, 8),
    "l40s-pcie": (32, 4, 8),
    "rtx4090-pcie": (4, 1, 4),
    "gb200-nvl72": (576, 8, 72),
    "a100-ib-hdr": (1120, 140, 8),
}


def raw(name: str) -> dict[str, Any]:
    """A preset's YAML as a mapping, to edit in a test."""
    return dict(yaml.safe_load(load_spec(name).model_dump_json()))


def build(data: dict[str, Any], seed: int = 0) -> Topology:
    return build_topology(parse_spec(data, "test"), seed=seed)


def path_nodes(t: Topology, route: tuple[int, ...]) -> list[str]:
    return [t.links[route[0]][0]] + [t.links[i][1] for i in route]


@functools.lru_cache(maxsize=4)
def _as_networkx(g: Any) -> nx.DiGraph:
    """A built topology's graph as networkx's, for its shortest-path oracle."""
    return g.to_networkx()


def assert_shortest(t: Topology, src: str, dst: str) -> None:
    """The route is a connected path that crosses no GPU, except a PXN peer (a GPU that
    hands the data to the NIC beside it: NCCL's PCI + NVLink path), and has minimum hops
    when it uses no PXN peer."""
    route = t.route(src, dst)
    nodes = path_nodes(t, route)
    assert nodes[0] == src and nodes[-1] == dst
    assert all(t.links[a][1] == t.links[b][0] for a, b in itertools.pairwise(route))
    kinds = [t.graph.nodes[v]["kind"] for v in nodes]
    peers = [i for i in range(1, len(nodes) - 1) if kinds[i] == "gpu"]
    for i in peers:  # PXN: NVLink in, then PCIe switch, then the NIC
        assert kinds[i - 1] in ("nvswitch", "gpu") and kinds[i + 1] == "pcie_switch"
        assert kinds[i + 2] == "nic"
    if not peers:
        others = set(t.gpus) - {src, dst}
        view = nx.subgraph_view(_as_networkx(t.graph), filter_node=lambda v: v not in others)
        assert len(route) == nx.shortest_path_length(view, src, dst)


def sample_pairs(t: Topology, n: int, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    return [tuple(rng.sample(t.gpus, 2)) for _ in range(n)]  # type: ignore[misc]


# --- presets -------------------------------------------------------------------------


def test_preset_names_are_the_shipped_files() -> None:
    """Every expected preset is found by name through importlib.resources."""
    assert set(PRESETS) <= set(preset_names())


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_loads_with_its_gpu_count_and_is_connected(name: str) -> None:
    """Each preset builds, has the documented size, and its GPUs reach each other."""
    t = load_topology(name)
    assert (t.num_gpus, t.nodes, t.gpus_per_node) == PRESETS[name]
    assert t.description
    assert [t.node_of(g) for g in t.gpus] == sorted(t.node_of(g) for g in t.gpus)
    assert list(t.gpus) == sorted(t.gpus)  # names sort in rank order
    if t.num_gpus > 1:
        for src, dst in sample_pairs(t, 5):
            assert_shortest(t, src, dst)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_graph_follows_the_model_contract(name: str) -> None:
    """Kinds are known, server parts carry `node`, every link exists both ways with attrs."""
    g = load_topology(name, nodes=2 if load_spec(name).multi_node else None).graph
    kinds = {"gpu", "nvswitch", "pcie_switch", "host", "nic", "leaf", "spine", "core"}
    for _, data in g.nodes(data=True):
        assert data["kind"] in kinds
        assert ("node" in data) == (data["kind"] not in {"leaf", "spine", "core"})
    for u, v, data in g.edges(data=True):
        back = dict(g.edges[v, u])
        spec = link_spec(data["kind"])
        if g.nodes[u]["kind"] == "nic" and spec.scope == "net":  # per-message overhead
            back["latency_s"] += spec.overhead_s
        elif g.nodes[v]["kind"] == "nic" and spec.scope == "net":
            back["latency_s"] -= spec.overhead_s
        assert g.has_edge(v, u) and back == pytest.approx(data)
        assert data["capacity_Bps"] > 0 and data["latency_s"] >= 0
        assert data["scope"] == spec.scope and data["transport"] == spec.transport


def test_dgx_h100_capacities_come_from_the_catalog() -> None:
    """GPU<->NVSwitch at 450 GB/s each way, NICs at NDR 50 GB/s, PCIe Gen5 at 63 GB/s."""
    t = load_topology("dgx-h100")
    g = t.graph
    for gpu in t.gpus:
        nvs = t.nvswitch_of(gpu)
        assert nvs is not None
        assert g.edges[gpu, nvs]["capacity_Bps"] == g.edges[nvs, gpu]["capacity_Bps"] == 450e9
    nics = [v for v, d in g.nodes(data=True) if d["kind"] == "nic"]
    assert len(nics) == 8
    switches = [v for v, d in g.nodes(data=True) if d["kind"] == "pcie_switch"]
    assert len(switches) == 4
    for sw in switches:  # 2 GPUs + 2 NICs + the host on each switch
        kinds = sorted(g.nodes[v]["kind"] for v in g.successors(sw))
        assert kinds == ["gpu", "gpu", "host", "nic", "nic"]
        assert all(g.edges[sw, v]["capacity_Bps"] == 63e9 for v in g.successors(sw))


def test_ib_ndr_links_carry_400_gigabits() -> None:
    """NIC<->leaf edges of h100-ib-ndr are 50e9 B/s (400 Gb/s), not 400e9."""
    g = load_topology("h100-ib-ndr", nodes=2).graph
    nic_links = [d for u, v, d in g.edges(data=True) if g.nodes[u]["kind"] == "nic"
                 and g.nodes[v]["kind"] == "leaf"]  # fmt: skip
    assert len(nic_links) == 16 and all(d["capacity_Bps"] == 50e9 for d in nic_links)


def test_intra_server_gpu_traffic_prefers_nvlink_over_an_equal_hop_pcie_path() -> None:
    """GPU0 and GPU1 share a PCIe switch, but their route uses the NVSwitch (widest)."""
    t = load_topology("dgx-h100")
    route = t.route(t.gpus[0], t.gpus[1])
    assert [t.link_scope[i] for i in route] == ["nvlink", "nvlink"]


def test_rtx4090_gpu_traffic_crosses_the_host() -> None:
    """Without P2P, every GPU<->GPU route goes through the host."""
    t = load_topology("rtx4090-pcie")
    for src, dst in sample_pairs(t, 6):
        kinds = [t.graph.nodes[v]["kind"] for v in path_nodes(t, t.route(src, dst))]
        assert "host" in kinds and "pcie_switch" not in kinds


def test_gb200_rack_is_one_72_gpu_nvlink_domain() -> None:
    """All 72 GPUs of a rack share one logical NVSwitch at NVLink 5 rates."""
    t = load_topology("gb200-nvl72", nodes=2)
    first = {t.nvswitch_of(g) for g in t.gpus[:72]}
    assert len(first) == 1 and first != {t.nvswitch_of(t.gpus[72])}
    nvs = first.pop()
    assert t.graph.edges[t.gpus[0], nvs]["capacity_Bps"] == 900e9
    route = t.route(t.gpus[0], t.gpus[71])
    assert [t.link_kind[i] for i in route] == ["nvlink5", "nvlink5"]


def test_a100_preset_uses_nvlink3_and_hdr() -> None:
    """DGX A100: NVSwitch at 300 GB/s per direction, HDR NICs at 25 GB/s."""
    t = load_topology("a100-ib-hdr", nodes=2)
    kinds = {t.link_kind[i]: t.capacity_Bps[i] for i in t.route(t.gpus[0], t.gpus[8])}
    assert kinds["ib-hdr"] == 25e9 and kinds["pcie-gen4"] == 31.5e9
    assert t.capacity_Bps[t.route(t.gpus[0], t.gpus[1])[0]] == 300e9


# --- fabrics -------------------------------------------------------------------------


def uplink_total(t: Topology, leaf: str) -> float:
    """Capacity of every cable from ``leaf`` up to the spines (each cable is a link)."""
    return sum(
        float(t.capacity_Bps[i])
        for v in t.graph.successors(leaf)
        if t.graph.nodes[v]["kind"] == "spine"
        for i in t.link_ids[(leaf, v)]
    )


def downlink_total(t: Topology, leaf: str) -> float:
    g = t.graph
    return sum(g.edges[leaf, v]["capacity_Bps"] for v in g.successors(leaf)
               if g.nodes[v]["kind"] == "nic")  # fmt: skip


@pytest.mark.parametrize("preset", ["h100-ib-ndr", "h100-roce-400g"])
def test_oversubscription_2_halves_leaf_uplink_capacity(preset: str) -> None:
    """Uplink capacity = downlink capacity / oversubscription."""
    data = raw(preset)
    one = build(data)
    data["network"]["oversubscription"] = 2.0
    two = build(data)
    leaf = next(v for v, d in one.graph.nodes(data=True) if d["kind"] == "leaf")
    assert uplink_total(one, leaf) == pytest.approx(downlink_total(one, leaf))
    assert uplink_total(two, leaf) == pytest.approx(uplink_total(one, leaf) / 2)


def test_rail_optimized_nic_r_goes_to_rail_r_leaf() -> None:
    """Every server's NIC r lands on a leaf of rail r; a unit of servers shares the leaf."""
    t = load_topology("h100-ib-ndr", nodes=40)
    g = t.graph
    for v, d in g.nodes(data=True):
        if d["kind"] == "nic":
            (leaf,) = [w for w in g.successors(v) if g.nodes[w]["kind"] == "leaf"]
            assert g.nodes[leaf]["rail"] == int(v.rsplit("nic", 1)[1])
            assert g.nodes[leaf]["unit"] == d["node"] // 32


@pytest.mark.parametrize("preset", ["h100-ib-ndr", "h100-roce-400g-qp8"])
def test_a_route_inside_a_server_takes_no_rail(preset: str) -> None:
    """A rail pins the NIC a transfer leaves its server by: inside one server every rail
    gives the links and shares of the unpinned route (adaptive and multi-QP ECMP alike),
    each rail's path its own object (flows are numbered by path identity); between
    servers the rail still picks the NIC."""
    t = load_topology(preset, nodes=2)
    a, b, far = t.gpus[1], t.gpus[6], t.gpus[8 + 6]
    base = t.path(a, b)
    for rail in range(8):
        # the routes the paths are made of ignore the rail inside a server...
        assert all(t.route(a, b, rail, q) == t.route(a, b, -1, q) for q in range(t.qps))
        p = t.path(a, b, rail)  # ...so the path is the unpinned one's, in its own object
        assert p is not base and p.links.tolist() == base.links.tolist()
        assert p.shares.tolist() == base.shares.tolist()
    assert len({tuple(t.path(a, far, rail).links.tolist()) for rail in range(8)}) == 8


def test_three_tier_crosses_the_core_between_pods() -> None:
    """Servers in different pods reach each other through a core switch; same pod does not."""
    t = load_topology("h100-ib-ndr-3tier", nodes=130)
    kinds = [t.graph.nodes[v]["kind"] for v in path_nodes(t, t.route(t.gpus[0], t.gpus[8 * 129]))]
    assert "core" in kinds
    kinds = [t.graph.nodes[v]["kind"] for v in path_nodes(t, t.route(t.gpus[0], t.gpus[8 * 100]))]
    assert "core" not in kinds and "spine" in kinds
    assert_shortest(t, t.gpus[3], t.gpus[8 * 129 + 5])


def test_mesh_and_nvlink_bridges_from_a_user_file(tmp_path: Path) -> None:
    """A user YAML path works; mesh links every GPU pair, bridges join pairs (0,1),(2,3)."""
    f = tmp_path / "mine.yaml"
    f.write_text(
        yaml.safe_dump({"name": "mi", "gpu": "MI300X", "node": {"gpus": 8, "fabric": "mesh"}})
    )
    t = load_topology(str(f))
    assert [t.link_kind[i] for i in t.route(t.gpus[2], t.gpus[7])] == ["xgmi"]
    node = {"gpus": 4, "fabric": "pcie", "pcie_switches": 2, "nvlink_bridges": "nvlink-bridge"}
    t = build({"name": "a100p", "gpu": "A100-PCIe", "node": node})
    assert [t.link_kind[i] for i in t.route(t.gpus[0], t.gpus[1])] == ["nvlink-bridge"]
    assert "nvlink-bridge" not in {t.link_kind[i] for i in t.route(t.gpus[1], t.gpus[2])}


# --- routing -------------------------------------------------------------------------


@pytest.mark.parametrize("preset", ["h100-ib-ndr", "h100-roce-400g", "l40s-pcie", "gb200-nvl72"])
def test_fast_routes_match_the_generic_bfs_length(preset: str) -> None:
    """The structured router and the per-destination BFS agree on hop counts."""
    t = load_topology(preset, nodes=3)
    for src, dst in sample_pairs(t, 30, seed=3):
        assert len(t.route(src, dst)) == len(t._compute_route(src, dst))
        assert_shortest(t, src, dst)


def spines_used(t: Topology, pairs: list[tuple[str, str]]) -> set[str]:
    return {v for s, d in pairs for v in path_nodes(t, t.route(s, d))
            if t.graph.nodes[v]["kind"] == "spine"}  # fmt: skip


def cross_unit_pairs(t: Topology, n: int) -> list[tuple[str, str]]:
    return [(t.gpus[i % 256], t.gpus[256 + (i * 7) % 256]) for i in range(n)]


def test_ecmp_is_deterministic_for_a_seed_and_spreads_over_spines() -> None:
    """Same seed, same routes; many cross-unit flows use several spines."""
    a = load_topology("h100-ib-ndr", nodes=64, seed=7)
    b = load_topology("h100-ib-ndr", nodes=64, seed=7)
    pairs = cross_unit_pairs(a, 64)
    assert [a.route(s, d) for s, d in pairs] == [b.route(s, d) for s, d in pairs]
    assert len(spines_used(a, pairs)) >= 4


def test_ecmp_choice_depends_on_the_seed() -> None:
    """Another seed picks other spines for at least some flows."""
    pairs = cross_unit_pairs(load_topology("h100-ib-ndr", nodes=64), 32)
    routes = {seed: [load_topology("h100-ib-ndr", nodes=64, seed=seed).route(s, d)
                     for s, d in pairs] for seed in (0, 1)}  # fmt: skip
    assert routes[0] != routes[1]


def test_gpu_uses_its_own_rail_when_equally_short() -> None:
    """GPU i -> GPU i of another server in the same unit: NIC i on both ends, one leaf."""
    t = load_topology("h100-ib-ndr", nodes=4)
    for i in range(8):
        nodes = path_nodes(t, t.route(t.gpus[i], t.gpus[16 + i]))
        nics = [v for v in nodes if t.graph.nodes[v]["kind"] == "nic"]
        assert [v.rsplit("nic", 1)[1] for v in nics] == [str(i), str(i)]
        assert sum(t.graph.nodes[v]["kind"] == "leaf" for v in nodes) == 1


def test_scaled_topology_keeps_routes_and_scales_capacity() -> None:
    """scaled() multiplies capacities by scope and shares the routes."""
    t = load_topology("h100-ib-ndr", nodes=2)
    s = t.scaled({"net": 0.5})
    r = t.route(t.gpus[0], t.gpus[9])
    assert s.route(t.gpus[0], t.gpus[9]) == r
    net = [i for i in r if t.link_scope[i] == "net"]
    assert all(s.capacity_Bps[i] == t.capacity_Bps[i] / 2 for i in net)


def test_ring_routes_over_1024_gpus_are_fast() -> None:
    """8 rings of 1024 GPUs (8192 routes) route in well under a second."""
    t = load_topology("h100-ib-ndr", nodes=128)
    n = t.num_gpus
    start = time.perf_counter()
    for c in range(8):
        order = [t.gpus[k * 8 + (j + c) % 8] for k in range(128) for j in range(8)]
        for i in range(n):
            t.route(order[i], order[(i + 1) % n])
    assert time.perf_counter() - start < 1.5


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["rail-optimized", "leaf-spine", "fat-tree-3tier"]),
    nodes=st.integers(1, 24),
    per_leaf=st.integers(1, 6),
    uplinks=st.integers(1, 18),
    nics=st.integers(1, 3),
    seed=st.integers(0, 1000),
)
def test_random_fabrics_route_on_shortest_paths(
    kind: str, nodes: int, per_leaf: int, uplinks: int, nics: int, seed: int
) -> None:
    """Any size, radix and oversubscription a whole number of cables gives: routes exist,
    are shortest, skip GPUs; a leaf's uplinks carry its downlinks / the ratio."""
    down = per_leaf * (1 if kind != "leaf-spine" else nics)
    ratio = down / min(uplinks, down)
    network: dict[str, Any] = {"kind": kind, "link": "ib-ndr", "oversubscription": ratio,
                               "nodes_per_leaf": per_leaf}  # fmt: skip
    if kind == "fat-tree-3tier":
        network.update(nodes_per_pod=2 * per_leaf)
    node = {"gpus": 2, "fabric": "nvswitch", "pcie_switches": 1, "nics": nics, "nic": "ib-ndr"}
    t = build({"name": "h", "gpu": "H100-SXM", "nodes": nodes, "node": node, "network": network},
              seed=seed)  # fmt: skip
    for src, dst in sample_pairs(t, 6, seed=seed):
        assert_shortest(t, src, dst)
    leaf = next(v for v, d in t.graph.nodes(data=True) if d["kind"] == "leaf")
    assert t.fabric is not None
    up = 0.0 if t.fabric.tier("spine") is None else down * 50e9 / ratio
    assert uplink_total(t, leaf) == pytest.approx(up)


# --- overrides and errors ------------------------------------------------------------


def test_nodes_override_resizes_a_multi_node_preset() -> None:
    """--nodes changes the server count of a fabric preset."""
    t = load_topology("h100-ib-ndr", nodes=3)
    assert (t.num_gpus, t.nodes) == (24, 3)


@pytest.mark.parametrize(("name", "nodes", "bad"), [("dgx-h100", 2, "dgx-h100"),
                                                      ("h100-ib-ndr", 0, "0")])  # fmt: skip
def test_nodes_override_errors(name: str, nodes: int, bad: str) -> None:
    """Single-server presets refuse --nodes; counts below 1 are refused."""
    with pytest.raises(TopologyError, match=bad):
        load_topology(name, nodes=nodes)


BASE = raw("h100-ib-ndr")


def edit(path: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    *parents, key = path.split(".")
    where = data
    for p in parents:
        where = where[p]
    where[key] = value
    return data


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("gpu", "H900", "H900"),
        ("node.nic", "ib-foo", "ib-foo"),
        ("network.link", "eth-9", "eth-9"),
        ("node.nvlink", "nvlink9", "nvlink9"),
        ("network.oversubscription", 0.5, "network.oversubscription"),
        ("node.fabric", "torus", "torus"),
        ("node.gpus", 0, "node.gpus"),
        ("network.kind", "dragonfly", "dragonfly"),
        ("network.bogus", 1, "network.bogus"),
        ("node.nvswitches", 4, "node.nvswitches"),
        ("colour", "red", "colour"),
        ("network.rails", True, "network.rails"),
    ],
)
def test_bad_values_raise_one_line_topology_errors(path: str, value: Any, message: str) -> None:
    """Each mistake names the bad key or value, on one line."""
    with pytest.raises(TopologyError, match=message) as e:
        build(edit(path, value))
    assert "\n" not in str(e.value)


def test_unknown_preset_lists_the_known_ones() -> None:
    """A typo in a preset name shows the allowed names."""
    with pytest.raises(TopologyError, match=r"'dgx-h1000'.*dgx-h100"):
        load_topology("dgx-h1000")


def test_disconnected_servers_are_refused() -> None:
    """Two servers with no network cannot reach each other."""
    data = {"name": "islands", "gpu": "H100-SXM", "nodes": 2, "node": {"gpus": 2}}
    with pytest.raises(TopologyError, match="disconnected"):
        build(data)


def test_zero_bandwidth_is_refused() -> None:
    """A link of zero capacity is a TopologyError, from the builder and from Topology."""
    g = nx.DiGraph()
    with pytest.raises(TopologyError, match="bandwidth"):
        add_link(g, "a", "b", link_spec("ib-ndr"), capacity_Bps=0.0)
    t = load_topology("dgx-h100")
    g = t.graph.copy()
    u, v = next(iter(g.edges))
    g.edges[u, v]["capacity_Bps"] = -1.0
    with pytest.raises(TopologyError, match="bandwidth"):
        Topology(name="x", graph=g, gpus=t.gpus, gpu=t.gpu, nodes=1, gpus_per_node=8)


@pytest.mark.parametrize("text", ["name: x\n gpu: [\n", "- just\n- a list\n"])
def test_bad_yaml_file_is_a_topology_error(tmp_path: Path, text: str) -> None:
    """Unparseable or non-mapping YAML gives one line naming the file."""
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(TopologyError, match=r"bad\.yaml") as e:
        load_topology(str(f))
    assert "\n" not in str(e.value)


def test_missing_file_is_a_topology_error() -> None:
    """A path that does not exist is named."""
    with pytest.raises(TopologyError, match=r"nowhere\.yaml"):
        load_topology("/nowhere.yaml")
