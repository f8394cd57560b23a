"""Matching across ranks: the k-th collective of a group, sends to receives; groups and sizes.

In memory (no files), so these run without protobuf too.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.chakra import (
    CHAKRA_TYPES,
    CLUSTERSIM_OPS,
    COLLECTIVE_TYPES,
    IOInfo,
    Metadata,
    Node,
    Trace,
    TraceSet,
    comm_groups_json,
    comm_size,
    groups_from_metadata,
    match_collectives,
    match_p2p,
    op_bytes,
    parse_comm_groups,
    read_comm_groups,
)
from sim.errors import ConfigError


def coll(
    node_id: int,
    kind: str = "ALL_REDUCE",
    size: int = 1024,
    pg: str | None = None,
    deps: tuple[int, ...] = (),
) -> Node:
    return Node(
        node_id,
        f"c{node_id}",
        "COMM_COLL_NODE",
        data_deps=deps,
        comm_type=kind,
        comm_bytes=size,
        pg_name=pg,
    )


def comp(node_id: int, deps: tuple[int, ...] = ()) -> Node:
    return Node(node_id, f"k{node_id}", "COMP_NODE", data_deps=deps, duration_micros=10)


def traceset(*ranks: tuple[Node, ...]) -> TraceSet:
    return TraceSet("mem/w", tuple(Trace(Metadata("0.0.4"), nodes) for nodes in ranks))


def one_line(e: pytest.ExceptionInfo[BaseException]) -> str:
    assert "\n" not in str(e.value)
    return str(e.value)


# -- collectives ---------------------------------------------------------------------------


def test_kth_collective_of_a_group_is_one_collective() -> None:
    """Ids differ between ranks; order within each group decides (TP and DP groups here)."""
    r0 = (comp(1), coll(2, pg="1", deps=(1,)), coll(3, "REDUCE_SCATTER", 4096, pg="2", deps=(2,)))
    r1 = (comp(7), coll(8, pg="1", deps=(7,)), coll(9, "REDUCE_SCATTER", 4096, pg="3", deps=(8,)))
    r2 = (comp(1), coll(5, pg="4"), coll(6, "REDUCE_SCATTER", 4096, pg="2", deps=(5,)))
    r3 = (comp(1), coll(5, pg="4"), coll(6, "REDUCE_SCATTER", 4096, pg="3", deps=(5,)))
    groups = {"1": (0, 1), "4": (2, 3), "2": (0, 2), "3": (1, 3)}
    got = match_collectives(traceset(r0, r1, r2, r3), groups)
    assert [(c.group, c.ranks, c.index, c.comm_type, c.node_ids) for c in got] == [
        ("1", (0, 1), 0, "ALL_REDUCE", (2, 8)),
        ("2", (0, 2), 0, "REDUCE_SCATTER", (3, 6)),
        ("3", (1, 3), 0, "REDUCE_SCATTER", (9, 6)),
        ("4", (2, 3), 0, "ALL_REDUCE", (5, 5)),
    ]
    inferred = match_collectives(traceset(r0, r1, r2, r3))  # members from who uses the group
    assert inferred == got


def test_the_default_group_is_every_rank_whatever_its_spelling() -> None:
    """No pg_name, "" and "0" all mean every rank (ASTRA-sim's default group)."""
    ts = traceset((coll(0),), (coll(0, pg=""),), (coll(0, pg="0"),))
    (c,) = match_collectives(ts)
    assert (c.group, c.ranks, c.node_ids) == ("", (0, 1, 2), (0, 0, 0))


def test_order_follows_dependencies_not_file_order() -> None:
    """A rank whose file lists its second collective first still pairs by dependency order."""
    r0 = (coll(1, size=10), coll(2, size=20, deps=(1,)))
    r1 = (coll(2, size=20, deps=(1,)), coll(1, size=10))
    got = match_collectives(traceset(r0, r1))
    assert [(c.comm_bytes, c.node_ids) for c in got] == [(10, (1, 1)), (20, (2, 2))]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(list(COLLECTIVE_TYPES)), min_size=1, max_size=6), st.integers(1, 6))
