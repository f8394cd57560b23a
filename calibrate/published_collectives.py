"""Published one-node collective bandwidths as validation data: the 8 x H200 table.

``h200-1node-collectives-16GiB.csv`` (../shared/data/published; transcribed from
github.com/stas00/ml-engineering network/README.md, nccl-tests on one 8 x H200 node):
bus bandwidth at 16 GiB of all-reduce with NVLS and with rings (``NCCL_NVLS_ENABLE=0``),
all-gather and reduce-scatter.

Assumptions (stated, not tuned): the node is the ``hgx-h200`` preset (8 x H200 on
NVSwitch, the DGX H100's layout: NVIDIA H200 datasheet, NVLink 900 GB/s), with the profile
the simulator selects for it (``h200-ops``: its compute was measured on an H200, its
collectives are the shipped NVLink defaults, fitted on no log of this table's kind), nccl-
tests' float elements. Run ``python benchmarks/validate_collectives.py``.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from sim.collectives.simulate import CollectiveSetup, simulate_collective
from sim.errors import CalibrationError, ConfigError
from sim.profile_select import resolve_profile
from sim.topology.presets import load_topology
from sim.units import parse_bandwidth

__all__ = ["H200_TABLE", "PublishedBusbw", "predict_busbw", "read_h200_table"]

#: The table's file name under the published-data folder.
H200_TABLE = "h200-1node-collectives-16GiB.csv"
#: nccl-tests' message size of every row (the file's context: "16GiB").
SIZE_BYTES = 16 * 2**30
#: Cell text of the ``collective`` column -> (op, algorithm).
_ROWS = {
    "all-reduce, `NCCL_NVLS_ENABLE=1`": ("all_reduce", "nvls"),
    "all-reduce, `NCCL_NVLS_ENABLE=0`": ("all_reduce", "ring"),
    "all-gather": ("all_gather", "ring"),
    "reduce-scatter": ("reduce_scatter", "ring"),
}


@dataclass(frozen=True)
class PublishedBusbw:
    """One row: nccl-tests ``op`` with ``algorithm`` at ``size_bytes``, ``busbw_Bps``."""

    op: str
    algorithm: str
    size_bytes: int
    busbw_Bps: float


def read_h200_table(path: str | Path) -> list[PublishedBusbw]:
    """Read the 8 x H200 table (line 1: source, line 2: header).

    Raises CalibrationError when the file is absent, not that table, or names a
    collective this reader does not map.
    """
    try:
        lines = Path(path).read_text().splitlines()[1:]
        rows = list(csv.DictReader(lines))
        out = []
        for r in rows:
            if r["collective"] not in _ROWS:
                raise CalibrationError(f"{path}: unknown collective {r['collective']!r}")
            op, algo = _ROWS[r["collective"]]
            out.append(PublishedBusbw(op, algo, SIZE_BYTES, parse_bandwidth(r["busbw"], "busbw")))
    except (OSError, KeyError, ConfigError) as e:
        raise CalibrationError(f"{path}: not the 8 x H200 collectives table ({e})") from None
    return out


@cache
def _node() -> CollectiveSetup:
    """Every GPU of ``hgx-h200`` with the profile the simulator selects for it (built once)."""
    topo = load_topology("hgx-h200")
    return CollectiveSetup(topo, None, resolve_profile(None, topo).profile.collectives)


def predict_busbw(row: PublishedBusbw, network: str = "analytical") -> float:
    """Bus bandwidth (bytes/s) the simulator gives for ``row`` on ``hgx-h200`` with
    ``network`` (``analytical`` or ``flow``)."""
    r = simulate_collective(_node(), row.op, row.size_bytes, algorithm=row.algorithm,
                            network=network)  # fmt: skip
    return r.busbw_Bps
