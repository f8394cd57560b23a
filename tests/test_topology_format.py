"""Topology file forms: inline links, overrides, mixed servers, NIC affinity, explicit graphs."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.catalog import link_names, link_spec
from sim.cli import main
from sim.collectives.simulate import CollectiveSetup, simulate_collective
from sim.errors import ClusterSimError, TopologyError
from sim.topology.build import build_topology
from sim.topology.export import graph_document
from sim.topology.links import InlineLink, link_from_ref
from sim.topology.model import Topology
from sim.topology.presets import load_spec, load_topology, preset_names
from sim.topology.spec import parse_spec
from sim.units import format_bandwidth, format_time
from tests.helpers import REPO
from tests.test_topology import assert_shortest, path_nodes, sample_pairs

EXAMPLES = sorted((REPO / "topologies" / "examples").glob("*.yaml"))
DOC = REPO / "docs" / "topology-format.md"


def build(data: dict[str, Any], seed: int = 0) -> Topology:
    return build_topology(parse_spec(data, "test"), seed=seed)


def preset(name: str, nodes: int | None = None) -> dict[str, Any]:
    """A preset's file as a mapping (sized by ``nodes``), to edit in a test."""
    return dict(yaml.safe_load(load_spec(name, nodes=nodes).model_dump_json()))


def links_by_name(t: Topology) -> dict[tuple[str, str], tuple[float, float, str, str, str]]:
    """Every directed link: (capacity, latency, kind, scope, transport)."""
    g = t.graph
    return {
        (u, v): (d["capacity_Bps"], d["latency_s"], d["kind"], d["scope"], d["transport"])
        for u, v, d in g.edges(data=True)
    }


def same_network(a: Topology, b: Topology, kinds: bool = True) -> None:
    """Same GPUs in rank order, same links and values, same routes as node paths."""
    assert a.gpus == b.gpus and (a.nodes, a.gpus_per_node) == (b.nodes, b.gpus_per_node)
    la, lb = links_by_name(a), links_by_name(b)
    if not kinds:
        la = {e: v[:2] + v[3:] for e, v in la.items()}
        lb = {e: v[:2] + v[3:] for e, v in lb.items()}
    assert la == lb
    pairs = [*sample_pairs(a, 60, seed=5), (a.gpus[0], a.gpus[-1])] if a.num_gpus > 1 else []
    for s, d in pairs:
        assert path_nodes(a, a.route(s, d)) == path_nodes(b, b.route(s, d))


# --- every form loads ------------------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_example_builds_connected_with_shortest_routes(path: Path) -> None:
    """Each shipped example loads by path and routes on shortest paths that skip GPUs."""
    t = load_topology(str(path))
    assert t.num_gpus == t.nodes * t.gpus_per_node and t.description
    for src, dst in sample_pairs(t, 8):
        assert_shortest(t, src, dst)


def test_examples_ship_the_promised_forms() -> None:
    """An explicit graph, a hand-made fabric over built servers, mixed servers."""
    assert {p.stem for p in EXAMPLES} >= {"dragonfly-h100", "h100-ib-ndr-2x-explicit",
                                          "mixed-racks"}  # fmt: skip


def doc_blocks() -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S)


@pytest.mark.parametrize("i", range(5))
def test_every_yaml_block_of_the_format_doc_builds(i: int) -> None:
    """docs/topology-format.md shows whole files; each one builds."""
    blocks = doc_blocks()
    assert len(blocks) == 5
    t = build(yaml.safe_load(blocks[i]))
    assert t.num_gpus >= 2


# --- inline links ----------------------------------------------------------------------


@pytest.mark.parametrize("name", link_names())
def test_inline_link_with_catalog_values_equals_the_catalog_kind(name: str) -> None:
    """{kind: X} is X itself; a kind-less copy of X's values has X's values."""
    spec = link_spec(name)
    assert link_from_ref(InlineLink(kind=name), "k", "test") == spec
    own = InlineLink(bandwidth=format_bandwidth(spec.bandwidth_Bps),
                     latency=format_time(spec.latency_s), transport=spec.transport,
                     scope=spec.scope)  # type: ignore[arg-type]  # fmt: skip
    got = link_from_ref(own, "k", "test")
    assert (got.bandwidth_Bps, got.latency_s, got.scope, got.transport) == (
        spec.bandwidth_Bps, spec.latency_s, spec.scope, spec.transport)  # fmt: skip
    assert got.name == f"custom-{spec.transport}"


