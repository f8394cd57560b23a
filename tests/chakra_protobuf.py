"""protobuf's own length-prefixed framing, for tests that compare sim.chakra's bytes with it.

``google.protobuf.proto.serialize_length_prefixed`` and ``parse_length_prefixed`` exist
from protobuf 5.28; older versions (the ``[chakra]`` extra accepts 4.22) get the same
framing from protobuf's internal varint codec, which Chakra's ``protolib.py`` copies too.
"""

from __future__ import annotations

from typing import IO, Any

try:
    from google.protobuf.proto import parse_length_prefixed, serialize_length_prefixed
except ImportError:  # protobuf < 5.28
    from google.protobuf.internal.decoder import _DecodeVarint  # type: ignore[attr-defined]
    from google.protobuf.internal.encoder import _VarintBytes  # type: ignore[attr-defined]

    def serialize_length_prefixed(message: Any, output: IO[bytes]) -> None:  # type: ignore[misc]
        data = message.SerializeToString()
        output.write(_VarintBytes(len(data)) + data)

    def parse_length_prefixed(message_type: Any, input_bytes: IO[bytes]) -> Any:  # type: ignore[misc]
        head = input_bytes.read(10)
        size, used = _DecodeVarint(head, 0)
        input_bytes.seek(input_bytes.tell() - len(head) + used)
        message = message_type()
        message.ParseFromString(input_bytes.read(size))
        return message


__all__ = ["parse_length_prefixed", "serialize_length_prefixed"]
