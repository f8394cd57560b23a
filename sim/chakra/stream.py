"""The ET file's framing: messages one after another, each after its length as a varint.

This is how Chakra's ``protolib.encodeMessage`` and its C++ ``ProtoOutputStream`` write
(and ``google.protobuf.proto.serialize_length_prefixed`` too): ``varint(len(m)) + m`` for
the ``GlobalMetadata`` and then every ``Node``. Readers here never trust a length: a file
is read with a bound (a regular file only, at most ``max_bytes``; gzip-compressed files,
which Chakra's first readers accepted, are inflated with the same bound) and every frame is
checked against what is left, so a truncated or hostile file is one ConfigError line
naming the file and the byte offset.

>>> encode_varint(300).hex()
'ac02'
>>> split_frames(frame(b"ab") + frame(b""), "x.et")
[(0, 1, 3), (3, 4, 4)]
>>> split_frames(b"\\x05ab", "x.et")
Traceback (most recent call last):
...
sim.errors.ConfigError: x.et: byte 0: a message of 5 bytes but only 2 bytes are left (truncated file)
"""

from __future__ import annotations

import gzip
import io
import os
import stat
import zlib

from sim.errors import ConfigError

__all__ = [
    "MAX_TRACE_BYTES",
    "decode_varint",
    "encode_varint",
    "frame",
    "read_bounded",
    "split_frames",
]

#: Largest ET file read (bytes, after gzip inflation). A PyTorch step of a large model
#: converts to tens to hundreds of MB per rank; 1 GiB bounds memory per file.
MAX_TRACE_BYTES = 2**30
#: Longest varint (a 64-bit value takes 10 bytes).
_MAX_VARINT_BYTES = 10
_GZIP_MAGIC = b"\x1f\x8b"


def encode_varint(value: int) -> bytes:
    """``value`` (>= 0) as a protobuf base-128 varint."""
    if value < 0:
        raise ValueError(f"varint of a negative value {value}")
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_varint(data: bytes | memoryview, pos: int, where: str) -> tuple[int, int]:
    """The varint at ``data[pos:]`` and the position after it.

    Raises
    ------
    ConfigError
        The file ends inside the varint, or it runs past 10 bytes.
    """
    value = shift = 0
    for k in range(_MAX_VARINT_BYTES):
        if pos + k >= len(data):
            raise ConfigError(
                f"{where}: byte {pos}: truncated varint (the file ends inside a message length)"
            )
        byte = data[pos + k]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos + k + 1
        shift += 7
    raise ConfigError(
        f"{where}: byte {pos}: a message length longer than {_MAX_VARINT_BYTES} bytes "
        "(not a Chakra ET file)"
    )


def frame(message: bytes) -> bytes:
    """``message`` after its length: one frame of an ET file."""
    return encode_varint(len(message)) + message


def split_frames(data: bytes, where: str) -> list[tuple[int, int, int]]:
    """Every frame of ``data`` as (offset of its length, start and end of its message).

    Raises
    ------
    ConfigError
        A truncated varint or a message longer than the bytes left.
    """
    frames: list[tuple[int, int, int]] = []
    pos = 0
    while pos < len(data):
        size, start = decode_varint(data, pos, where)
        if size > len(data) - start:
            raise ConfigError(
                f"{where}: byte {pos}: a message of {size:,} bytes but only "
                f"{len(data) - start:,} bytes are left (truncated file)"
            )
        frames.append((pos, start, start + size))
        pos = start + size
    return frames


def read_bounded(path: str | os.PathLike[str], max_bytes: int = MAX_TRACE_BYTES) -> bytes:
    """The bytes of the ET file ``path`` (inflated if gzip-compressed), read with a bound.

    Parameters
    ----------
    path : str or Path
    max_bytes : int
        Largest size accepted, before and after inflation.

    Raises
    ------
    ConfigError
        Missing, unreadable, not a regular file (a folder, a device such as /dev/zero, a
        pipe), larger than ``max_bytes``, or a corrupt gzip stream.
    """
    where = str(path)
    try:
        # O_NONBLOCK: opening a named pipe must not wait for a writer (it is refused below).
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            if not stat.S_ISREG(mode):
                what = "a folder" if stat.S_ISDIR(mode) else "not a regular file"
                raise ConfigError(f"{where}: {what}; a Chakra ET file is a regular file")
            raw = f.read(max_bytes + 1)
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{where}: a folder; a Chakra ET file is a regular file") from None
    except OSError as e:
        raise ConfigError(f"{where}: cannot read ({e.strerror})") from None
    if len(raw) > max_bytes:
        raise ConfigError(f"{where}: larger than {max_bytes:,} bytes, the most read")
    if raw.startswith(_GZIP_MAGIC):
        raw = _inflate(raw, max_bytes, where)
    return raw


def _inflate(raw: bytes, max_bytes: int, where: str) -> bytes:
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as g:
            data = g.read(max_bytes + 1)
    except (OSError, EOFError, zlib.error) as e:
        raise ConfigError(f"{where}: a corrupt gzip stream ({e})") from None
    if len(data) > max_bytes:
        raise ConfigError(f"{where}: inflates to more than {max_bytes:,} bytes, the most read")
    return data
