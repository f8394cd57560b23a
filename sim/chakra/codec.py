"""ET file bytes <-> :class:`~sim.chakra.trace.Trace`: protobuf messages in, plain dataclasses out.

:func:`decode_trace` splits the frames (:mod:`sim.chakra.stream`), parses the first as
``GlobalMetadata`` and the rest as ``Node`` with the run-time message classes
(:mod:`sim.chakra.messages`), refuses what is not a Chakra ET (bytes protobuf cannot parse,
field numbers the schema does not have, a node type or collective type outside the enums,
a known attribute of the wrong kind, twice, or negative) and then checks the graph
(:func:`sim.chakra.trace.check_trace`). :func:`encode_trace` is its inverse: the known
attributes are written first, in :data:`~sim.chakra.trace.KNOWN_ATTRS` order and kinds
(what both of Chakra's feeders read), then the kept ones as they were. Reading what
:func:`encode_trace` wrote gives the same :class:`Trace` back.

Integer attributes are read from any integer kind (``int32_val`` ... ``sfixed64_val``), as
the feeder ASTRA-sim uses does; ``is_cpu_op`` from ``bool_val`` or an integer kind; and
``pg_name`` only from ``string_val``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sim.chakra.messages import message_classes
from sim.chakra.schema import ATTR_KINDS, COLLECTIVE_TYPES, NODE_TYPES
from sim.chakra.stream import decode_varint, frame, split_frames
from sim.chakra.trace import (
    KNOWN_ATTRS,
    Attr,
    AttrValue,
    IOInfo,
    Metadata,
    Node,
    Trace,
    check_trace,
)
from sim.errors import ConfigError

__all__ = [
    "decode_metadata",
    "decode_trace",
    "encode_trace",
    "known_attr_piece",
    "metadata_frame",
    "node_pieces",
    "node_template",
]

_INT_TYPES = {"int32", "int64", "uint32", "uint64", "sint32", "sint64"}
_INT_TYPES |= {"fixed32", "fixed64", "sfixed32", "sfixed64"}
#: Attribute kinds holding one integer.
INTEGER_KINDS = tuple(k for k, t in ATTR_KINDS.items() if k.endswith("_val") and t in _INT_TYPES)
_NODE_TYPE_NAMES = {number: name for name, number in NODE_TYPES.items()}
_COLLECTIVE_NAMES = {number: name for name, number in COLLECTIVE_TYPES.items()}
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1


def _choices(table: dict[str, int]) -> str:
    return ", ".join(f"{number} {name}" for name, number in table.items())


# -- reading ---------------------------------------------------------------------------


def _parse(cls: Any, payload: bytes, where: str, what: str) -> Any:
    """``payload`` parsed as ``cls``; refused if protobuf cannot or keeps unknown fields."""
    from google.protobuf.message import DecodeError

    message = cls()
    try:
        message.ParseFromString(payload)
    except (DecodeError, ValueError) as e:
        raise ConfigError(f"{where}: not a Chakra ET {what} message ({e})") from None
    if _has_unknown_fields(message):
        numbers = ", ".join(str(n) for n in sorted(set(_unknown_numbers(message)))[:8])
        raise ConfigError(
            f"{where}: not a Chakra ET {what} message (field numbers {numbers} are not in "
            "the Chakra schema)"
        )
    return message


def _has_unknown_fields(message: Any) -> bool:
    """Whether ``message`` or any message under it holds fields the schema does not have."""
    size = message.ByteSize()
    message.DiscardUnknownFields()
    return bool(message.ByteSize() != size)


def _unknown_numbers(message: Any) -> list[int]:
    """Field numbers protobuf kept as unknown in ``message`` and every message under it."""
    try:
        from google.protobuf.unknown_fields import UnknownFieldSet

        numbers = [f.field_number for f in UnknownFieldSet(message)]
    except ImportError:  # protobuf < 4.22
        numbers = [tag for tag, _ in message.UnknownFields()]
    for descriptor, value in message.ListFields():
        if descriptor.message_type is None:
            continue
        repeated = getattr(descriptor, "is_repeated", None)
        if repeated is None:  # protobuf < 5.28 has only .label
            repeated = descriptor.label == descriptor.LABEL_REPEATED
        items = value if repeated else [value]
        for item in items:
            numbers.extend(_unknown_numbers(item))
    return numbers


def _parse_nodes(data: bytes, frames: list[tuple[int, int, int]], where: str) -> Any:
    """Every node frame of ``data`` parsed in one protobuf call (a ``NodeBatch``).

    A frame is ``varint(len) + message``; with a ``0x0A`` byte before each, the frames are
    the wire encoding of ``NodeBatch.nodes``. Only when that parse fails, or keeps unknown
    fields, are the frames parsed one by one to name the bad one.
    """
    from google.protobuf.message import DecodeError

    messages = message_classes()
    chunks: list[bytes] = []
    for offset, _, end in frames:
        chunks += (b"\x0a", data[offset:end])
    batch = messages.NodeBatch()
    try:
        batch.ParseFromString(b"".join(chunks))
        if not _has_unknown_fields(batch):
            return batch.nodes
    except (DecodeError, ValueError):  # the bad frame is found and named below
        pass
    for offset, start, end in frames:
        _parse(messages.Node, data[start:end], f"{where}: byte {offset}", "Node")
    raise ConfigError(f"{where}: not a Chakra ET file (its nodes do not parse together)")


def _attr(message: Any) -> Attr:
    kind = message.WhichOneof("value")
    if kind is None:
        return Attr(message.name, None, None, message.doc_string)
    raw = getattr(message, kind)
    value: AttrValue = tuple(raw.values) if kind.endswith("_list") else raw
    return Attr(message.name, kind, value, message.doc_string)


def _known_value(attr: Attr, where: str) -> object:
    """The value of a known attribute, checked for kind and range."""
    name, kind = attr.name, attr.kind
    if name == "pg_name":
        if kind != "string_val":
            raise ConfigError(f"{where}: attribute pg_name is {kind}; expected string_val")
        return attr.value
    if name == "is_cpu_op" and kind == "bool_val":
        return attr.value
    if kind not in INTEGER_KINDS:
        expected = "bool_val or an integer kind" if name == "is_cpu_op" else "an integer kind"
        raise ConfigError(
            f"{where}: attribute {name} is {kind}; expected {expected} ({', '.join(INTEGER_KINDS)})"
        )
    value = attr.value
    assert isinstance(value, int)
    if name == "is_cpu_op":
        return bool(value)
    if name == "comm_type":
        if value not in _COLLECTIVE_NAMES:
            raise ConfigError(
                f"{where}: comm_type {value} is not a Chakra collective type "
                f"({_choices(dict(COLLECTIVE_TYPES))})"
            )
        return _COLLECTIVE_NAMES[value]
    if value < 0:
        raise ConfigError(f"{where}: {name} {value} is negative")
    limit = _INT64_MAX if name == "comm_size" else _INT32_MAX
    if value > limit:
        kind_written = "int64" if name == "comm_size" else "int32"
        raise ConfigError(f"{where}: {name} {value} is larger than {limit} ({kind_written})")
    return value


def _here(message: Any, where: str) -> str:
    return f"{where}: node {message.id}" + (f" {message.name[:60]!r}" if message.name else "")


#: A decoded attribute: a known one's (Node field, value), or a kept :class:`Attr`.
_Decoded = tuple[str, object] | Attr
_FIELD_OF = {name: ("comm_bytes" if name == "comm_size" else name) for name in KNOWN_ATTRS}


def _decode_attr(message: Any, cache: dict[bytes, _Decoded]) -> _Decoded:
    """``message`` decoded once per distinct encoding (a step repeats the same few)."""
    key = message.SerializeToString()
    hit = cache.get(key)
    if hit is None:
        attr = _attr(message)
        known = attr.name in KNOWN_ATTRS
        hit = cache[key] = (_FIELD_OF[attr.name], _known_value(attr, "")) if known else attr
    return hit


def _node(message: Any, where: str, cache: dict[bytes, _Decoded]) -> Node:
    type_name = _NODE_TYPE_NAMES.get(message.type)
    if type_name is None:
        raise ConfigError(
            f"{_here(message, where)}: type {message.type} is not a Chakra node type "
            f"({_choices(dict(NODE_TYPES))})"
        )
    known: dict[str, object] = {}
    kept: list[Attr] = []
    for attr_message in message.attr:
        try:
            decoded = _decode_attr(attr_message, cache)
        except ConfigError as e:
            raise ConfigError(f"{_here(message, where)}{e}") from None
        if isinstance(decoded, Attr):
            kept.append(decoded)
        elif decoded[0] in known:
            name = next(k for k, v in _FIELD_OF.items() if v == decoded[0])
            raise ConfigError(f"{_here(message, where)}: attribute {name} is given twice")
        else:
            known[decoded[0]] = decoded[1]
    return Node(
        message.id,
        message.name,
        type_name,
        tuple(message.data_deps),
        tuple(message.ctrl_deps),
        message.start_time_micros,
        message.duration_micros,
        _io(message.inputs) if message.HasField("inputs") else None,
        _io(message.outputs) if message.HasField("outputs") else None,
        attrs=tuple(kept),
        **known,  # type: ignore[arg-type]
    )


def _io(io: Any) -> IOInfo:
    return IOInfo(io.values, io.shapes, io.types)


def decode_metadata(data: bytes, where: str) -> tuple[Metadata, int]:
    """The ``GlobalMetadata`` an ET file opens with, and the byte where its nodes begin
    (the nodes are not read: a reader that needs only the metadata of many files).

    Raises
    ------
    ConfigError
        As :func:`decode_trace`, for the first frame.
    """
    messages = message_classes()
    if not data:
        raise ConfigError(f"{where}: an empty file (a Chakra ET starts with a GlobalMetadata)")
    size, start = decode_varint(data, 0, where)
    if size > len(data) - start:
        raise ConfigError(
            f"{where}: byte 0: a message of {size:,} bytes but only {len(data) - start:,} "
            "bytes are left (truncated file)"
        )
    meta = _parse(messages.GlobalMetadata, data[start : start + size], f"{where}: byte 0",
                  "GlobalMetadata")  # fmt: skip
    return Metadata(meta.version, tuple(_attr(a) for a in meta.attr)), start + size


def decode_trace(
    data: bytes, where: str, *, cache: dict[str, dict[bytes, Any]] | None = None
) -> Trace:
    """Read one rank's ET file from its bytes.

    Parameters
    ----------
    data : bytes
        The file's contents (already inflated if it was gzip-compressed).
    where : str
        The file name, for messages.
    cache : dict, optional
        Decoded attributes and nodes by their bytes, kept between calls: the files of
        many ranks that share most of their nodes (the ranks of one pipeline stage) are
        read faster with one cache.

    Returns
    -------
    Trace

    Raises
    ------
    ConfigError
        One line naming ``where``, the byte offset or node, and the problem.
    MissingExtraError
        protobuf is not installed.
    """
    messages = message_classes()
    if data[:1] == b"{" and data[1:64].lstrip()[:1] == b'"':
        raise ConfigError(
            f"{where}: a JSON file, not a Chakra ET (a PyTorch execution trace is converted "
            "first, with Chakra's chakra_converter)"
        )
    frames = split_frames(data, where)
    if not frames:
        raise ConfigError(f"{where}: an empty file (a Chakra ET starts with a GlobalMetadata)")
    offset, start, end = frames[0]
    at = f"{where}: byte {offset}"
    meta = _parse(messages.GlobalMetadata, data[start:end], at, "GlobalMetadata")
    metadata = Metadata(meta.version, tuple(_attr(a) for a in meta.attr))
    cache = {} if cache is None else cache
    attrs: dict[bytes, _Decoded] = cache.setdefault("attrs", {})
    known: dict[bytes, Node] = cache.setdefault("nodes", {})
    nodes = []
    for (_, begin, finish), m in zip(
        frames[1:], _parse_nodes(data, frames[1:], where), strict=True
    ):
        key = data[begin:finish]
        node = known.get(key)
        if node is None:
            node = known[key] = _node(m, where, attrs)
        nodes.append(node)
    trace = Trace(metadata, tuple(nodes))
    check_trace(trace, where)
    return trace


# -- writing ---------------------------------------------------------------------------


def _set_attr(message: Any, attr: Attr) -> None:
    message.name = attr.name
    message.doc_string = attr.doc
    if attr.kind is None:
        return
    if attr.kind.endswith("_list"):
        values = getattr(message, attr.kind)
        values.SetInParent()  # an empty list is still a value
        assert isinstance(attr.value, tuple)
        values.values.extend(attr.value)
    else:
        setattr(message, attr.kind, attr.value)


def _fragment(messages: Any, attr: Attr, cache: dict[object, bytes]) -> bytes:
    """The bytes of ``attr`` as one entry of ``Node.attr`` (tag, length, message), cached."""
    # Equal floats may differ in bytes (0.0 and -0.0): key those by repr.
    exact = attr.kind is None or ATTR_KINDS[attr.kind] not in ("double", "float")
    key = (attr.name, attr.kind, attr.doc, attr.value if exact else repr(attr.value))
    hit = cache.get(key)
    if hit is None:
        holder = messages.Node()
        _set_attr(holder.attr.add(), attr)
        hit = cache[key] = holder.SerializeToString()
    return hit


def known_attr_piece(name: str, value: bool | int | str, cache: dict[object, bytes]) -> bytes:
    """The entry of known attribute ``name`` (a :data:`KNOWN_ATTRS` key) in ``Node.attr``
    (tag, length, message) for ``value`` (``comm_type`` as its number), cached."""
    key = (name, type(value), value)  # bool, int or str: equal values, equal bytes
    hit = cache.get(key)
    if hit is None:
        hit = cache[key] = _fragment(message_classes(), Attr(name, KNOWN_ATTRS[name], value), cache)
    return hit


def _known_fragments(node: Node, cache: dict[object, bytes]) -> list[bytes]:
    """The entries of ``node``'s known attributes (:data:`KNOWN_ATTRS` order), cached."""
    values = (
        node.is_cpu_op,
        None if node.comm_type is None else COLLECTIVE_TYPES[node.comm_type],
        node.comm_bytes,
        node.comm_src,
        node.comm_dst,
        node.comm_tag,
        node.pg_name,
    )
    return [known_attr_piece(name, value, cache)
            for name, value in zip(KNOWN_ATTRS, values, strict=True) if value is not None]  # fmt: skip