def test_inline_units_parse_like_the_catalog() -> None:
    """400Gb/s and 0.5us are ib-ndr's 50e9 B/s and 5e-7 s; the scope follows the transport."""
    got = link_from_ref(InlineLink(bandwidth="400Gb/s", latency="0.5us", transport="ib"), "k", "t")
    ndr = link_spec("ib-ndr")
    assert (got.bandwidth_Bps, got.latency_s, got.scope) == (
        ndr.bandwidth_Bps,
        ndr.latency_s,
        "net",
    )
    nv = link_from_ref(
        InlineLink(bandwidth="450GB/s", latency="150ns", transport="nvlink"), "k", "t"
    )
    assert (nv.bandwidth_Bps, nv.scope) == (link_spec("nvlink4").bandwidth_Bps, "nvlink")


def test_partial_inline_link_keeps_the_rest_of_its_kind_and_says_where_from() -> None:
    """{kind: ib-ndr, bandwidth: 200Gb/s}: HDR rate, NDR latency and transport, name kept."""
    got = link_from_ref(InlineLink(kind="ib-ndr", bandwidth="200Gb/s"), "node.nic", "mine.yaml")
    ndr = link_spec("ib-ndr")
    assert (got.name, got.bandwidth_Bps, got.latency_s, got.transport) == (
        "ib-ndr", 25e9, ndr.latency_s, "ib")  # fmt: skip
    assert got.sources["bandwidth"] == "node.nic in mine.yaml"
    assert got.sources["latency"] == ndr.sources["latency"]


def test_a_cluster_of_inline_links_builds_the_catalog_cluster() -> None:
    """h100-ib-ndr with every link given by value: same capacities, latencies, routes."""
    data = preset("h100-ib-ndr", nodes=3)
    for where, key, kind in (("node", "nic", "ib-ndr"), ("node", "nvlink", "nvlink4"),
                             ("node", "pcie", "pcie-gen5"), ("network", "link", "ib-ndr")):  # fmt: skip
        s = link_spec(kind)
        data[where][key] = {"bandwidth": format_bandwidth(s.bandwidth_Bps),
                            "latency": format_time(s.latency_s),
                            "overhead": format_time(s.overhead_s), "transport": s.transport}  # fmt: skip
    own, ref = build(data), load_topology("h100-ib-ndr", nodes=3)
    same_network(own, ref, kinds=False)
    assert {k.split("-")[0] for k in own.link_kind} == {"custom"}


def test_nic_bandwidth_and_an_inline_nic_rate_are_the_same_link() -> None:
    """node.nic_bandwidth: 200Gb/s equals nic: {kind: ib-ndr, bandwidth: 200Gb/s}."""
    a, b = preset("h100-ib-ndr", nodes=2), preset("h100-ib-ndr", nodes=2)
    a["node"]["nic_bandwidth"] = "200Gb/s"
    b["node"]["nic"] = {"kind": "ib-ndr", "bandwidth": "200Gb/s"}
    same_network(build(a), build(b))


def test_edges_carry_their_link_transport() -> None:
    """Every edge says its transport: RoCE NICs, NVLink, PCIe."""
    t = load_topology("h100-roce-400g", nodes=2)
    assert {(d["kind"], d["transport"]) for _, _, d in t.graph.edges(data=True)} == {
        ("roce-400g", "roce"), ("nvlink4", "nvlink"), ("pcie-gen5", "pcie")}  # fmt: skip


# --- overrides -------------------------------------------------------------------------


def changed(a: Topology, b: Topology) -> set[tuple[str, str]]:
    la, lb = links_by_name(a), links_by_name(b)
    assert la.keys() == lb.keys()
    return {e for e in la if la[e] != lb[e]}


