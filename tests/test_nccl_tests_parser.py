"""nccl-tests import: every public log in ../shared/data/nccl-tests parses to what its
``# source:`` header says, and bad logs fail naming the line."""

from __future__ import annotations

from pathlib import Path

import pytest

from calibrate.measurements import (
    DTYPE_BYTES,
    Measurements,
    load_measurements,
    save_measurements,
)
from calibrate.nccl_tests import import_nccl_tests, parse_nccl_tests
from sim.collectives.schedule import busbw_factor
from sim.errors import CalibrationError

DATA = Path(__file__).parents[2] / "shared" / "data" / "nccl-tests"
FIXED = "2025-01-01T00:00:00Z"

# file → (op, ranks, nodes, GPUs per node, rows); nodes/GPUs None where the log has no
# complete device lines (the source header may know more than the log prints).
EXPECTED: dict[str, tuple[str, int, int | None, int | None, int]] = {
    "a100-1node-8gpu-sendrecv.txt": ("send_recv", 8, None, None, 4),
    "a100-2node-16gpu-efa-all_reduce.txt": ("all_reduce", 16, None, None, 29),
    "b300-1node-8gpu-alltoall.txt": ("all_to_all", 8, None, None, 1),
    "dgx-h100-1node-8gpu-all_reduce.txt": ("all_reduce", 8, 1, 8, 32),
    "gb200-nvl72-72gpu-all_reduce.txt": ("all_reduce", 72, None, None, 5),
    "h100-2node-16gpu-ib-all_reduce.txt": ("all_reduce", 16, None, None, 31),
    "h100-2node-16gpu-tcpxo-all_gather.txt": ("all_gather", 16, None, None, 11),
    "l40s-2node-2gpu-tcp-all_reduce.txt": ("all_reduce", 2, 2, 1, 31),
    "rtx4090-1node-2gpu-pcie-all_reduce.txt": ("all_reduce", 2, 1, 2, 29),
}

ROW = "{size:>12} {count:>12}  float  sum  -1  {t:>8}  {a:>6}  {b:>6}  0  {t:>8}  {a:>6}  {b:>6}  0"
HEADER = "#  size  count  type  redop  root  time  algbw  busbw #wrong  time  algbw  busbw #wrong"


def _logs() -> list[Path]:
    if not DATA.is_dir():
        pytest.skip(f"shared nccl-tests logs not found at {DATA} (expected beside the checkout)")
    logs = sorted(DATA.glob("*.txt"))
    if not logs:
        pytest.skip(f"no *.txt logs in {DATA}")
    return logs


def _parse(path: Path) -> Measurements:
    return parse_nccl_tests(path.read_text(), str(path), created=FIXED)


def _close(x: float, printed: float) -> bool:
    """Equal within the log's rounding: 2 decimals for GB/s, ~4 significant digits for µs."""
    return abs(x - printed) <= 0.006 + 0.002 * printed


def test_every_shared_log_is_known() -> None:
    """A new log in ../shared must get an expectation here, so nothing is parsed unchecked."""
    assert sorted(p.name for p in _logs()) == sorted(EXPECTED)


def test_every_shared_log_parses_to_its_source_header() -> None:
    """Op, ranks, nodes, GPUs per node and row count match each file's ``# source:`` line."""
    for path in _logs():
        m = _parse(path)
        op, ranks, nodes, gpn, rows = EXPECTED[path.name]
        got = ({r.op for r in m.collectives}, {r.n_ranks for r in m.collectives}, m.meta.nodes,
               m.meta.gpus_per_node, len(m.collectives))  # fmt: skip
        assert got == ({op}, {ranks}, nodes, gpn, 2 * rows), path.name
        assert m.meta.world_size == ranks and m.meta.backend == "nccl", path.name
        assert m.meta.details["n_ranks_source"], path.name