def node_pieces(node: Node, cache: dict[object, bytes]) -> list[bytes]:
    """``node``'s message bytes in pieces: protobuf's encoding of fields 1-9, then each
    attribute's entry (the known ones first, as :func:`known_attr_piece` gives them).

    ``attr`` is field 10, the last, and a message's fields are written in field-number
    order, so the fields 1-9 of the node followed by its attribute entries are the same
    bytes as the whole message serialised at once (a test checks it against protobuf).
    ``b"".join`` of the pieces is the message; a writer of many ranks' nodes that differ in
    one attribute swaps that one piece.

    Raises
    ------
    ValueError, TypeError
        A value that does not fit its protobuf type.
    """
    # Nodes of different ranks often differ only in their attributes (an exported step's
    # ranks of one stage): fields 1-9 are encoded once per distinct content.
    key = ("fields", node.id, node.name, node.type, node.ctrl_deps, node.data_deps,
           node.start_time_micros, node.duration_micros, node.inputs, node.outputs)  # fmt: skip
    head = cache.get(key)
    if head is None:
        messages = message_classes()
        message = messages.Node(
            id=node.id,
            name=node.name,
            type=NODE_TYPES[node.type],
            ctrl_deps=node.ctrl_deps,
            data_deps=node.data_deps,
            start_time_micros=node.start_time_micros,
            duration_micros=node.duration_micros,
        )
        for field in ("inputs", "outputs"):
            io: IOInfo | None = getattr(node, field)
            if io is not None:
                target = getattr(message, field)
                target.SetInParent()
                target.values, target.shapes, target.types = io.values, io.shapes, io.types
        head = cache[key] = message.SerializeToString()
    messages = message_classes()
    parts = [head, *_known_fragments(node, cache)]
    parts.extend(_fragment(messages, attr, cache) for attr in node.attrs)
    return parts