def with_overrides(overrides: list[dict[str, Any]], nodes: int = 4) -> tuple[Topology, Topology]:
    data = preset("h100-ib-ndr", nodes=nodes)
    data["network"]["nodes_per_leaf"] = 2
    del data["network"]["spines"]  # one spine per leaf uplink: spine0, spine1
    before = build(data)
    data["overrides"] = overrides
    return before, build(data)


def test_link_override_changes_exactly_that_link_both_ways() -> None:
    """link: a<->b (either order) sets both directions; nothing else moves."""
    before, after = with_overrides([{"link": "leaf1.r5<->n3.nic5", "bandwidth": "200Gb/s"}])
    assert changed(before, after) == {("n3.nic5", "leaf1.r5"), ("leaf1.r5", "n3.nic5")}
    d = after.graph.edges["n3.nic5", "leaf1.r5"]  # out of the NIC: + 1 us per-message overhead
    assert (d["capacity_Bps"], d["latency_s"], d["kind"]) == (25e9, 1.5e-6, "ib-ndr")


def test_glob_override_changes_exactly_the_leaf_spine_links() -> None:
    """match: leaf*<->spine* touches every leaf-spine link and no other."""
    before, after = with_overrides([{"match": "spine*<->leaf*", "latency": "2us"}])
    kinds = before.graph.nodes
    expect = {(u, v) for u, v in before.graph.edges
              if {kinds[u]["kind"], kinds[v]["kind"]} == {"leaf", "spine"}}  # fmt: skip
    assert expect and changed(before, after) == expect
    assert all(after.graph.edges[e]["latency_s"] == 2e-6 for e in expect)
    assert all(after.graph.edges[e]["capacity_Bps"] == before.graph.edges[e]["capacity_Bps"]
               for e in expect)  # fmt: skip


def test_single_glob_override_touches_every_link_of_a_node() -> None:
    """match: spine1 changes all links of spine1; kind takes the catalog kind's values."""
    before, after = with_overrides([{"match": "spine1", "kind": "roce-400g"}])
    expect = {e for e in before.graph.edges if "spine1" in e}
    assert changed(before, after) == expect
    assert {(after.graph.edges[e]["kind"], after.graph.edges[e]["transport"],
             after.graph.edges[e]["capacity_Bps"]) for e in expect} == {("roce-400g", "roce", 50e9)}  # fmt: skip


def test_later_override_wins_and_routes_follow_capacities() -> None:
    """Two overrides of one link: the last one's value stays."""
    _, after = with_overrides([{"link": "n0.nic0<->leaf0.r0", "bandwidth": "100Gb/s"},
                               {"link": "n0.nic0<->leaf0.r0", "bandwidth": "300Gb/s"}])  # fmt: skip
    assert after.graph.edges["leaf0.r0", "n0.nic0"]["capacity_Bps"] == 37.5e9


def test_bandwidth_override_is_per_cable_on_a_multi_cable_edge(tmp_path: Path) -> None:
    """An edge of cables: 2 keeps two cables, each at the override's bandwidth: two links
    of 25 GB/s (and its untouched neighbour two of 12.5 GB/s)."""
    data = yaml.safe_load(DOC.read_text().split("```yaml\n")[4].split("```")[0])
    data["graph"]["edges"][2]["cables"] = 2
    data["overrides"] = [{"match": "a.nic<->sw0", "bandwidth": "200Gb/s"}]
    t = build(data)
    caps = {e: [float(t.capacity_Bps[i]) for i in t.link_ids[e]] for e in
            (("a.nic", "sw0"), ("a.nic", "sw1"))}  # fmt: skip
    assert caps == {("a.nic", "sw0"): [25e9, 25e9], ("a.nic", "sw1"): [12.5e9, 12.5e9]}


# --- NICs: count, affinity, mixed servers ------------------------------------------------


def parent(t: Topology, nic: str) -> str:
    (up,) = [v for v in t.graph.successors(nic) if t.graph.nodes[v].get("node") is not None]
    return str(up)