def test_sweeps_increase_and_sizes_match_counts() -> None:
    """Within each log the out-of-place sizes increase, and size = count × element × (n)."""
    for path in _logs():
        m = _parse(path)
        sizes = [r.size_bytes for r in m.collectives if not r.in_place]
        assert sizes == sorted(set(sizes)), path.name
        for r in m.collectives:
            per_rank = r.n_ranks if r.op in ("all_gather", "reduce_scatter", "all_to_all") else 1
            assert r.size_bytes == r.count * DTYPE_BYTES[r.dtype] * per_rank, path.name


def test_busbw_recomputed_from_time_and_size_matches_printed() -> None:
    """algbw = size/time and busbw = algbw × busbw_factor(op, n): so op and n are right."""
    for path in _logs():
        for r in _parse(path).collectives:
            algbw = r.size_bytes / r.time_s / 1e9
            assert _close(algbw, r.algbw_GBps), (path.name, r)
            assert _close(algbw * busbw_factor(r.op, r.n_ranks), r.busbw_GBps), (path.name, r)


def test_device_lines_give_hosts_and_gpu_model() -> None:
    """dgx-h100: one host, the H100 name; gb200: only "Rank 71" printed → 72 ranks."""
    _logs()
    dgx = _parse(DATA / "dgx-h100-1node-8gpu-all_reduce.txt")
    assert dgx.meta.hosts == ("pool0-01806",)
    assert dgx.meta.gpu_model == "NVIDIA H100 80GB HBM3"
    gb200 = _parse(DATA / "gb200-nvl72-72gpu-all_reduce.txt")
    assert gb200.meta.details["n_ranks_source"] == "device lines"
    assert any("1 of 72 ranks" in n for n in gb200.meta.notes)


def test_version_command_and_inference_sources_are_recorded() -> None:
    """l40s: NCCL version line, the mpirun command; efa: ranks from busbw/algbw."""
    _logs()
    l40s = _parse(DATA / "l40s-2node-2gpu-tcp-all_reduce.txt")
    assert l40s.meta.nccl_version == "2.27.3+cuda12.9"
    assert "all_reduce_perf" in str(l40s.meta.details["command"])
    efa = _parse(DATA / "a100-2node-16gpu-efa-all_reduce.txt")
    assert efa.meta.details["n_ranks_source"] == "busbw/algbw ratio"
    sendrecv = _parse(DATA / "a100-1node-8gpu-sendrecv.txt")
    assert str(sendrecv.meta.details["n_ranks_source"]).startswith("nGpus")  # -g 8 on the command


def test_import_writes_one_deterministic_file(tmp_path: Path) -> None:
    """All logs → one measurements file; the same inputs give the same bytes and load back."""
    logs = _logs()
    a = import_nccl_tests(logs, tmp_path / "a.json", created=FIXED)
    import_nccl_tests(logs, tmp_path / "b.json", created=FIXED)
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert load_measurements(tmp_path / "a.json") == a
    assert len(a.records) == sum(2 * e[4] for e in EXPECTED.values())


def _table(rows: list[str], head: str = HEADER) -> str:
    return "\n".join(["# Collective test starting: all_reduce_perf", "#", head, *rows]) + "\n"