def node_template(
    node: Node, names: Sequence[str], cache: dict[object, bytes]
) -> tuple[list[bytes], dict[str, int]]:
    """:func:`node_pieces` of ``node`` and where the piece of each known attribute of
    ``names`` that ``node`` has sits among them: a writer of many nodes that differ only in
    those attributes swaps those pieces (:func:`known_attr_piece`) and joins."""
    parts = node_pieces(node, cache)
    at: dict[str, int] = {}
    for name in names:
        value = getattr(node, _FIELD_OF[name])
        if value is not None:
            if name == "comm_type":
                value = COLLECTIVE_TYPES[value]
            at[name] = parts.index(known_attr_piece(name, value, cache))
    return parts, at


def metadata_frame(metadata: Metadata, where: str) -> bytes:
    """The first frame of an ET file: ``metadata`` as a ``GlobalMetadata``, after its length.

    Raises
    ------
    ConfigError
        A value that does not fit its protobuf type.
    """
    messages = message_classes()
    meta = messages.GlobalMetadata(version=metadata.version)
    try:
        for attr in metadata.attrs:
            _set_attr(meta.attr.add(), attr)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{where}: GlobalMetadata: {e}") from None
    return frame(meta.SerializeToString(deterministic=True))


def encode_trace(
    trace: Trace, where: str, *, cache: dict[object, bytes] | None = None, check: bool = True
) -> bytes:
    """The ET file bytes of ``trace``: the ``GlobalMetadata`` frame, then one per node.

    Parameters
    ----------
    trace : Trace
    where : str
        The file name, for messages.
    cache : dict, optional
        Encoded pieces (attributes, nodes' fields) kept between calls: traces of many ranks
        that share most of their nodes' contents are encoded faster with one cache.
    check : bool
        Check the graph first (:func:`~sim.chakra.trace.check_trace`); a caller that
        checked a trace of the same ids and dependencies may skip it.

    Raises
    ------
    ConfigError
        The trace fails :func:`~sim.chakra.trace.check_trace`, a known attribute repeats
        one in ``attrs``, or a value does not fit its protobuf type (a negative id, an
        ``int32_val`` over 2**31 - 1, a ``float`` where an integer is due).
    MissingExtraError
        protobuf is not installed.
    """
    if check:
        check_trace(trace, where)
    out = [metadata_frame(trace.metadata, where)]
    cache = {} if cache is None else cache
    for node in trace.nodes:
        repeated = [a.name for a in node.attrs if a.name in KNOWN_ATTRS]
        label = f"{where}: node {node.id}"
        if repeated:
            raise ConfigError(f"{label}: attribute {repeated[0]} is a Node field; not an Attr")
        try:
            out.append(frame(b"".join(node_pieces(node, cache))))
        except (ValueError, TypeError) as e:
            raise ConfigError(f"{label}: {e}") from None
    return b"".join(out)
