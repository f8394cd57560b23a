"""Units are parsed only at the input boundary: bits vs bytes, SI vs binary, clear errors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.errors import ConfigError
from sim.units import format_bytes, parse_bandwidth, parse_bytes, parse_flops, parse_time


@pytest.mark.parametrize(
    ("text", "expected"),
    [("8", 8.0), ("64K", 65536.0), ("16G", 16 * 2**30), ("1.5KB", 1500.0), ("16GiB", 16 * 2**30),
     ("2MiB", 2 * 2**20), ("1GB", 1e9), (4096, 4096.0), ("1e3", 1000.0)],
)  # fmt: skip
def test_bytes(text: object, expected: float) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("400Gb/s", 50e9),
        ("400Gbps", 50e9),
        ("900GB/s", 900e9),
        ("25GBps", 25e9),
        ("100Mb/s", 12.5e6),
        (1e9, 1e9),
    ],
)
def test_bandwidth_minds_bits_and_bytes(text: object, expected: float) -> None:
    assert parse_bandwidth(text) == pytest.approx(expected)


def test_time_and_flops() -> None:
    assert parse_time("200ns") == pytest.approx(2e-7)
    assert parse_time("3ms") == pytest.approx(3e-3)
    assert parse_flops("989.4TFLOP/s") == pytest.approx(989.4e12)


@pytest.mark.parametrize(
    ("fn", "text", "needle"),
    [(parse_bytes, "1X", "1X"), (parse_bytes, "16Gi", "16Gi"), (parse_bytes, "-3", "-3"), (parse_bytes, "0", "0"),
     (parse_bandwidth, "400G", "400G"), (parse_bandwidth, "0Gb/s", "0Gb/s"), (parse_time, "5 parsecs", "parsecs"),
     (parse_bytes, True, "True"), (parse_bytes, [1], "[1]")],
)  # fmt: skip
def test_bad_units_name_the_value(fn: object, text: object, needle: str) -> None:
    with pytest.raises(ConfigError, match=None) as e:
        fn(text)  # type: ignore[operator]
    assert needle in str(e.value) and "\n" not in str(e.value)


@given(st.integers(1, 2**50))
def test_format_then_parse_round_trips_binary_sizes(n: int) -> None:
    text = format_bytes(float(n)).replace(" ", "")
    assert parse_bytes(text) == pytest.approx(n, rel=5e-3)
