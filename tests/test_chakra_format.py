"""The Chakra ET format: schema, framing, round trips, real bytes, and every refusal.

Reference bytes are those of ASTRA-sim's own microbenchmark trace
``examples/workload/microbenchmarks/all_reduce/8npus_1MB/all_reduce.3.et`` at
github.com/astra-sim/astra-sim commit 518bd513ae110428cd62eb60efc0f3993fd53c70 (83 bytes,
written by its ``generator_scripts/all_reduce.py`` with Chakra's generated classes).
"""

from __future__ import annotations

import gzip
import io
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.chakra import (
    COLLECTIVE_TYPES,
    KNOWN_ATTRS,
    NODE_TYPES,
    Attr,
    IOInfo,
    Metadata,
    Node,
    Trace,
    decode_trace,
    encode_trace,
    read_trace,
    write_trace,
)
from sim.chakra.schema import ATTR_KINDS, load_schema, parse_proto
from sim.chakra.stream import encode_varint, read_bounded, split_frames
from sim.errors import ClusterSimError, ConfigError, MissingExtraError

pb = pytest.importorskip(
    "google.protobuf", reason="Chakra traces need protobuf: pip install 'clustersim[chakra]'"
)
from sim.chakra.messages import message_classes  # noqa: E402
from tests.chakra_protobuf import parse_length_prefixed, serialize_length_prefixed  # noqa: E402

#: ASTRA-sim's all_reduce/8npus_1MB/all_reduce.3.et (see the module docstring).
ASTRA_ALL_REDUCE_3 = bytes.fromhex(
    "070a05302e302e344a0803121461"
    "6c6c5f7265647563655f386e7075735f314d4218075"
    "20e0a0969735f6370755f6f70d80100520d0a09636f"
    "6d6d5f747970654800520f0a09636f6d6d5f73697a"
    "6548808040"
)


def one_line(e: pytest.ExceptionInfo[BaseException]) -> str:
    text = str(e.value)
    assert "\n" not in text, text
    return text


# -- the schema ----------------------------------------------------------------------------


def test_schema_field_numbers_are_chakras() -> None:
    """Field numbers and enum values are the format: spot-check them against et_def.proto."""
    s = load_schema()
    node = {f.name: (f.number, f.type, f.repeated) for f in s.messages["Node"].fields}
    assert node == {
        "id": (1, "uint64", False),
        "name": (2, "string", False),
        "type": (3, "NodeType", False),
        "ctrl_deps": (4, "uint64", True),
        "data_deps": (5, "uint64", True),
        "start_time_micros": (6, "uint64", False),
        "duration_micros": (7, "uint64", False),
        "inputs": (8, "IOInfo", False),
        "outputs": (9, "IOInfo", False),
        "attr": (10, "AttributeProto", True),
    }
    attr = s.messages["AttributeProto"]
    assert [(f.name, f.number) for f in attr.fields[:4]] == [
        ("name", 1),
        ("doc_string", 2),
        ("double_val", 3),
        ("double_list", 4),
    ]
    assert attr.field("bool_val").number == 27 and attr.field("bytes_list").number == 32
    assert len(ATTR_KINDS) == 30 and all(f.oneof == "value" for f in attr.fields[2:])
    assert list(NODE_TYPES.values()) == list(range(8))
    assert list(COLLECTIVE_TYPES.values()) == list(range(10))
    assert COLLECTIVE_TYPES["REDUCE_SCATTER"] == 7 and NODE_TYPES["COMP_NODE"] == 4


def test_runtime_classes_follow_the_schema() -> None:
    """The classes protobuf builds from the shipped schema have the same numbers."""
    m = message_classes()
    fields = m.Node.DESCRIPTOR.fields_by_name
    assert {name: f.number for name, f in fields.items()} == {
        f.name: f.number for f in load_schema().messages["Node"].fields
    }
    assert m.Node.DESCRIPTOR.full_name == "ChakraProtoMsg.Node"
    # proto3 packs repeated scalars: field 5, length-delimited, 2 bytes, then 1 and 2.
    assert m.Node(data_deps=[1, 2]).SerializeToString() == bytes([0x2A, 2, 1, 2])


