"""Parse quantities with units at the input boundary; SI base units inside.

Bytes use SI (``KB`` = 1e3) and binary (``KiB`` = 1024) prefixes; a bare ``K``/``M``/``G``
in a *size* means binary, as nccl-tests' ``-b 8 -e 16G`` does. Bandwidths distinguish bits
(``Gb/s``, ``Gbps``) from bytes (``GB/s``, ``GBps``): ``400Gb/s`` is 50e9 bytes/s.
"""

from __future__ import annotations

import math
import re

from sim.errors import ConfigError

__all__ = [
    "format_bandwidth",
    "format_bytes",
    "format_time",
    "parse_bandwidth",
    "parse_bytes",
    "parse_flops",
    "parse_size",
    "parse_time",
]

_NUM = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
_SI = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BIN = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
_BARE_BIN = {
    "": 1.0, "K": 2.0**10, "k": 2.0**10, "M": 2.0**20, "G": 2.0**30, "T": 2.0**40, "P": 2.0**50,
}  # fmt: skip


def _number(value: object, what: str) -> float | None:
    """Return ``value`` as a float when it is already a number, else None."""
    if isinstance(value, bool):
        raise ConfigError(f"{what}: expected a number with a unit, got {value!r}")
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:
            raise ConfigError(f"{what}: {str(value)[:20]}... is too large") from None
    if not isinstance(value, str):
        raise ConfigError(f"{what}: expected a number or a string like '16GiB', got {value!r}")
    return None


def _check(x: float, text: object, what: str, allow_zero: bool) -> float:
    if not math.isfinite(x) or x < 0 or (x == 0 and not allow_zero):
        need = "a non-negative" if allow_zero else "a positive"
        raise ConfigError(f"{what}: {text!r} must be {need} finite quantity")
    return x


def parse_bytes(value: object, what: str = "size", allow_zero: bool = False) -> float:
    """Parse a byte count: ``8``, ``"512"``, ``"1.5KB"``, ``"16GiB"``, ``"16G"``.

    Returns bytes (float). ``K/M/G/T`` without ``i`` or ``B`` are binary (nccl-tests
    style); ``KB/MB/GB`` are decimal; ``KiB/MiB/GiB`` are binary.

    >>> parse_bytes("16G") == 16 * 2**30
    True
    >>> parse_bytes("1.5KB")
    1500.0
    """
    x = _number(value, what)
    if x is None:
        m = re.fullmatch(_NUM + r"\s*([kKMGTP]?)(i?)(B?)", str(value).strip())
        if not m:
            raise ConfigError(
                f"{what}: cannot read {value!r} as bytes; use e.g. 8, 64K, 1MiB, 16GiB, 1.5GB"
            )
        num, prefix, binary, b = float(m.group(1)), m.group(2), m.group(3), m.group(4)
        if binary:  # KiB, MiB, ...: needs both a prefix and the B
            if not (prefix and b):
                raise ConfigError(f"{what}: cannot read {value!r} as bytes; write e.g. 16GiB")
            x = num * _BIN[prefix.upper() + "i"]
        elif b:
            x = num * _SI[prefix]
        else:
            x = num * _BARE_BIN[prefix]
    return _check(x, value, what, allow_zero)


def parse_size(value: object, what: str = "size", minimum: int = 1) -> int:
    """Parse a size in whole bytes, at least ``minimum``: ``8``, ``"1.5KB"``, ``"25MiB"``.

    A buffer, message, bucket or chunk holds whole bytes: ``1.5`` and ``0.5`` bytes are
    refused (not rounded to 1 or 0), as is ``1e-300``. A decimal prefix's float error
    (``1.1KB`` is 1100.0000000000002) is not a fraction.

    >>> parse_size("25MB"), parse_size(25), parse_size("1.5KB")
    (25000000, 25, 1500)
    >>> parse_size(1.5, "parallel.bucket_bytes")
    Traceback (most recent call last):
    ...
    sim.errors.ConfigError: parallel.bucket_bytes: 1.5 is not a whole number of bytes
    """
    x = parse_bytes(value, what, allow_zero=True)
    whole = round(x)
    if abs(x - whole) > 1e-9 * max(1.0, x):
        raise ConfigError(f"{what}: {value!r} is not a whole number of bytes")
    if whole < minimum:
        raise ConfigError(f"{what}: {value!r} is below the smallest size, {minimum} byte(s)")
    return int(whole)