def test_identical_ranks_match_one_to_one(kinds: list[str], n: int) -> None:
    """n copies of one chain of collectives give len(chain) collectives over every rank."""
    chain = tuple(coll(i, k, 8 * (i + 1), deps=(i - 1,) if i else ()) for i, k in enumerate(kinds))
    got = match_collectives(traceset(*[chain] * n))
    assert [(c.index, c.comm_type, c.comm_bytes, c.ranks) for c in got] == [
        (i, k, 8 * (i + 1), tuple(range(n))) for i, k in enumerate(kinds)
    ]


@pytest.mark.parametrize(
    "ranks, groups, match",
    [
        (
            ((coll(0),), (coll(0, size=2048),)),
            None,
            r"mem/w\.1\.et: node 0 'c0': collective #0 of the group of every rank is ALL_REDUCE "
            r"of 2048 B but on mem/w\.0\.et \(node 0 'c0'\) ALL_REDUCE of 1024 B",
        ),
        (
            ((coll(0),), (coll(0, "ALL_GATHER"),)),
            None,
            r"collective #0 of the group of every rank is ALL_GATHER of 1024 B but .* ALL_REDUCE",
        ),
        (
            ((coll(0), coll(1, deps=(0,))), (coll(0),)),
            None,
            r"mem/w\.1\.et: 1 collectives of the group of every rank but mem/w\.0\.et has 2 "
            r"\(collective #1 there: node 1 'c1', ALL_REDUCE of 1024 B\)",
        ),
        (
            ((coll(0, pg="1"),), (comp(0),), (coll(0, pg="1"),)),
            {"1": (0, 1, 2)},
            r"mem/w\.1\.et: 0 collectives of group '1' but mem/w\.0\.et has 1",
        ),
        (
            ((coll(0, pg="1"),), (coll(0, pg="1"),)),
            {"1": (0,)},
            r"mem/w\.1\.et: uses group '1' but is not one of its members \[0\]",
        ),
        (
            ((coll(0, pg="5"),), (coll(0, pg="5"),)),
            {"1": (0, 1)},
            r"pg_name '5': not a group of the communicator-group file \(groups: 1\)",
        ),
        (
            ((coll(0, pg="1"),), (coll(0, pg="1"),)),
            {"1": (0, 1, 7)},
            r"group '1': member rank 7 but only 2 rank files",
        ),
        (
            ((Node(0, "x", "COMM_COLL_NODE", comm_bytes=8),),),
            None,
            r"mem/w\.0\.et: node 0 'x': COMM_COLL_NODE without the attribute comm_type",
        ),
        (
            ((Node(0, "x", "COMM_COLL_NODE", comm_type="BARRIER"),),),
            None,
            r"mem/w\.0\.et: node 0 'x': COMM_COLL_NODE without the attribute comm_size",
        ),
        (
            ((Node(0, "x", "COMM_COLL_NODE", is_cpu_op=True, comm_type="BARRIER", comm_bytes=0),),),
            None,
            r"node 0 'x': is_cpu_op is true on a COMM_COLL_NODE \(ASTRA-sim refuses it\)",
        ),
        (
            ((coll(0, deps=(1,)), coll(1, deps=(0,))),),
            None,
            r"mem/w\.0\.et: dependency cycle",
        ),
    ],
    ids=[
        "size",
        "type",
        "count",
        "member-without",
        "not-member",
        "unknown-group",
        "beyond-ranks",
        "no-type",
        "no-size",
        "cpu",
        "cycle",
    ],
)
def test_collective_refusals(
    ranks: tuple[tuple[Node, ...], ...], groups: dict[str, tuple[int, ...]] | None, match: str
) -> None:
    with pytest.raises(ConfigError, match=match) as e:
        match_collectives(traceset(*ranks), groups)
    one_line(e)


