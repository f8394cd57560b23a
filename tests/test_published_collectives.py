"""The 8 x H200 collectives table (../shared/data/published/h200-1node-collectives-16GiB.csv,
from github.com/stas00/ml-engineering network/README.md): the reader and the simulator
against it (``benchmarks/validate_collectives.py``). Tests of the published rows skip
without ../shared/data.

Tolerance: 5% per row (the four rows are within 3.2% on 2026-12-02, on the ``hgx-h200``
preset with the shipped NVLink defaults; the fitted ``h100-nvlink`` profile's hold-out
median on its own DGX H100 log is 2.6%).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from calibrate.fit_training import DATA
from calibrate.published_collectives import (
    H200_TABLE,
    PublishedBusbw,
    predict_busbw,
    read_h200_table,
)
from sim.errors import CalibrationError

TABLE = DATA / H200_TABLE
needs_data = pytest.mark.skipif(not TABLE.exists(), reason=f"published data absent: {TABLE}")
HEADER = "# source: a table\ncollective,algo,busbw,% of 450GBps\n"


def test_rows_are_read_as_ops_algorithms_and_bytes_per_second(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(HEADER + '"all-reduce, `NCCL_NVLS_ENABLE=1`",NVLS,480.0GBps,107%\n'
                    "reduce-scatter,Ring,362.9GBps,81%\n")  # fmt: skip
    assert read_h200_table(path) == [
        PublishedBusbw("all_reduce", "nvls", 16 * 2**30, 480e9),
        PublishedBusbw("reduce_scatter", "ring", 16 * 2**30, 362.9e9),
    ]


@pytest.mark.parametrize(
    ("body", "match"),
    [("broadcast,Ring,300GBps,66%\n", "unknown collective 'broadcast'"),
     ("all-gather,Ring,fast,80%\n", "not the 8 x H200 collectives table")],
)  # fmt: skip
def test_a_file_that_is_not_the_table_is_refused(tmp_path: Path, body: str, match: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text(HEADER + body)
    with pytest.raises(CalibrationError, match=match):
        read_h200_table(path)
    with pytest.raises(CalibrationError, match="not the 8 x H200"):
        read_h200_table(tmp_path / "absent.csv")


@needs_data
@pytest.mark.parametrize("row", read_h200_table(TABLE) if TABLE.exists() else [], ids=str)
def test_each_published_bus_bandwidth_within_5_percent_on_both_networks(
    row: PublishedBusbw,
) -> None:
    for network in ("analytical", "flow"):
        assert predict_busbw(row, network) == pytest.approx(row.busbw_Bps, rel=0.05)


@needs_data
def test_nvls_beats_rings_as_published() -> None:
    """NVLS all-reduce (NVSwitch reduces in the fabric) over ring all-reduce: 1.31x
    published; the simulator keeps the order and a ratio within 10% of it."""
    rows = {(r.op, r.algorithm): r for r in read_h200_table(TABLE)}
    nvls, ring = rows[("all_reduce", "nvls")], rows[("all_reduce", "ring")]
    published = nvls.busbw_Bps / ring.busbw_Bps
    assert predict_busbw(nvls) / predict_busbw(ring) == pytest.approx(published, rel=0.10)