def test_nic_affinity_places_each_nic() -> None:
    """pcie<j>, gpu<i> (the GPU's switch) and host put NICs where they say."""
    node = {"gpus": 8, "fabric": "nvswitch", "pcie_switches": 4, "nics": 4, "nic": "ib-ndr",
            "nic_affinity": ["pcie3", "gpu2", "host", "gpu7"]}  # fmt: skip
    t = build({"name": "a", "gpu": "H100-SXM", "node": node})
    assert [parent(t, f"n0.nic{j}") for j in range(4)] == [
        "n0.pcie3", "n0.pcie1", "n0.host", "n0.pcie3"]  # fmt: skip
    node = {**node, "p2p": False, "nic_affinity": ["gpu2", "pcie0", "pcie1", "host"]}
    t = build({"name": "b", "gpu": "H100-SXM", "node": node})
    assert parent(t, "n0.nic0") == "n0.host"  # GPUs sit on the host without P2P


def test_default_affinity_is_the_even_spread() -> None:
    """Leaving nic_affinity out equals writing the even spread out."""
    data = preset("h100-ib-ndr", nodes=2)
    explicit = copy.deepcopy(data)
    explicit["node"]["nic_affinity"] = [f"pcie{j // 2}" for j in range(8)]
    same_network(build(data), build(explicit))


def test_affinity_moves_the_route_to_the_nearest_nic() -> None:
    """With every NIC on pcie0, GPU 7 leaves its server through pcie0: over NVLink to a
    GPU beside it (NCCL's PXN, the default), or through the host with PXN off."""
    data = preset("h100-ib-ndr", nodes=2)
    data["node"]["nic_affinity"] = ["pcie0"] * 8
    t = build(data)
    hops = path_nodes(t, t.route(t.gpus[7], t.gpus[15]))
    assert hops[:2] == ["n0.gpu7", "n0.nvswitch"] and hops[3] == "n0.pcie0"
    assert hops[2] in ("n0.gpu0", "n0.gpu1")
    data["network"]["pxn"] = False
    t = build(data)
    hops = path_nodes(t, t.route(t.gpus[7], t.gpus[15]))
    assert hops[:4] == ["n0.gpu7", "n0.pcie3", "n0.host", "n0.pcie0"]


def mixed() -> dict[str, Any]:
    data = preset("h100-ib-ndr", nodes=2)
    node = data.pop("node")
    data.pop("nodes")
    small = {**node, "nics": 4, "nic": {"kind": "ib-ndr", "bandwidth": "200Gb/s"}}
    data["servers"] = [{"count": 2, "node": small}, {"count": 3, "node": node}]
    return data


def test_mixed_servers_keep_their_own_nics_and_rates() -> None:
    """Servers are numbered group by group; each NIC<->leaf link runs at its NIC's rate."""
    t = build(mixed())
    assert (t.nodes, t.num_gpus) == (5, 40)
    nics = t.nics_per_node()
    assert [nics[k] for k in range(5)] == [4, 4, 8, 8, 8]
    g = t.graph
    assert g.edges["n0.nic3", "leaf0.r3"]["capacity_Bps"] == 25e9
    assert g.edges["n4.nic7", "leaf0.r7"]["capacity_Bps"] == 50e9
    assert (
        g.edges["n4.nic7", "leaf0.r7"]["capacity_Bps"]
        == g.edges["leaf0.r7", "n4.nic7"]["capacity_Bps"]
    )


def test_mixed_fabric_is_sized_for_the_fastest_nic_with_rails_for_the_most_nics() -> None:
    """Eight rails although the first group has four NICs; uplinks as the uniform build's."""
    t, ref = build(mixed()), load_topology("h100-ib-ndr", nodes=5)
    leaves = sorted(v for v, d in t.graph.nodes(data=True) if d["kind"] == "leaf")
    assert leaves == [f"leaf0.r{r}" for r in range(8)]
    up = {(u, v): d["capacity_Bps"] for u, v, d in t.graph.edges(data=True) if u.startswith("leaf")
          and v.startswith("spine")}  # fmt: skip
    assert up == {e: ref.graph.edges[e]["capacity_Bps"] for e in up}
    for src, dst in sample_pairs(t, 12):
        assert_shortest(t, src, dst)