@pytest.mark.parametrize(
    "text, match",
    [
        ('syntax = "proto3"; package P; message M { int32 a = 1; int32 b = 1; }', "repeats"),
        ('syntax = "proto3"; package P; message M { Foo a = 1; }', "unknown type 'Foo'"),
        ('syntax = "proto3"; package P; enum E { A = 1; }', "start with a value 0"),
        ('syntax = "proto3"; package P; service S {}', "expected 'message' or 'enum'"),
        ('syntax = "proto3"; package P; message M { int32 a = x; }', "expected a number"),
        ('syntax = "proto3"; package P; message M { oneof v { repeated int32 a = 1; } }', "oneof"),
        ('syntax = "proto3"; package P; message M { int32 a = 1 }', "expected ';'"),
    ],
)
def test_schema_parser_refuses_what_it_cannot_read(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_proto(text)


# -- round trips and real bytes --------------------------------------------------------------

_ELEMENTS: dict[str, st.SearchStrategy[Any]] = {
    "double": st.floats(allow_nan=False),
    "float": st.floats(width=32, allow_nan=False),
    "int32": st.integers(-(2**31), 2**31 - 1),
    "int64": st.integers(-(2**63), 2**63 - 1),
    "uint32": st.integers(0, 2**32 - 1),
    "uint64": st.integers(0, 2**64 - 1),
    "sint32": st.integers(-(2**31), 2**31 - 1),
    "sint64": st.integers(-(2**63), 2**63 - 1),
    "fixed32": st.integers(0, 2**32 - 1),
    "fixed64": st.integers(0, 2**64 - 1),
    "sfixed32": st.integers(-(2**31), 2**31 - 1),
    "sfixed64": st.integers(-(2**63), 2**63 - 1),
    "bool": st.booleans(),
    "string": st.text(st.characters(codec="utf-8"), max_size=12),
    "bytes": st.binary(max_size=12),
}
_NAMES = st.text(st.characters(codec="utf-8"), max_size=10).filter(lambda n: n not in KNOWN_ATTRS)


@st.composite
def attrs(draw: st.DrawFn) -> Attr:
    kind = draw(st.sampled_from([*ATTR_KINDS, None]))
    if kind is None:
        return Attr(draw(_NAMES), None, None, draw(_ELEMENTS["string"]))
    element = _ELEMENTS[ATTR_KINDS[kind]]
    value = draw(st.lists(element, max_size=4).map(tuple) if kind.endswith("_list") else element)
    return Attr(draw(_NAMES), kind, value, draw(_ELEMENTS["string"]))


_IO = st.none() | st.builds(IOInfo, _ELEMENTS["string"], _ELEMENTS["string"], _ELEMENTS["string"])
_U31 = st.none() | st.integers(0, 2**31 - 1)


@st.composite
def traces(draw: st.DrawFn) -> Trace:
    """An acyclic trace: ids distinct, dependencies on earlier nodes, file order shuffled."""
    ids = draw(st.lists(st.integers(0, 2**64 - 1), unique=True, max_size=8))
    nodes = []
    for i, node_id in enumerate(ids):
        earlier = st.lists(st.sampled_from(ids[:i]), max_size=3).map(tuple) if i else st.just(())
        nodes.append(
            Node(
                id=node_id,
                name=draw(_ELEMENTS["string"]),
                type=draw(st.sampled_from(list(NODE_TYPES))),
                data_deps=draw(earlier),
                ctrl_deps=draw(earlier),
                start_time_micros=draw(_ELEMENTS["uint64"]),
                duration_micros=draw(_ELEMENTS["uint64"]),
                inputs=draw(_IO),
                outputs=draw(_IO),
                is_cpu_op=draw(st.none() | st.booleans()),
                comm_type=draw(st.none() | st.sampled_from(list(COLLECTIVE_TYPES))),
                comm_bytes=draw(st.none() | st.integers(0, 2**63 - 1)),
                comm_src=draw(_U31),
                comm_dst=draw(_U31),
                comm_tag=draw(_U31),
                pg_name=draw(st.none() | _ELEMENTS["string"]),
                attrs=tuple(draw(st.lists(attrs(), max_size=3))),
            )
        )
    order = draw(st.permutations(nodes))
    meta = Metadata(draw(_ELEMENTS["string"]), tuple(draw(st.lists(attrs(), max_size=3))))
    return Trace(meta, tuple(order))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces())
