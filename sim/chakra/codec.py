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

from typing import Any

from sim.chakra.messages import message_classes
from sim.chakra.schema import ATTR_KINDS, COLLECTIVE_TYPES, NODE_TYPES
from sim.chakra.stream import frame, split_frames
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

__all__ = ["decode_trace", "encode_trace"]

_INT_TYPES = {"int32", "int64", "uint32", "uint64", "sint32", "sint64"}
_INT_TYPES |= {"fixed32", "fixed64", "sfixed32", "sfixed64"}
#: Attribute kinds holding one integer.
INTEGER_KINDS = tuple(k for k, t in ATTR_KINDS.items() if k.endswith("_val") and t in _INT_TYPES)
_NODE_TYPE_NAMES = {number: name for name, number in NODE_TYPES.items()}
_COLLECTIVE_NAMES = {number: name for name, number in COLLECTIVE_TYPES.items()}
_INT32_MAX = 2**31 - 1


def _choices(table: dict[str, int]) -> str:
    return ", ".join(f"{number} {name}" for name, number in table.items())


# -- reading ---------------------------------------------------------------------------


def _parse(cls: Any, payload: memoryview, where: str, what: str) -> Any:
    from google.protobuf.message import DecodeError

    message = cls()
    try:
        message.ParseFromString(bytes(payload))
    except (DecodeError, RuntimeWarning, ValueError) as e:
        raise ConfigError(f"{where}: not a Chakra ET {what} message ({e})") from None
    unknown = sorted(set(_unknown_numbers(message)))
    if unknown:
        numbers = ", ".join(str(n) for n in unknown[:8])
        raise ConfigError(
            f"{where}: not a Chakra ET {what} message (field numbers {numbers} are not in "
            "the Chakra schema)"
        )
    return message


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
    if name != "comm_size" and value > _INT32_MAX:
        raise ConfigError(f"{where}: {name} {value} is larger than {_INT32_MAX} (int32)")
    return value


def _node(message: Any, where: str) -> Node:
    label = f"node {message.id}" + (f" {message.name[:60]!r}" if message.name else "")
    here = f"{where}: {label}"
    if message.type not in _NODE_TYPE_NAMES:
        raise ConfigError(
            f"{here}: type {message.type} is not a Chakra node type ({_choices(dict(NODE_TYPES))})"
        )
    known: dict[str, object] = {}
    kept: list[Attr] = []
    for attr_message in message.attr:
        attr = _attr(attr_message)
        if attr.name not in KNOWN_ATTRS:
            kept.append(attr)
            continue
        if attr.name in known:
            raise ConfigError(f"{here}: attribute {attr.name} is given twice")
        known[attr.name] = _known_value(attr, here)
    fields = {("comm_bytes" if k == "comm_size" else k): v for k, v in known.items()}
    return Node(
        id=message.id,
        name=message.name,
        type=_NODE_TYPE_NAMES[message.type],
        data_deps=tuple(message.data_deps),
        ctrl_deps=tuple(message.ctrl_deps),
        start_time_micros=message.start_time_micros,
        duration_micros=message.duration_micros,
        inputs=_io(message, "inputs"),
        outputs=_io(message, "outputs"),
        attrs=tuple(kept),
        **fields,  # type: ignore[arg-type]
    )


def _io(message: Any, field: str) -> IOInfo | None:
    if not message.HasField(field):
        return None
    io = getattr(message, field)
    return IOInfo(io.values, io.shapes, io.types)


def decode_trace(data: bytes, where: str) -> Trace:
    """Read one rank's ET file from its bytes.

    Parameters
    ----------
    data : bytes
        The file's contents (already inflated if it was gzip-compressed).
    where : str
        The file name, for messages.

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
    offset, payload = frames[0]
    meta = _parse(messages.GlobalMetadata, payload, f"{where}: byte {offset}", "GlobalMetadata")
    metadata = Metadata(meta.version, tuple(_attr(a) for a in meta.attr))
    nodes = []
    for offset, payload in frames[1:]:
        at = f"{where}: byte {offset}"
        nodes.append(_node(_parse(messages.Node, payload, at, "Node"), where))
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


def _node_message(messages: Any, node: Node) -> Any:
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
    values = {
        "is_cpu_op": node.is_cpu_op,
        "comm_type": None if node.comm_type is None else COLLECTIVE_TYPES[node.comm_type],
        "comm_size": node.comm_bytes,
        "comm_src": node.comm_src,
        "comm_dst": node.comm_dst,
        "comm_tag": node.comm_tag,
        "pg_name": node.pg_name,
    }
    for name, kind in KNOWN_ATTRS.items():
        if values[name] is not None:
            _set_attr(message.attr.add(), Attr(name, kind, values[name]))
    for attr in node.attrs:
        _set_attr(message.attr.add(), attr)
    return message


def encode_trace(trace: Trace, where: str) -> bytes:
    """The ET file bytes of ``trace``: the ``GlobalMetadata`` frame, then one per node.

    Parameters
    ----------
    trace : Trace
    where : str
        The file name, for messages.

    Raises
    ------
    ConfigError
        The trace fails :func:`~sim.chakra.trace.check_trace`, a known attribute repeats
        one in ``attrs``, or a value does not fit its protobuf type (a negative id, an
        ``int32_val`` over 2**31 - 1, a ``float`` where an integer is due).
    MissingExtraError
        protobuf is not installed.
    """
    check_trace(trace, where)
    messages = message_classes()
    meta = messages.GlobalMetadata(version=trace.metadata.version)
    try:
        for attr in trace.metadata.attrs:
            _set_attr(meta.attr.add(), attr)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{where}: GlobalMetadata: {e}") from None
    out = [frame(meta.SerializeToString(deterministic=True))]
    for node in trace.nodes:
        repeated = [a.name for a in node.attrs if a.name in KNOWN_ATTRS]
        label = f"{where}: node {node.id}"
        if repeated:
            raise ConfigError(f"{label}: attribute {repeated[0]} is a Node field; not an Attr")
        try:
            message = _node_message(messages, node)
        except (ValueError, TypeError) as e:
            raise ConfigError(f"{label}: {e}") from None
        out.append(frame(message.SerializeToString(deterministic=True)))
    return b"".join(out)