def test_uniform_servers_list_equals_node_and_nodes() -> None:
    """servers: [{count: 3, node: X}] builds what nodes: 3, node: X builds."""
    data = preset("h100-ib-ndr", nodes=3)
    data["servers"] = [{"count": 3, "node": data.pop("node")}]
    data.pop("nodes")
    same_network(build(data), load_topology("h100-ib-ndr", nodes=3))


# --- explicit graphs -----------------------------------------------------------------------


def test_hand_written_graph_equals_the_preset_it_describes() -> None:
    """The 2-server h100-ib-ndr written out in full: same links, routes, collective times."""
    own = load_topology(str(REPO / "topologies/examples/h100-ib-ndr-2x-explicit.yaml"))
    ref = load_topology("h100-ib-ndr", nodes=2)
    same_network(own, ref)
    for s in ref.gpus:
        for d in ref.gpus:
            if s != d:
                assert path_nodes(own, own.route(s, d)) == path_nodes(ref, ref.route(s, d))
    for op, algo in (("all_reduce", "ring"), ("all_reduce", "auto"), ("all_to_all", "auto")):
        times = [simulate_collective(CollectiveSetup(t), op, 2**28, algorithm=algo).time_s
                 for t in (own, ref)]  # fmt: skip
        assert times[0] == times[1]


@pytest.mark.parametrize("name", preset_names())
def test_export_rebuilds_every_preset(name: str) -> None:
    """graph_document(t) loads back into the same graph, link for link, route for route."""
    nodes = 3 if load_spec(name).multi_node else None
    ref = load_topology(name, nodes=nodes)
    if ref.heterogeneous:  # an explicit graph has one gpu model: refused, never written wrong
        with pytest.raises(TopologyError, match="different GPU models"):
            graph_document(ref)
        return
    text = yaml.safe_dump(graph_document(ref), default_flow_style=None, sort_keys=False)
    own = build(yaml.safe_load(text))
    same_network(own, ref)
    assert own.links == ref.links


def test_export_writes_bundles_as_cables_and_odd_rates_inline() -> None:
    """A 2-cable spine bundle is `cables: 2`; a NIC at another rate than its kind's is
    written inline with its unit (it reloads to the same float)."""
    edges = graph_document(load_topology("h100-ib-ndr", nodes=2))["graph"]["edges"]
    spine = [e for e in edges if e["b"].startswith("spine")]
    assert {(e["link"], e["cables"]) for e in spine} == {("ib-ndr", 2)}
    data = preset("h100-ib-ndr", nodes=2)
    data["node"]["nic_bandwidth"] = "200Gb/s"
    edges = graph_document(build(data))["graph"]["edges"]
    nic = {str(e["link"]) for e in edges if e["b"].startswith("leaf")}
    assert nic == {str({"kind": "ib-ndr", "bandwidth": "200Gb/s", "latency": "0.5us",
                        "scope": "net", "overhead": format_time(1.5e-6 - 0.5e-6),
                        "transport": "ib"})}  # fmt: skip


def test_graph_ranks_go_server_by_server_in_listed_order() -> None:
    """GPUs listed out of server order still take ranks server-major."""
    nodes = [{"name": "y", "kind": "gpu", "server": 1}, {"name": "x", "kind": "gpu", "server": 0},
             {"name": "w", "kind": "gpu", "server": 1}, {"name": "v", "kind": "gpu", "server": 0},
             {"name": "sw", "kind": "switch"}]  # fmt: skip
    t = build({"name": "g", "gpu": "L40S",
               "graph": {"nodes": nodes, "edges": [{"a": "?", "b": "sw", "link": "pcie-gen4"}]}})  # fmt: skip
    assert t.gpus == ("x", "v", "y", "w") and (t.nodes, t.gpus_per_node) == (2, 2)
    assert [t.node_of(g) for g in t.gpus] == [0, 0, 1, 1]