def test_write_then_read_is_identity(trace: Trace) -> None:
    """Every trace the model can hold comes back equal from its bytes."""
    assert decode_trace(encode_trace(trace, "t.0.et"), "t.0.et") == trace


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces())
def test_bytes_are_protobufs_own_length_prefixed_encoding(trace: Trace) -> None:
    """protobuf's own parse and re-serialisation of our file gives the same bytes."""
    data = encode_trace(trace, "t.0.et")
    m = message_classes()
    stream, again = io.BytesIO(data), io.BytesIO()
    serialize_length_prefixed(parse_length_prefixed(m.GlobalMetadata, stream), again)
    while stream.tell() < len(data):
        serialize_length_prefixed(parse_length_prefixed(m.Node, stream), again)
    assert again.getvalue() == data


def test_bytes_match_protobufs_encoder_for_a_hand_built_message() -> None:
    """A node with every field, built directly with protobuf, is the same bytes as ours."""
    m = message_classes()
    ref = io.BytesIO()
    serialize_length_prefixed(m.GlobalMetadata(version="1.0.0"), ref)
    msg = m.Node(id=7, name="grad", type=7, ctrl_deps=[5], data_deps=[2, 3])
    msg.start_time_micros, msg.duration_micros = 10, 250
    msg.inputs.values, msg.inputs.shapes, msg.inputs.types = "[1]", "[[4]]", "[Tensor(float)]"
    msg.outputs.SetInParent()
    msg.attr.add(name="is_cpu_op", bool_val=False)
    msg.attr.add(name="comm_type", int64_val=COLLECTIVE_TYPES["REDUCE_SCATTER"])
    msg.attr.add(name="comm_size", int64_val=2**26)
    msg.attr.add(name="pg_name", string_val="3")
    msg.attr.add(name="involved_dim").bool_list.values.extend([True, False])
    msg.attr.add(name="stream", int64_val=7, doc_string="cuda stream")
    serialize_length_prefixed(msg, ref)
    for i in (2, 3, 5):
        serialize_length_prefixed(m.Node(id=i, type=4, duration_micros=i), ref)
    ours = Trace(
        Metadata("1.0.0"),
        (
            Node(
                7,
                "grad",
                "COMM_COLL_NODE",
                data_deps=(2, 3),
                ctrl_deps=(5,),
                start_time_micros=10,
                duration_micros=250,
                inputs=IOInfo("[1]", "[[4]]", "[Tensor(float)]"),
                outputs=IOInfo(),
                is_cpu_op=False,
                comm_type="REDUCE_SCATTER",
                comm_bytes=2**26,
                pg_name="3",
                attrs=(
                    Attr("involved_dim", "bool_list", (True, False)),
                    Attr("stream", "int64_val", 7, "cuda stream"),
                ),
            ),
            *(Node(i, "", "COMP_NODE", duration_micros=i) for i in (2, 3, 5)),
        ),
    )
    assert encode_trace(ours, "t.0.et") == ref.getvalue()
    assert decode_trace(ref.getvalue(), "t.0.et") == ours


def test_reads_astra_sims_own_microbenchmark_file() -> None:
    """ASTRA-sim's all_reduce.3.et: version 0.0.4, one all-reduce of 1 MiB, node id 3."""
    trace = decode_trace(ASTRA_ALL_REDUCE_3, "all_reduce.3.et")
    assert trace.metadata == Metadata("0.0.4")
    assert trace.nodes == (
        Node(
            3,
            "all_reduce_8npus_1MB",
            "COMM_COLL_NODE",
            is_cpu_op=False,
            comm_type="ALL_REDUCE",
            comm_bytes=2**20,
        ),
    )
    assert encode_trace(trace, "all_reduce.3.et") == ASTRA_ALL_REDUCE_3


def test_gzip_compressed_files_are_read(tmp_path: Path) -> None:
    """Chakra's first readers accepted gzip-compressed ETs; so does read_trace."""
    path = tmp_path / "ar.3.et"
    path.write_bytes(gzip.compress(ASTRA_ALL_REDUCE_3, mtime=0))
    assert read_trace(path).nodes[0].comm_bytes == 2**20