def parse_bandwidth(value: object, what: str = "bandwidth") -> float:
    """Parse a bandwidth into bytes per second.

    ``"400Gb/s"``/``"400Gbps"`` are bits (50e9 B/s); ``"900GB/s"``/``"900GBps"`` are bytes.
    A bare number is already bytes/s.

    >>> parse_bandwidth("400Gb/s")
    50000000000.0
    >>> parse_bandwidth("450GB/s")
    450000000000.0
    """
    x = _number(value, what)
    if x is None:
        m = re.fullmatch(_NUM + r"\s*([kKMGTP]?)(i?)([bB])(?:/s|ps)", str(value).strip())
        if not m:
            raise ConfigError(
                f"{what}: cannot read {value!r} as a bandwidth; use e.g. 400Gb/s, 450GB/s, 25GBps"
            )
        num, prefix, binary, unit = float(m.group(1)), m.group(2), m.group(3), m.group(4)
        scale = _BIN[prefix.upper() + "i"] if binary and prefix else _SI[prefix]
        x = num * scale / (8.0 if unit == "b" else 1.0)
    return _check(x, value, what, allow_zero=False)


def parse_time(value: object, what: str = "time", allow_zero: bool = True) -> float:
    """Parse a duration into seconds: ``"1.5us"``, ``"200ns"``, ``"3ms"``, ``"2s"``, ``1e-6``.

    >>> parse_time("1.5us")
    1.5e-06
    """
    x = _number(value, what)
    if x is None:
        m = re.fullmatch(_NUM + r"\s*(ns|us|µs|ms|s)", str(value).strip())
        if not m:
            raise ConfigError(
                f"{what}: cannot read {value!r} as a time; use e.g. 200ns, 1.5us, 3ms"
            )
        scale = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}[m.group(2)]
        x = float(m.group(1)) * scale
    return _check(x, value, what, allow_zero)


def parse_flops(value: object, what: str = "FLOP/s") -> float:
    """Parse a compute rate into FLOP/s: ``"989TFLOPS"``, ``"989 TFLOP/s"``, ``9.89e14``.

    >>> parse_flops("989TFLOP/s")
    989000000000000.0
    """
    x = _number(value, what)
    if x is None:
        m = re.fullmatch(_NUM + r"\s*([kKMGTP]?)FLOP(?:/s|S|s)", str(value).strip())
        if not m:
            raise ConfigError(f"{what}: cannot read {value!r} as FLOP/s; use e.g. 989TFLOP/s")
        x = float(m.group(1)) * _SI[m.group(2)]
    return _check(x, value, what, allow_zero=False)


def format_bytes(nbytes: float) -> str:
    """Human-readable binary size, e.g. ``'16 GiB'`` or ``'512 B'``.

    >>> format_bytes(2**34)
    '16 GiB'
    """
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            v = nbytes / scale
            return f"{v:g} {unit}" if v == int(v) else f"{v:.2f} {unit}"
    return f"{nbytes:g} B"


def format_bandwidth(bandwidth_Bps: float) -> str:
    """A bandwidth as text that :func:`parse_bandwidth` reads back to the same float:
    ``Gb/s`` when that is exact, else bytes/s.

    >>> format_bandwidth(50e9), format_bandwidth(37.5e9), format_bandwidth(1e10 / 3)
    ('400Gb/s', '300Gb/s', '3333333333.3333335B/s')
    """
    gbit = bandwidth_Bps * 8 / 1e9
    for text in (f"{gbit:g}Gb/s", f"{bandwidth_Bps / 1e9:g}GB/s"):
        if parse_bandwidth(text) == bandwidth_Bps:
            return text
    return f"{float(bandwidth_Bps)!r}B/s"


def format_time(seconds: float) -> str:
    """A time as text that :func:`parse_time` reads back to the same float (``us`` when
    exact, else seconds).

    >>> format_time(1.5e-06), format_time(0.0), format_time(1e-6 / 3)
    ('1.5us', '0us', '3.333333333333333e-07s')
    """
    text = f"{seconds * 1e6:g}us"
    return text if parse_time(text) == seconds else f"{float(seconds)!r}s"