def test_dragonfly_crosses_one_global_bundle_between_groups() -> None:
    """Minimal routes: group 0 to group 2 takes exactly one global (1.5 us) bundle."""
    t = load_topology(str(REPO / "topologies/examples/dragonfly-h100.yaml"))
    route = t.route(t.gpus[0], t.gpus[8 * 8])  # n00 (group 0) -> n08 (group 2)
    lat = [t.latency_s[i] for i in route]
    assert lat.count(1.5e-6) == 1
    assert [v for v in path_nodes(t, route) if v.startswith("g")] == ["g0.r0", "g0.r1", "g2.r0"]


def test_graph_edges_record_their_cables() -> None:
    """cables: k makes k links of the link's capacity each (ECMP choices of their own)."""
    t = load_topology(str(REPO / "topologies/examples/dragonfly-h100.yaml"))
    d = t.graph.edges["g0.r0", "g0.r1"]
    assert (d["cables"], d["capacity_Bps"]) == (16, 50e9)
    assert len(t.link_ids[("g0.r0", "g0.r1")]) == 16
    assert len(t.link_ids[("n00.nic0", "g0.r0")]) == 1


# --- errors: one line naming the problem ------------------------------------------------------


def tiny_graph() -> dict[str, Any]:
    return yaml.safe_load(doc_blocks()[3])