# -- point to point ------------------------------------------------------------------------


def send(
    i: int, dst: int, tag: int, size: int = 64, src: int | None = None, deps: tuple[int, ...] = ()
) -> Node:
    return Node(
        i,
        f"s{i}",
        "COMM_SEND_NODE",
        data_deps=deps,
        comm_src=src,
        comm_dst=dst,
        comm_tag=tag,
        comm_bytes=size,
    )


def recv(
    i: int, src: int, tag: int, size: int = 64, dst: int | None = None, deps: tuple[int, ...] = ()
) -> Node:
    return Node(
        i,
        f"r{i}",
        "COMM_RECV_NODE",
        data_deps=deps,
        comm_src=src,
        comm_dst=dst,
        comm_tag=tag,
        comm_bytes=size,
    )


def test_sends_pair_with_receives_by_peers_tag_and_order() -> None:
    """A pipeline: 0 -> 1 twice with tag 0 (sizes 64 then 128), 1 -> 0 with tag 1."""
    r0 = (send(1, 1, 0), send(2, 1, 0, 128, src=0, deps=(1,)), recv(3, 1, 1, deps=(2,)))
    r1 = (recv(10, 0, 0), recv(11, 0, 0, 128, dst=1, deps=(10,)), send(12, 0, 1, deps=(11,)))
    got = match_p2p(traceset(r0, r1))
    assert [(p.src, p.dst, p.tag, p.index, p.comm_bytes, p.send_id, p.recv_id) for p in got] == [
        (0, 1, 0, 0, 64, 1, 10),
        (0, 1, 0, 1, 128, 2, 11),
        (1, 0, 1, 0, 64, 12, 3),
    ]


@pytest.mark.parametrize(
    "ranks, match",
    [
        (
            ((send(1, 1, 0),), ()),
            r"mem/w\.0\.et: node 1 's1': 1 sends from rank 0 to rank 1 with tag 0 but 0",
        ),
        (
            ((), (recv(1, 0, 5),)),
            r"mem/w\.1\.et: node 1 'r1': 0 sends from rank 0 to rank 1 with tag 5 but 1",
        ),
        (
            ((send(1, 1, 0),), (recv(1, 0, 1),)),
            r"1 sends from rank 0 to rank 1 with tag 0 but 0 receives",
        ),
        (
            ((send(1, 1, 0, 64),), (recv(2, 0, 0, 32),)),
            r"mem/w\.1\.et: node 2 'r2': receives 32 B but mem/w\.0\.et node 1 's1' sends 64 B",
        ),
        (
            ((send(1, 1, 0, src=1),), ()),
            r"mem/w\.0\.et: node 1 's1': comm_src 1 but the file is rank 0's",
        ),
        (
            ((), (recv(1, 0, 0, dst=0),)),
            r"mem/w\.1\.et: node 1 'r1': comm_dst 0 but the file is rank 1's",
        ),
        (((send(1, 0, 0),), ()), r"node 1 's1': comm_dst 0 is not another rank \(ranks 0..1\)"),
        (((send(1, 2, 0),), ()), r"node 1 's1': comm_dst 2 is not another rank"),
        (((), (recv(1, 9, 0),)), r"node 1 'r1': comm_src 9 is not another rank"),
        (
            ((Node(1, "s", "COMM_SEND_NODE", comm_tag=0, comm_bytes=8),), ()),
            r"node 1 's': COMM_SEND_NODE without the attribute comm_dst",
        ),
        (
            ((Node(1, "s", "COMM_SEND_NODE", comm_dst=1, comm_bytes=8),), ()),
            r"node 1 's': COMM_SEND_NODE without the attribute comm_tag",
        ),
        (
            ((), (Node(1, "r", "COMM_RECV_NODE", comm_src=0, comm_tag=0),)),
            r"node 1 'r': COMM_RECV_NODE without the attribute comm_size",
        ),
    ],
    ids=[
        "unreceived",
        "unsent",
        "tag",
        "size",
        "send-src",
        "recv-dst",
        "self",
        "beyond",
        "recv-beyond",
        "no-dst",
        "no-tag",
        "no-size",
    ],
)
def test_p2p_refusals(ranks: tuple[tuple[Node, ...], ...], match: str) -> None:
    with pytest.raises(ConfigError, match=match) as e:
        match_p2p(traceset(*ranks))
    one_line(e)