def test_integer_attributes_of_any_integer_kind_are_read() -> None:
    """As ASTRA-sim's feeder: comm_size as uint64_val, is_cpu_op as an integer."""
    m = message_classes()
    ref = io.BytesIO()
    serialize_length_prefixed(m.GlobalMetadata(version="x"), ref)
    msg = m.Node(id=1, type=7)
    msg.attr.add(name="comm_size", uint64_val=4096)
    msg.attr.add(name="comm_type", sfixed32_val=2)
    msg.attr.add(name="is_cpu_op", int32_val=0)
    msg.attr.add(name="comm_tag", fixed64_val=5)
    serialize_length_prefixed(msg, ref)
    (node,) = decode_trace(ref.getvalue(), "t.0.et").nodes
    assert (node.comm_bytes, node.comm_type, node.is_cpu_op, node.comm_tag) == (
        4096,
        "ALL_GATHER",
        False,
        5,
    )


def test_write_trace_then_read_trace(tmp_path: Path) -> None:
    trace = Trace(Metadata("0.0.4"), (Node(0, "c", "COMP_NODE", duration_micros=5),))
    path = write_trace(tmp_path / "w.0.et", trace)
    assert read_trace(path) == trace
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.0.et"]


def test_varint_encoding_matches_protobufs() -> None:
    """Our length prefix is protobuf's varint at every width up to 64 bits (a uint64 field
    is its tag byte, then the same varint)."""
    node = message_classes().Node
    for value in [1, 127, 128, 300, 2**14, 2**21 - 1, 2**28, 2**32, 2**35 + 3, 2**63, 2**64 - 1]:
        assert node(id=value).SerializeToString() == b"\x08" + encode_varint(value)
    assert encode_varint(0) == b"\x00"


# -- refusals: one line each, naming the file, the place and the field ---------------------


def _node_bytes(**fields: object) -> bytes:
    m = message_classes()
    buf = io.BytesIO()
    serialize_length_prefixed(m.GlobalMetadata(version="1"), buf)
    attrs = fields.pop("attrs", [])
    msg = m.Node(**fields)
    for attr in attrs:  # type: ignore[attr-defined]
        msg.attr.add(**attr)
    serialize_length_prefixed(msg, buf)
    return buf.getvalue()