def edit(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(data)
    *parents, key = re.findall(r"[^.\[\]]+", path)
    where: Any = data
    for p in parents:
        where = where[int(p)] if p.isdigit() else where[p]
    if value is DELETE:
        del where[key]
    elif isinstance(where, list):
        where[int(key)] = value
    else:
        where[key] = value
    return data


DELETE = object()
FABRIC = preset("h100-ib-ndr", nodes=2)
NIC = "node.nic"
HALF_RATE_NIC = edit(FABRIC, NIC, {"kind": "ib-ndr", "bandwidth": "200Gb/s"})
MIXED = mixed()

# fmt: off
BAD = [
    # inline links
    (FABRIC, NIC, {"kind": "ib-ndr", "speed": "1Gb/s"},
     r"unknown key 'node\.nic\.speed'.*bandwidth"),
    (FABRIC, NIC, {"bandwidth": "400Gb/s", "transport": "ib"}, r"node\.nic: .*needs latency"),
    (FABRIC, NIC, {"bandwidth": "1Gb/s", "latency": "1us", "transport": "fc"},
     r"node\.nic\.transport.*'efa'"),
    (FABRIC, NIC, {"bandwidth": "400Gbs", "latency": "1us", "transport": "ib"},
     r"node\.nic\.bandwidth.*'400Gbs'"),
    (FABRIC, NIC, {"bandwidth": "0Gb/s", "latency": "1us", "transport": "ib"},
     r"node\.nic\.bandwidth"),
    (FABRIC, NIC, {"kind": "ib-ndrr"}, r"node\.nic\.kind.*'ib-ndrr'.*known"),
    (FABRIC, NIC, 400, r"node\.nic: expected a catalog link name or a mapping"),
    (FABRIC, "network.link", {"kind": "ib-ndr", "transport": "nvlink", "scope": "net"},
     r"network\.link\.scope.*nvlink"),
    (FABRIC, "node.nic_bandwidth", "200Gb/s", None),  # fine with a catalog nic: control
    # NICs and servers
    (FABRIC, "node.nic_affinity", ["pcie0"] * 7,
     r"node\.nic_affinity: one entry per NIC \(8\), got 7"),
    (FABRIC, "node.nic_affinity", ["pcie4"] * 8,
     r"node\.nic_affinity\[0\]: 'pcie4'.*pcie0\.\.pcie3"),
    (FABRIC, "node.nic_affinity", ["gpu0"] * 7 + ["nic1"], r"nic_affinity\[7\]: 'nic1'.*host"),
    (HALF_RATE_NIC, "node.nic_bandwidth", "100Gb/s",
     r"node\.nic_bandwidth: node\.nic gives a bandwidth already"),
    (MIXED, "servers[1].node.nics", 0, r"needs servers\[1\]\.node\.nics >= 1"),
    (MIXED, "servers[0].count", 0, r"servers\[0\]\.count: .*greater than or equal to 1"),
    (FABRIC, "servers", [{"count": 1, "node": {"gpus": 8}}],
     r"servers: give node .* or servers, not both"),
    # overrides
    (FABRIC, "overrides", [{"bandwidth": "1Gb/s"}], r"overrides\[0\]: give exactly one of link"),
    (FABRIC, "overrides", [{"link": "a<->b", "match": "a", "latency": "1us"}],
     r"overrides\[0\]: give exactly one"),
    (FABRIC, "overrides", [{"link": "n0.nic0<->leaf0.r0"}], r"overrides\[0\]: changes nothing"),
    (FABRIC, "overrides", [{"link": "n0.nic*<->leaf0.r0", "latency": "1us"}],
     r"overrides\[0\]\.link: .*'n0\.nic\*<->leaf0\.r0'"),
    (FABRIC, "overrides", [{"link": "n9.nic0<->leaf0.r0", "latency": "1us"}],
     r"overrides\[0\]\.link: unknown node 'n9\.nic0'"),
    (FABRIC, "overrides", [{"link": "n0.nic0<->leaf0.r1", "latency": "1us"}],
     r"overrides\[0\]\.link: no link between 'n0\.nic0' and 'leaf0\.r1'"),
    (FABRIC, "overrides", [{"match": "leaf*<->core*", "latency": "1us"}],
     r"overrides\[0\]\.match: 'leaf\*<->core\*' matches no link"),
    (FABRIC, "overrides", [{"match": "a<->b<->c", "latency": "1us"}], r"overrides\[0\]\.match"),
    (FABRIC, "overrides", [{"match": "spine*", "kind": "eth-9"}], r"overrides\[0\]\.kind.*'eth-9'"),
    (FABRIC, "overrides", [{"match": "spine*", "colour": "red"}],
     r"unknown key 'overrides\[0\]\.colour'"),
    # graphs
    (None, "graph.edges[0].b", "a.nic9", r"graph\.edges\[0\]\.b: unknown node 'a\.nic9'"),
    (None, "graph.nodes[0].server", DELETE, r"graph\.nodes\[0\] \('a\.gpu'\): a GPU needs server"),
    (None, "graph.edges[1]", {"a": "a.gpu", "b": "a.nic", "link": "pcie-gen4"},
     r"graph\.edges\[1\]: duplicate edge a\.gpu<->a\.nic \(also in graph\.edges\[0\]\).*cables"),
    (None, "graph.edges[1]", {"a": "a.nic", "b": "a.nic", "link": "pcie-gen4"},
     r"graph\.edges\[1\]: self-loop on 'a\.nic'"),
    (None, "graph.edges[1]", {"a": "sw0", "b": "sw1", "link": "pcie-gen4"},
     r"disconnected: no route"),
    (None, "graph.edges[2].b", "sw[23]", r"graph\.edges\[2\]\.b: glob 'sw\[23\]' matches no node"),
    (None, "graph.nodes[1].name", "a.gpu",
     r"graph\.nodes\[1\]: duplicate node 'a\.gpu' \(also graph\.nodes\[0\]\)"),
    (None, "graph.nodes[4].name", "sw*", r"graph\.nodes\[4\]\.name: 'sw\*' may not contain"),
    (None, "graph.nodes[3].server", 5, r"servers must be numbered 0\.\.2 \(server 2 has no node"),
    (None, "graph.nodes[2].kind", "nic", r"graph\.nodes: server 1 has no GPU"),
    (None, "graph.nodes[4].kind", "router", r"graph\.nodes\[4\]\.kind: .*'switch'.*'router'"),
    (None, "graph.nodes[4].server", 0, r"graph\.nodes\[4\]\.server: a switch is a fabric switch"),
    (None, "graph.edges[0].cables", 0, r"graph\.edges\[0\]\.cables"),
    (None, "nodes", 3, r"nodes: 3 but the file describes 2 servers"),
    (None, "graph.nodes", [{"name": "sw", "kind": "switch"}], r"graph\.nodes: no GPU"),
    (None, "graph", DELETE, r"missing required key 'node' \(or servers, or graph\)"),
]

# fmt: on


@pytest.mark.parametrize(("base", "path", "value", "message"), BAD,
                         ids=[f"{i}-{b[1]}" for i, b in enumerate(BAD)])  # fmt: skip
def test_bad_inputs_give_one_line_errors(
    base: dict[str, Any] | None, path: str, value: Any, message: str | None
) -> None:
    """Each mistake is refused with one line naming the key or value (None: accepted)."""
    data = edit(base if base is not None else tiny_graph(), path, value)
    if message is None:
        build(data)
        return
    with pytest.raises(ClusterSimError, match=message) as e:
        build(data)
    assert "\n" not in str(e.value)


def test_unequal_gpu_counts_are_refused_in_servers_and_graphs() -> None:
    """Every server holds the same GPU count (mixed sizes are a later feature)."""
    data = mixed()
    data["servers"][1]["node"]["gpus"] = 4
    with pytest.raises(TopologyError, match=r"servers\[1\]\.node\.gpus: .*same GPU count"):
        build(data)
    g = tiny_graph()
    g["graph"]["nodes"].append({"name": "b.gpu2", "kind": "gpu", "server": 1})
    g["graph"]["edges"].append({"a": "b.gpu2", "b": "b.nic", "link": "pcie-gen4"})
    with pytest.raises(TopologyError, match=r"server 0 has 1, server 1 has 2"):
        build(g)


def test_graph_over_built_servers_may_not_redefine_them() -> None:
    """With node given, graph nodes are the fabric: no server index, no reused names."""
    data = preset("dgx-h100")
    data["graph"] = {"nodes": [{"name": "x", "kind": "nic", "server": 0}],
                     "edges": [{"a": "x", "b": "n0.host", "link": "pcie-gen5"}]}  # fmt: skip
    with pytest.raises(TopologyError, match=r"graph\.nodes\[0\]\.server: servers come from"):
        build(data)
    data["graph"]["nodes"] = [{"name": "n0.host", "kind": "switch"}]
    with pytest.raises(TopologyError, match=r"'n0\.host' is already a part of a built server"):
        build(data)
    data["graph"] = {"edges": [{"a": "n0.gpu0", "b": "n0.pcie0", "link": "pcie-gen5"}]}
    with pytest.raises(TopologyError, match=r"duplicate edge .* \(also in a built server\)"):
        build(data)


@pytest.mark.parametrize("example", ["mixed-racks", "h100-ib-ndr-2x-explicit"])
def test_nodes_override_is_refused_where_servers_are_written_out(example: str) -> None:
    """--nodes resizes node/nodes files only; the message says why."""
    with pytest.raises(TopologyError, match=r"written server by server.*--nodes applies only"):
        load_topology(str(REPO / "topologies/examples" / f"{example}.yaml"), nodes=4)


# --- CLI -------------------------------------------------------------------------------------


def test_cli_export_prints_a_file_that_builds(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """clustersim topologies --export NAME --nodes N prints a loadable graph file."""
    assert main(["topologies", "--export", "h100-roce-400g", "--nodes", "2"]) == 0
    f = tmp_path / "mine.yaml"
    f.write_text(capsys.readouterr().out)
    same_network(load_topology(str(f)), load_topology("h100-roce-400g", nodes=2))


@pytest.mark.parametrize(("argv", "message"), [
    (["topologies", "--nodes", "2"], "--nodes: only with --show or --export"),
    (["topologies", "--export", "mixed-racks-not-here"], "unknown topology preset"),
])  # fmt: skip
def test_cli_errors_are_one_line_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """User mistakes: exit status 2, one line on stderr."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
