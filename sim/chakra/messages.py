"""Protobuf message classes of the Chakra schema, built at run time (no protoc, no generated code).

:func:`message_classes` turns :func:`sim.chakra.schema.load_schema` into a
``FileDescriptorProto``, adds it to a private ``DescriptorPool`` (so it never clashes with a
``ChakraProtoMsg`` that Chakra's own generated module registered in the default pool) and
asks ``message_factory`` for the classes. It needs the ``protobuf`` package (the
``[chakra]`` extra); without it, :class:`~sim.errors.MissingExtraError` says how to install it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from sim.chakra.schema import SCALAR_TYPES, Schema, load_schema
from sim.errors import MissingExtraError

__all__ = ["INSTALL_HINT", "Messages", "file_descriptor_proto", "message_classes"]

#: What to run when protobuf is missing.
INSTALL_HINT = "Chakra execution traces need protobuf: pip install 'clustersim[chakra]'"

#: The ``.proto`` file name the descriptor is registered under.
PROTO_NAME = "clustersim/chakra/et_def.proto"
#: Package of clustersim's ``NodeBatch`` helper message.
BATCH_PACKAGE = "clustersim.chakra"


@dataclass(frozen=True)
class Messages:
    """The message classes an ET file is made of (plus the attribute list wrappers)."""

    GlobalMetadata: Any
    Node: Any
    AttributeProto: Any
    IOInfo: Any
    #: ``DoubleList`` ... ``BytesList`` by name.
    lists: dict[str, Any]
    #: clustersim's own ``NodeBatch { repeated ChakraProtoMsg.Node nodes = 1; }`` (not part of
    #: the format): a file's node frames, each after a ``0x0A`` tag byte, parse as one of
    #: these in a single protobuf call instead of one call per node.
    NodeBatch: Any


def _protobuf() -> tuple[Any, Any, Any]:
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    except ImportError:
        raise MissingExtraError(INSTALL_HINT) from None
    return descriptor_pb2, descriptor_pool, message_factory


def file_descriptor_proto(schema: Schema) -> Any:
    """``schema`` as a ``google.protobuf.descriptor_pb2.FileDescriptorProto``.

    Raises
    ------
    MissingExtraError
        protobuf is not installed.
    """
    descriptor_pb2, _, _ = _protobuf()
    fdp = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(
        name=PROTO_NAME, package=schema.package, syntax=schema.syntax
    )
    for enum in schema.enums.values():
        e = file.enum_type.add(name=enum.name)
        for label, number in enum.values:
            e.value.add(name=label, number=number)
    for message in schema.messages.values():
        m = file.message_type.add(name=message.name)
        oneofs: list[str] = []
        for f in message.fields:
            field = m.field.add(name=f.name, number=f.number, json_name=_json_name(f.name))
            field.label = fdp.LABEL_REPEATED if f.repeated else fdp.LABEL_OPTIONAL
            if f.type in SCALAR_TYPES:
                field.type = getattr(fdp, f"TYPE_{f.type.upper()}")
            else:
                is_enum = f.type in schema.enums
                field.type = fdp.TYPE_ENUM if is_enum else fdp.TYPE_MESSAGE
                field.type_name = f".{schema.package}.{f.type}"
            if f.oneof is not None:
                if f.oneof not in oneofs:
                    oneofs.append(f.oneof)
                    m.oneof_decl.add(name=f.oneof)
                field.oneof_index = oneofs.index(f.oneof)
    return file


def _json_name(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


@cache
def message_classes() -> Messages:
    """The Chakra message classes, built once per process.

    Returns
    -------
    Messages

    Raises
    ------
    MissingExtraError
        protobuf is not installed (``pip install 'clustersim[chakra]'``).
    """
    _, descriptor_pool, message_factory = _protobuf()
    schema = load_schema()
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_descriptor_proto(schema))
    pool.Add(_batch_proto(schema))

    def cls(name: str) -> Any:
        return message_factory.GetMessageClass(
            pool.FindMessageTypeByName(f"{schema.package}.{name}")
        )

    lists = {name: cls(name) for name in schema.messages if name.endswith("List")}
    return Messages(
        GlobalMetadata=cls("GlobalMetadata"),
        Node=cls("Node"),
        AttributeProto=cls("AttributeProto"),
        IOInfo=cls("IOInfo"),
        lists=lists,
        NodeBatch=message_factory.GetMessageClass(
            pool.FindMessageTypeByName(f"{BATCH_PACKAGE}.NodeBatch")
        ),
    )


def _batch_proto(schema: Schema) -> Any:
    """``NodeBatch``: one repeated ``Node`` field numbered 1 (see :class:`Messages`)."""
    descriptor_pb2, _, _ = _protobuf()
    fdp = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(
        name="clustersim/chakra/batch.proto",
        package=BATCH_PACKAGE,
        syntax="proto3",
        dependency=[PROTO_NAME],
    )
    message = file.message_type.add(name="NodeBatch")
    message.field.add(
        name="nodes",
        number=1,
        json_name="nodes",
        label=fdp.LABEL_REPEATED,
        type=fdp.TYPE_MESSAGE,
        type_name=f".{schema.package}.Node",
    )
    return file