@pytest.mark.parametrize(
    "data, match",
    [
        (b"", r"t\.0\.et: an empty file \(a Chakra ET starts with a GlobalMetadata\)"),
        (ASTRA_ALL_REDUCE_3[:-1], r"t\.0\.et: byte 8: a message of 74 bytes but only 73"),
        (ASTRA_ALL_REDUCE_3 + b"\x80", r"t\.0\.et: byte 83: truncated varint"),
        (b"\xff" * 11, r"byte 0: a message length longer than 10 bytes"),
        (b'{\n  "schema": "1.0.2-chakra.0.0.4"}', r"t\.0\.et: a JSON file, not a Chakra ET"),
        (bytes([3, 0x08, 0x96, 0x01]), r"byte 0: not a Chakra ET GlobalMetadata message"),
        (bytes([2, 0x0A, 0x05]), r"byte 0: not a Chakra ET GlobalMetadata message"),
        (bytes([0, 4, 0xF8, 0x07, 0x01, 0x00]), r"byte 1: not a Chakra ET Node message"),
    ],
    ids=["empty", "truncated", "varint", "long-varint", "json", "wire-type", "short", "unknown"],
)
def test_bad_bytes_are_refused(data: bytes, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as e:
        decode_trace(data, "t.0.et")
    one_line(e)


@pytest.mark.parametrize(
    "fields, match",
    [
        ({"id": 4, "type": 12}, r"node 4: type 12 is not a Chakra node type \(0 INVALID_NODE"),
        (
            {"id": 4, "type": 7, "attrs": [{"name": "comm_type", "int64_val": 10}]},
            r"node 4: comm_type 10 is not a Chakra collective type \(0 ALL_REDUCE.*9 BARRIER\)",
        ),
        (
            {"id": 4, "type": 7, "attrs": [{"name": "comm_size", "int64_val": -8}]},
            r"node 4: comm_size -8 is negative",
        ),
        (
            {"id": 4, "type": 5, "attrs": [{"name": "comm_dst", "int32_val": -1}]},
            r"node 4: comm_dst -1 is negative",
        ),
        (
            {"id": 4, "type": 5, "attrs": [{"name": "comm_tag", "uint64_val": 2**40}]},
            r"node 4: comm_tag 1099511627776 is larger than 2147483647",
        ),
        (
            {"id": 4, "type": 7, "attrs": [{"name": "comm_size", "uint64_val": 2**63}]},
            r"node 4: comm_size 9223372036854775808 is larger than 9223372036854775807 \(int64\)",
        ),
        (
            {"id": 4, "type": 7, "attrs": [{"name": "comm_size", "double_val": 1.0}]},
            r"node 4: attribute comm_size is double_val; expected an integer kind",
        ),
        (
            {"id": 4, "type": 7, "attrs": [{"name": "comm_size"}]},
            r"node 4: attribute comm_size is None; expected an integer kind",
        ),
        (
            {"id": 4, "type": 7, "attrs": [{"name": "pg_name", "int64_val": 1}]},
            r"node 4: attribute pg_name is int64_val; expected string_val",
        ),
        (
            {"id": 4, "type": 4, "attrs": [{"name": "is_cpu_op", "string_val": "no"}]},
            r"attribute is_cpu_op is string_val; expected bool_val or an integer kind",
        ),
        (
            {
                "id": 4,
                "type": 7,
                "attrs": [
                    {"name": "comm_size", "int64_val": 1},
                    {"name": "comm_size", "int64_val": 2},
                ],
            },
            r"node 4: attribute comm_size is given twice",
        ),
        (
            {"id": 4, "type": 4, "data_deps": [9]},
            r"node 4: data_deps: 9 is not a node of this file",
        ),
        ({"id": 4, "type": 4, "ctrl_deps": [4]}, r"dependency cycle 4 -> 4"),
    ],
)
def test_bad_nodes_are_refused(fields: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=r"^t\.0\.et: .*" + match) as e:
        decode_trace(_node_bytes(**fields), "t.0.et")
    one_line(e)


def test_a_cycle_is_named_by_its_ids() -> None:
    nodes = (
        Node(1, "a", "COMP_NODE", data_deps=(3,)),
        Node(2, "b", "COMP_NODE", data_deps=(1,)),
        Node(3, "c", "COMP_NODE", ctrl_deps=(2,)),
        Node(4, "d", "COMP_NODE"),
    )
    with pytest.raises(ConfigError, match=r"t\.0\.et: dependency cycle 1 -> 3 -> 2 -> 1"):
        encode_trace(Trace(Metadata(), nodes), "t.0.et")


def test_duplicate_ids_are_refused() -> None:
    nodes = (Node(1, "a", "COMP_NODE"), Node(1, "b", "COMM_COLL_NODE"))
    with pytest.raises(ConfigError, match=r"t\.0\.et: node 1 'b': id 1 is used by two nodes"):
        encode_trace(Trace(Metadata(), nodes), "t.0.et")


@pytest.mark.parametrize(
    "node, match",
    [
        (Node(-1, "", "COMP_NODE"), r"t\.0\.et: node -1: Value out of range"),
        (Node(1, "", "COMP_NODE", comm_src=2**31), r"t\.0\.et: node 1: Value out of range"),
        (Node(1, "", "COMP_NODE", attrs=(Attr("x", "int32_val", 2**40),)), r"out of range"),
        (Node(1, "", "COMP_NODE", attrs=(Attr("x", "int64_val", 1.5),)), r"node 1: .*float"),
        (Node(1, "\ud800", "COMP_NODE"), r"t\.0\.et: node 1: "),
        (Node(1, "", "COMP_NODE", attrs=(Attr("comm_size", "int64_val", 1),)), r"a Node field"),
    ],
)
def test_values_that_do_not_fit_are_refused_on_write(node: Node, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as e:
        encode_trace(Trace(Metadata(), (node,)), "t.0.et")
    one_line(e)


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: Node(1, "", "GPU_NODE"), r"node 1: type 'GPU_NODE' is not one of INVALID_NODE"),
        (lambda: Node(1, "", "COMM_COLL_NODE", comm_type="ALLREDUCE"), r"comm_type 'ALLREDUCE'"),
        (lambda: Node(1, "", "COMM_COLL_NODE", comm_bytes=-1), r"node 1: comm_size -1 is negative"),
        (lambda: Node(1, "", "COMP_NODE", duration_micros=-3), r"duration_micros -3 is negative"),
        (lambda: Attr("x", "int_val", 1), r"attribute 'x': kind 'int_val' is not one of"),
        (lambda: Attr("x", None, 1), r"attribute 'x': a value 1 without a kind"),
    ],
)
def test_the_model_refuses_values_outside_the_format(
    build: Callable[[], object], match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        build()


# -- files: bounded reads ----------------------------------------------------------------


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.0\.et: no such file"):
        read_trace(tmp_path / "nope.0.et")


def test_a_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"a folder; a Chakra ET file is a regular file"):
        read_trace(tmp_path)


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero on this system")
def test_dev_zero_is_refused_without_reading_it() -> None:
    with pytest.raises(ConfigError, match=r"/dev/zero: not a regular file"):
        read_trace("/dev/zero")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes on this system")