def _good_rows() -> list[str]:
    return [ROW.format(size=s, count=s // 4, t="20.00", a=f"{s / 20e3:.2f}", b=f"{s / 20e3:.2f}")
            for s in (1024, 2048, 4096)]  # fmt: skip


def test_prefixes_and_elisions_are_tolerated() -> None:
    """``[1,0]<stdout>:`` and ``3: `` prefixes, ``...`` rows, N/A in-place times all parse."""
    rows = _good_rows()
    rows[2] = f"{4096:>12} {1024:>12}  float  sum  -1  20.00  0.20  0.20  0  N/A  N/A  N/A  N/A"
    text = _table(["...   512   float  sum  -1  9.0  0.06  0.06  0", *rows], head=HEADER)
    text = "\n".join(f"[1,0]<stdout>:{x}" if i % 2 else f"3: {x}" for i, x in
                     enumerate(text.splitlines()))  # fmt: skip
    m = parse_nccl_tests(text, "mixed.log", n_ranks=2, created=FIXED)
    assert [(r.size_bytes, r.in_place) for r in m.collectives] == [
        (1024, False), (1024, True), (2048, False), (2048, True), (4096, False)]  # fmt: skip
    assert any("elided" in n for n in m.meta.notes)
    assert any("N/A" in n for n in m.meta.notes)


@pytest.mark.parametrize("text", ["", "\n\n", "# nThread 1 nGpus 1\n#\n"])
def test_empty_log_is_an_error(text: str) -> None:
    """No result rows → CalibrationError naming the source."""
    with pytest.raises(CalibrationError, match=r"empty\.log: no nccl-tests result rows"):
        parse_nccl_tests(text, "empty.log")


def test_garbled_number_names_the_line() -> None:
    """A corrupted time field: the error gives the line number and the line."""
    rows = _good_rows()
    rows[1] = rows[1].replace("20.00", "2x.00", 1)
    with pytest.raises(CalibrationError, match=r"bad\.log, line 5: cannot read time '2x\.00'"):
        parse_nccl_tests(_table(rows), "bad.log", n_ranks=2)


def test_garbage_inside_the_table_names_the_line() -> None:
    """A non-nccl-tests line between rows is garbage (prose after the table is not)."""
    rows = _good_rows()
    rows.insert(1, "@@@ segfault in libfoo @@@")
    with pytest.raises(CalibrationError, match=r"line 5: not nccl-tests output.*segfault"):
        parse_nccl_tests(_table(rows), "bad.log", n_ranks=2)
    ok = parse_nccl_tests(_table([*_good_rows(), "Note: prose after"]), "ok.log", n_ranks=2)
    assert len(ok.collectives) == 6


def test_short_row_and_pure_junk_name_the_line() -> None:
    """Too few columns, or no table at all: the first offending line is named."""
    with pytest.raises(CalibrationError, match=r"line 4: expected 13 columns"):
        parse_nccl_tests(_table(["  1024  256  float  sum"]), "short.log", n_ranks=2)
    with pytest.raises(CalibrationError, match=r"line 1 is not nccl-tests output: 'xx\\x00"):
        parse_nccl_tests("xx\x00garbage\nmore junk\n", "junk.bin")


def test_op_disagreements_and_unknowns_are_errors() -> None:
    """op= against the log's own binary, an unsupported binary, an undecidable op."""
    _logs()
    l40s = (DATA / "l40s-2node-2gpu-tcp-all_reduce.txt").read_text()
    with pytest.raises(CalibrationError, match="op='all_gather' given but the log runs"):
        parse_nccl_tests(l40s, "l40s.log", op="all_gather")
    with pytest.raises(CalibrationError, match=r"line 1: scatter_perf is not supported"):
        parse_nccl_tests(_table(_good_rows()).replace("all_reduce", "scatter"), "s.log")
    tcpxo = (DATA / "h100-2node-16gpu-tcpxo-all_gather.txt").read_text()
    with pytest.raises(CalibrationError, match=r"cannot tell which collective.*pass op="):
        parse_nccl_tests(tcpxo, "renamed.log")
    assert parse_nccl_tests(tcpxo, "renamed.log", op="all_gather").collectives[0].n_ranks == 16


def test_unknown_rank_count_asks_for_n_ranks() -> None:
    """broadcast rows with no device lines or nGpus: busbw = algbw says nothing about n."""
    rows = [r.replace(" sum  -1", " none   0") for r in _good_rows()]
    with pytest.raises(CalibrationError, match="pass n_ranks="):
        parse_nccl_tests(_table(rows).replace("all_reduce", "broadcast"), "b.log")


def test_roundtrip_of_an_import_is_exact(tmp_path: Path) -> None:
    """save → load gives an equal object; saving again gives the same bytes."""
    logs = _logs()
    m = _parse(logs[0])
    save_measurements(m, tmp_path / "m.json")
    back = load_measurements(tmp_path / "m.json")
    assert back == m
    save_measurements(back, tmp_path / "n.json")
    assert (tmp_path / "m.json").read_bytes() == (tmp_path / "n.json").read_bytes()
