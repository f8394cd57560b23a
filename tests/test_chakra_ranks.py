"""Sets of ET files, one per rank (``PREFIX.RANK.et``), as ASTRA-sim names and reads them."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from sim.chakra import (
    COLLECTIVE_TYPES,
    Metadata,
    Node,
    Trace,
    match_collectives,
    op_bytes,
    rank_files,
    read_traces,
    write_traces,
)
from sim.errors import ConfigError

pytest.importorskip(
    "google.protobuf", reason="Chakra traces need protobuf: pip install 'clustersim[chakra]'"
)
from sim.chakra.messages import message_classes
from tests.chakra_protobuf import serialize_length_prefixed


def astra_microbenchmark(folder: Path, coll: str, npus: int, size_mb: int) -> Path:
    """Write traces exactly as ASTRA-sim's examples/workload/microbenchmarks/generator_scripts
    do (astra-sim@518bd51): per NPU ``{coll}.{npu}.et`` holding GlobalMetadata(version
    "0.0.4") and one COMM_COLL_NODE with is_cpu_op (bool), comm_type and comm_size (int64);
    the node id counts up across the files. Built with protobuf directly, not sim.chakra."""
    m = message_classes()
    et_path = folder / coll / f"{npus}npus_{size_mb}MB"
    et_path.mkdir(parents=True)
    for npu in range(npus):
        buf = io.BytesIO()
        serialize_length_prefixed(m.GlobalMetadata(version="0.0.4"), buf)
        node = m.Node(id=npu, name=f"{coll}_{npus}npus_{size_mb}MB", type=7)
        node.attr.add(name="is_cpu_op", bool_val=False)
        node.attr.add(name="comm_type", int64_val=COLLECTIVE_TYPES[coll.upper()])
        node.attr.add(name="comm_size", int64_val=size_mb * 1024 * 1024)
        serialize_length_prefixed(node, buf)
        (et_path / f"{coll}.{npu}.et").write_bytes(buf.getvalue())
    return et_path


@pytest.mark.parametrize("npus", [8, 16])
def test_astra_sim_all_reduce_microbenchmark_is_read(tmp_path: Path, npus: int) -> None:
    """A 64 MiB all-reduce on 8 and 16 ranks: one collective across every rank."""
    folder = astra_microbenchmark(tmp_path, "all_reduce", npus, 64)
    traces = read_traces(folder)
    assert traces.prefix == str(folder / "all_reduce") and traces.num_ranks == npus
    for rank, trace in enumerate(traces.traces):
        assert trace.metadata == Metadata("0.0.4")
        assert trace.nodes == (
            Node(
                rank,
                f"all_reduce_{npus}npus_64MB",
                "COMM_COLL_NODE",
                is_cpu_op=False,
                comm_type="ALL_REDUCE",
                comm_bytes=64 * 2**20,
            ),
        )
    (c,) = match_collectives(traces)
    assert (c.group, c.ranks, c.index) == ("", tuple(range(npus)), 0)
    assert (c.comm_type, c.comm_bytes, c.node_ids) == ("ALL_REDUCE", 2**26, tuple(range(npus)))
    assert op_bytes(c.comm_type, c.comm_bytes, npus) == 2**26


def test_astra_sim_all_gather_microbenchmark_sizes_per_rank(tmp_path: Path) -> None:
    """ASTRA-sim's all-gather comm_size is one rank's share: 1 MiB on 16 ranks gathers 16 MiB."""
    (c,) = match_collectives(read_traces(astra_microbenchmark(tmp_path, "all_gather", 16, 1)))
    assert c.comm_type == "ALL_GATHER" and c.comm_bytes == 2**20
    assert op_bytes(c.comm_type, c.comm_bytes, 16) == 16 * 2**20


def _ar(rank: int) -> Trace:
    node = Node(rank, "ar", "COMM_COLL_NODE", is_cpu_op=False, comm_type="ALL_REDUCE", comm_bytes=8)
    return Trace(Metadata("0.0.4"), (node,))


def test_write_traces_names_files_as_astra_sim_opens_them(tmp_path: Path) -> None:
    ts = write_traces(tmp_path / "step", [_ar(r) for r in range(3)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step.0.et", "step.1.et", "step.2.et"]
    assert ts.path(2) == str(tmp_path / "step.2.et")
    assert read_traces(tmp_path / "step") == ts


@pytest.mark.parametrize("how", ["prefix", "folder", "file"])
def test_a_set_is_found_from_its_prefix_folder_or_a_file(tmp_path: Path, how: str) -> None:
    write_traces(tmp_path / "w", [_ar(r) for r in range(12)])
    (tmp_path / "README.md").write_text("not a trace")
    (tmp_path / "w.comm_groups.json").write_text("{}")
    source = {"prefix": tmp_path / "w", "folder": tmp_path, "file": tmp_path / "w.7.et"}[how]
    prefix, files = rank_files(source)
    assert prefix == str(tmp_path / "w")
    assert [f.name for f in files] == [f"w.{r}.et" for r in range(12)]  # 10 after 9, not 1


def test_a_missing_rank_is_named(tmp_path: Path) -> None:
    write_traces(tmp_path / "w", [_ar(r) for r in range(4)])
    (tmp_path / "w.2.et").unlink()
    with pytest.raises(ConfigError, match=r"w\.2\.et: missing rank file \(3 files, highest rank 3"):
        read_traces(tmp_path)


def test_a_set_without_rank_0_is_refused(tmp_path: Path) -> None:
    write_traces(tmp_path / "w", [_ar(r) for r in range(2)])
    (tmp_path / "w.0.et").unlink()
    with pytest.raises(ConfigError, match=r"w\.0\.et: missing rank file"):
        read_traces(tmp_path / "w")


def test_a_folder_with_two_workloads_asks_for_a_name(tmp_path: Path) -> None:
    write_traces(tmp_path / "a", [_ar(0)])
    write_traces(tmp_path / "b", [_ar(0)])
    with pytest.raises(ConfigError, match=r"several workloads \(a, b\); give .*/NAME"):
        read_traces(tmp_path)
    assert read_traces(tmp_path / "b").prefix == str(tmp_path / "b")


def test_a_leading_zero_is_refused(tmp_path: Path) -> None:
    write_traces(tmp_path / "w", [_ar(0)])
    (tmp_path / "w.01.et").write_bytes((tmp_path / "w.0.et").read_bytes())
    with pytest.raises(ConfigError, match=r"w\.01\.et: rank 01 has a leading zero; .* w\.1\.et"):
        read_traces(tmp_path)


@pytest.mark.parametrize("source", ["nothing", "nofolder/w"])
def test_no_files_is_one_line(tmp_path: Path, source: str) -> None:
    with pytest.raises(ConfigError, match=r"no Chakra ET files|does not exist") as e:
        read_traces(tmp_path / source)
    assert "\n" not in str(e.value)


def test_a_bad_rank_file_is_named(tmp_path: Path) -> None:
    write_traces(tmp_path / "w", [_ar(r) for r in range(3)])
    (tmp_path / "w.1.et").write_bytes(b"\x05ab")
    with pytest.raises(ConfigError, match=r"w\.1\.et: byte 0: a message of 5 bytes"):
        read_traces(tmp_path)


def test_stale_rank_files_of_a_larger_set_are_refused(tmp_path: Path) -> None:
    """Writing 2 ranks over an old set of 4 would leave w.2.et, w.3.et to be read with them."""
    write_traces(tmp_path / "w", [_ar(r) for r in range(4)])
    with pytest.raises(
        ConfigError, match=r"w\.2\.et: already there .* \(2 files with ranks >= 2\)"
    ):
        write_traces(tmp_path / "w", [_ar(r) for r in range(2)])
    write_traces(tmp_path / "w", [_ar(r) for r in range(4)])  # the same size overwrites


def test_an_invalid_trace_writes_no_file(tmp_path: Path) -> None:
    bad = Trace(Metadata(), (Node(1, "x", "COMP_NODE", data_deps=(2,)),))
    with pytest.raises(ConfigError, match=r"w\.2\.et: node 1 'x': data_deps: 2 is not a node"):
        write_traces(tmp_path / "w", [_ar(0), _ar(1), bad])
    assert list(tmp_path.iterdir()) == []


def test_write_traces_needs_traces_and_a_folder(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no traces to write"):
        write_traces(tmp_path / "w", [])
    with pytest.raises(ConfigError, match=r"folder .*nofolder.* does not exist"):
        write_traces(tmp_path / "nofolder" / "w", [_ar(0)])