def test_a_named_pipe_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "p.0.et"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match=r"p\.0\.et: not a regular file"):
        read_trace(fifo)


def test_a_file_over_the_cap_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.0.et"
    path.write_bytes(ASTRA_ALL_REDUCE_3)
    assert read_bounded(path, max_bytes=83) == ASTRA_ALL_REDUCE_3
    with pytest.raises(ConfigError, match=r"big\.0\.et: larger than 82 bytes, the most read"):
        read_trace(path, max_bytes=82)


def test_a_gzip_bomb_is_refused_while_inflating(tmp_path: Path) -> None:
    path = tmp_path / "bomb.0.et"
    path.write_bytes(gzip.compress(b"\x00" * 5_000_000))
    with pytest.raises(ConfigError, match=r"inflates to more than 1,000,000 bytes"):
        read_trace(path, max_bytes=1_000_000)


def test_a_corrupt_gzip_stream_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "z.0.et"
    path.write_bytes(gzip.compress(ASTRA_ALL_REDUCE_3)[:-12])
    with pytest.raises(ConfigError, match=r"z\.0\.et: a corrupt gzip stream"):
        read_trace(path)


def test_split_frames_accepts_empty_messages() -> None:
    """A zero-length frame is a message with every field at its default (not an end)."""
    assert split_frames(b"\x00\x01a", "x") == [(0, 1, 1), (1, 2, 3)]
    trace = decode_trace(bytes([0, 0]), "x")  # an empty GlobalMetadata, then an empty Node
    assert trace.nodes == (Node(0, "", "INVALID_NODE"),)


# -- the extra ---------------------------------------------------------------------------


def test_missing_protobuf_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without protobuf, reading says which extra to install; the CLI exits 2 on it."""
    from sim.chakra import messages
    from sim.cli import _fail

    monkeypatch.setitem(sys.modules, "google.protobuf", None)
    messages.message_classes.cache_clear()
    try:
        with pytest.raises(MissingExtraError) as e:
            decode_trace(ASTRA_ALL_REDUCE_3, "t.0.et")
    finally:
        messages.message_classes.cache_clear()
    assert one_line(e) == "Chakra execution traces need protobuf: pip install 'clustersim[chakra]'"
    assert isinstance(e.value, ClusterSimError) and isinstance(e.value, ImportError)
    assert _fail(str(e.value)) == 2
    assert capsys.readouterr().err == f"clustersim: error: {e.value}\n"


def test_the_schema_ships_as_package_data() -> None:
    """et_def.proto is found through importlib.resources and is in the package data."""
    from importlib import resources

    assert resources.files("sim.chakra").joinpath("et_def.proto").is_file()
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from 3.11")
    repo = Path(__file__).resolve().parents[1]
    config = tomllib.loads((repo / "pyproject.toml").read_text())
    assert "*.proto" in config["tool"]["setuptools"]["package-data"]["*"]
