"""The Chakra ET schema, read from the shipped ``et_def.proto`` without protobuf or protoc.

``et_def.proto`` (package data beside this module) is clustersim's transcription of the
public MLCommons Chakra schema. :func:`parse_proto` reads the proto3 subset it uses
(``syntax``, ``package``, messages with scalar, message and enum fields, ``repeated``,
``oneof``, enums; ``//`` comments) into plain data. The enum tables every other module uses
(:data:`NODE_TYPES`, :data:`COLLECTIVE_TYPES`, :data:`ATTR_KINDS`) come from that one file,
so the numbers are written once; :mod:`sim.chakra.messages` turns the same data into
protobuf message classes when the ``[chakra]`` extra is installed.

>>> NODE_TYPES["COMM_COLL_NODE"], COLLECTIVE_TYPES["ALL_GATHER"]
(7, 2)
>>> parse_proto('syntax = "proto3"; package P; enum E { A = 0; B = 4; }').enums["E"].values
(('A', 0), ('B', 4))
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources

__all__ = [
    "ATTR_KINDS",
    "COLLECTIVE_TYPES",
    "NODE_TYPES",
    "SCALAR_TYPES",
    "EnumDef",
    "FieldDef",
    "MessageDef",
    "Schema",
    "load_schema",
    "parse_proto",
]

#: The proto3 scalar types the schema may use.
SCALAR_TYPES = (
    "double",
    "float",
    "int32",
    "int64",
    "uint32",
    "uint64",
    "sint32",
    "sint64",
    "fixed32",
    "fixed64",
    "sfixed32",
    "sfixed64",
    "bool",
    "string",
    "bytes",
)

_TOKEN = re.compile(r'\s*(?:(//[^\n]*)|("[^"\n]*")|([A-Za-z_][A-Za-z0-9_.]*)|(-?\d+)|([{}=;]))')


@dataclass(frozen=True, slots=True)
class FieldDef:
    """One field: ``repeated? type name = number;`` (``oneof`` names its oneof block)."""

    name: str
    number: int
    type: str
    repeated: bool = False
    oneof: str | None = None


@dataclass(frozen=True, slots=True)
class MessageDef:
    """A message and its fields, in file order."""

    name: str
    fields: tuple[FieldDef, ...]

    def field(self, name: str) -> FieldDef:
        """The field called ``name`` (KeyError if none)."""
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)


@dataclass(frozen=True, slots=True)
class EnumDef:
    """An enum: (name, number) pairs in file order."""

    name: str
    values: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class Schema:
    """A parsed ``.proto`` file."""

    syntax: str
    package: str
    messages: Mapping[str, MessageDef]
    enums: Mapping[str, EnumDef]


class _Tokens:
    def __init__(self, text: str) -> None:
        self.items: list[str] = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                if text[pos:].strip() == "":
                    break
                raise ValueError(f"et_def.proto: cannot read {text[pos : pos + 20].strip()!r}")
            pos = m.end()
            token = next((g for g in m.groups()[1:] if g is not None), None)
            if token is not None:
                self.items.append(token)
        self.i = 0

    def peek(self) -> str | None:
        return self.items[self.i] if self.i < len(self.items) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token != expected):
            raise ValueError(f"et_def.proto: expected {expected or 'more'!r}, got {token!r}")
        self.i += 1
        return token

    def number(self) -> int:
        token = self.take()
        if not re.fullmatch(r"-?\d+", token):
            raise ValueError(f"et_def.proto: expected a number, got {token!r}")
        return int(token)


def _field(tokens: _Tokens, oneof: str | None) -> FieldDef:
    repeated = tokens.peek() == "repeated"
    if repeated:
        if oneof is not None:
            raise ValueError(f"et_def.proto: repeated field in oneof {oneof}")
        tokens.take()
    type_, name = tokens.take(), tokens.take()
    tokens.take("=")
    number = tokens.number()
    tokens.take(";")
    return FieldDef(name, number, type_, repeated, oneof)


def _message(tokens: _Tokens) -> MessageDef:
    name = tokens.take()
    tokens.take("{")
    fields: list[FieldDef] = []
    while tokens.peek() != "}":
        if tokens.peek() == "oneof":
            tokens.take()
            group = tokens.take()
            tokens.take("{")
            while tokens.peek() != "}":
                fields.append(_field(tokens, group))
            tokens.take("}")
        else:
            fields.append(_field(tokens, None))
    tokens.take("}")
    for attr in ("name", "number"):
        values = [getattr(f, attr) for f in fields]
        if len(set(values)) != len(values):
            raise ValueError(f"et_def.proto: message {name} repeats a field {attr}")
    return MessageDef(name, tuple(fields))


def _enum(tokens: _Tokens) -> EnumDef:
    name = tokens.take()
    tokens.take("{")
    values: list[tuple[str, int]] = []
    while tokens.peek() != "}":
        label = tokens.take()
        tokens.take("=")
        values.append((label, tokens.number()))
        tokens.take(";")
    tokens.take("}")
    if not values or values[0][1] != 0:
        raise ValueError(f"et_def.proto: proto3 enum {name} must start with a value 0")
    return EnumDef(name, tuple(values))


def parse_proto(text: str) -> Schema:
    """Read the proto3 subset of ``et_def.proto`` into a :class:`Schema`.

    Parameters
    ----------
    text : str
        The ``.proto`` source.

    Returns
    -------
    Schema

    Raises
    ------
    ValueError
        Syntax outside the subset, a repeated field number or name, a type that is neither
        a scalar nor a message or enum of the file, or a proto3 enum not starting at 0.
    """
    tokens = _Tokens(text)
    tokens.take("syntax")
    tokens.take("=")
    syntax = tokens.take().strip('"')
    tokens.take(";")
    tokens.take("package")
    package = tokens.take()
    tokens.take(";")
    messages: dict[str, MessageDef] = {}
    enums: dict[str, EnumDef] = {}
    while tokens.peek() is not None:
        kind = tokens.take()
        if kind == "message":
            m = _message(tokens)
            messages[m.name] = m
        elif kind == "enum":
            e = _enum(tokens)
            enums[e.name] = e
        else:
            raise ValueError(f"et_def.proto: expected 'message' or 'enum', got {kind!r}")
    for m in messages.values():
        for f in m.fields:
            if f.type not in SCALAR_TYPES and f.type not in messages and f.type not in enums:
                raise ValueError(f"et_def.proto: {m.name}.{f.name} has unknown type {f.type!r}")
    return Schema(syntax, package, messages, enums)


@cache
def load_schema() -> Schema:
    """The shipped schema (package data ``sim/chakra/et_def.proto``), parsed once."""
    text = resources.files("sim.chakra").joinpath("et_def.proto").read_text(encoding="utf-8")
    return parse_proto(text)


def _enum_table(name: str) -> dict[str, int]:
    return dict(load_schema().enums[name].values)


#: Chakra node types by name (``NodeType`` of the schema).
NODE_TYPES: Mapping[str, int] = _enum_table("NodeType")
#: Chakra collective types by name (``CollectiveCommType``): the ``comm_type`` attribute.
COLLECTIVE_TYPES: Mapping[str, int] = _enum_table("CollectiveCommType")
#: The value kinds of an attribute (the ``AttributeProto.value`` oneof) and their element
#: type: ``int64_val`` -> ``int64``, ``bool_list`` -> ``bool`` (a list of them).
ATTR_KINDS: Mapping[str, str] = {
    f.name: (
        f.type if f.name.endswith("_val") else load_schema().messages[f.type].field("values").type
    )
    for f in load_schema().messages["AttributeProto"].fields
    if f.oneof == "value"
}