# -- communicator groups and op sizes --------------------------------------------------------


def test_comm_group_file_round_trip(tmp_path: Path) -> None:
    groups = {"10": (9, 8), "2": (3, 1), "1": (0,)}
    text = comm_groups_json(groups)
    assert text == '{"1": [0], "2": [1, 3], "10": [8, 9]}'
    path = tmp_path / "g.json"
    path.write_text(text)
    assert read_comm_groups(path) == {"1": (0,), "2": (1, 3), "10": (8, 9)}


@pytest.mark.parametrize(
    "text, match",
    [
        ("[1, 2]", r"g\.json: a communicator-group file is a JSON object of id: \[ranks\]"),
        ('{"1": [0]', r"g\.json: not valid JSON \(line 1"),
        ('{"1": [' + "9" * 5000 + "]}", r"g\.json: cannot read a value: .*4300"),
        ('{"1": [NaN]}', r"g\.json: NaN is not a JSON number"),
        ('{"x": [0]}', r'g\.json: group "x": ids are integers >= 1'),
        ('{"01": [0]}', r'group "01": ids are integers >= 1'),
        (
            '{"1": []}',
            r'group "1": members must be a non-empty list of distinct ranks >= 0, got \[\]',
        ),
        ('{"1": [0, 0]}', r"distinct ranks >= 0, got \[0, 0\]"),
        ('{"1": [-1]}', r"got \[-1\]"),
        ('{"1": [true]}', r"got \[true\]"),
        ('{"1": [0], "1": [1]}', r"g\.json: duplicate key '1'"),
    ],
)
def test_comm_group_file_refusals(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_comm_groups(text, "g.json")


def test_op_names_and_sizes_both_ways() -> None:
    """comm_size is clustersim's nccl-tests size except for all-gather (one rank's share)."""
    assert set(CLUSTERSIM_OPS) <= set(COLLECTIVE_TYPES)
    assert all(CHAKRA_TYPES[op] == t for t, op in CLUSTERSIM_OPS.items())
    for kind, op in CLUSTERSIM_OPS.items():
        for n in (1, 2, 8, 16):
            assert op_bytes(kind, comm_size(op, 64 * n, n), n) == 64 * n
    assert comm_size("all_gather", 2**26, 16) == 2**22
    assert op_bytes("REDUCE_SCATTER", 2**26, 16) == 2**26


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: op_bytes("BARRIER", 0, 4), r"comm_type BARRIER has no clustersim collective"),
        (lambda: op_bytes("ALL_REDUCE", 8, 0), r"at least one rank, got 0"),
        (lambda: comm_size("send_recv", 8, 2), r"op 'send_recv' has no Chakra collective type"),
        (lambda: comm_size("all_gather", 10, 4), r"all_gather of 10 B on 4 ranks"),
    ],
)
def test_op_refusals(call: Callable[[], int], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        call()


def pg_node(values: str, node_id: int = 0) -> Node:
    """A METADATA_NODE as Chakra's PyTorch converter writes process groups (the record's
    inputs are ``str()`` of PyTorch's one-string list)."""
    return Node(node_id, "## process_group:init ##", "METADATA_NODE", inputs=IOInfo(values))


PG = (
    "['["
    '{"pg_name": "0", "pg_desc": "default_pg", "ranks": [], "group_size": 4}, '
    '{"pg_name": "1", "pg_desc": "tp", "ranks": [1, 0], "group_size": 2}, '
    '{"pg_name": "2", "pg_desc": "tp", "ranks": [2, 3], "group_size": 2}'
    "]']"
)


def test_groups_from_pytorch_process_group_records() -> None:
    """As ASTRA-sim reads them: empty ranks is every rank (left out), members sorted."""
    ts = traceset(*[(pg_node(PG), coll(1, pg="1" if r < 2 else "2")) for r in range(4)])
    groups = groups_from_metadata(ts)
    assert groups == {"1": (0, 1), "2": (2, 3)}
    assert [(c.group, c.ranks) for c in match_collectives(ts, groups)] == [
        ("1", (0, 1)),
        ("2", (2, 3)),
    ]


@pytest.mark.parametrize(
    "values, match",
    [
        (
            '[\'{"pg_name": "1"}\']',
            r"mem/w\.0\.et: node 0 '## process_group:init ##': not a process-group record",
        ),
        ("['[{\"ranks\": [0]}]']", r"not a process-group record \('pg_name'\)"),
        ('[\'[{"pg_name": "1", "ranks": [-1]}]\']', r"ranks of '1' must be integers >= 0"),
        ('[\'[{"pg_name": 1, "ranks": []}]\']', r"pg_name must be a string"),
        ("not json", r"not a process-group record"),
        ("['[" + "9" * 5000 + "]']", r"not a process-group record \(its JSON: cannot read a value"),
    ],
)
def test_process_group_records_that_do_not_parse(values: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        groups_from_metadata(traceset((pg_node(values),)))


def test_a_group_defined_twice_differently_is_refused() -> None:
    other = PG.replace("[1, 0]", "[1, 2]")
    with pytest.raises(
        ConfigError, match=r"mem/w\.1\.et: .*pg_name '1' has ranks \[1, 2\] here but \[0, 1\]"
    ):
        groups_from_metadata(traceset((pg_node(PG),), (pg_node(other),), (), ()))


# -- the package's public names and its documentation -------------------------------------

PINNED = [
    "CHAKRA_TYPES", "CLUSTERSIM_OPS", "COLLECTIVE_TYPES", "KNOWN_ATTRS", "MAX_TRACE_BYTES",
    "NODE_TYPES", "Attr", "Collective", "IOInfo", "Metadata", "Node", "PointToPoint", "Trace",
    "TraceSet", "check_trace", "comm_groups_json", "comm_size", "decode_trace", "encode_trace",
    "group_key", "groups_from_metadata", "match_collectives", "match_p2p", "op_bytes",
    "parse_comm_groups", "rank_files", "read_comm_groups", "read_trace", "read_traces",
    "topological_order", "write_trace", "write_traces",
]  # fmt: skip


def test_public_names_are_pinned() -> None:
    import sim.chakra

    assert sorted(sim.chakra.__all__) == sorted(PINNED)
    assert all(hasattr(sim.chakra, name) for name in PINNED)


def test_the_doc_names_only_what_exists() -> None:
    """docs/chakra.md: every sim.chakra name and repository path it quotes exists."""
    import re

    import sim.chakra

    repo = Path(__file__).resolve().parents[1]
    doc = (repo / "docs" / "chakra.md").read_text()
    quoted = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_.]*)`", doc))
    ours = {q.removeprefix("sim.chakra.") for q in quoted if q.startswith("sim.chakra.")}
    for name in ours | {q for q in quoted if q in PINNED}:
        assert hasattr(sim.chakra, name), name
    ours_paths = r"`((?:sim/|benchmarks/|docs/|tests/test_chakra)[\w/.]*\.(?:py|proto|md))`"
    for path in re.findall(ours_paths, doc):
        assert (repo / path).is_file(), path
    assert {"read_traces", "match_collectives", "groups_from_metadata", "op_bytes"} <= quoted | ours
