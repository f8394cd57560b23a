"""Chakra trace sets simulated on clustersim's topologies: ASTRA-sim's microbenchmarks,
hand-made traces whose time has a closed form, folding, refusals, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.chakra import Attr, Metadata, Node, Trace, write_traces
from sim.chakra.run import p2p_latency_s, run_traces
from sim.cli import main
from sim.collectives.simulate import CollectiveSetup, simulate_collective
from sim.errors import ConfigError
from sim.profile_select import resolve_profile
from sim.topology.presets import load_topology
from sim.training.compute.passes import CollectiveTimer
from sim.training.graph.listsched import comm_time_s
from sim.training.graph.task import TRANSFER, Comm

pytest.importorskip(
    "google.protobuf", reason="Chakra traces need protobuf: pip install 'clustersim[chakra]'"
)
from tests.test_chakra_ranks import astra_microbenchmark

MIB = 2**20
META = Metadata("0.0.4")


def _params(topology: str, nodes: int | None):  # type: ignore[no-untyped-def]
    topo = load_topology(topology, nodes=nodes)
    return topo, resolve_profile(None, topo).profile.collectives


@pytest.mark.parametrize("network", ["analytical", "flow"])
@pytest.mark.parametrize(("npus", "topology", "nodes"), [(8, "dgx-h100", None),
                                                          (16, "h100-ib-ndr", 2)])  # fmt: skip
def test_astra_sim_all_reduce_microbenchmark_runs(
    tmp_path: Path, network: str, npus: int, topology: str, nodes: int | None
) -> None:
    """ASTRA-sim's all_reduce microbenchmark (one COMM_COLL_NODE per rank: is_cpu_op,
    comm_type, comm_size of 64 MiB) takes what simulate_collective says the same all-reduce
    takes on the same GPUs: exactly on the analytical network; on the flow network within
    3% (the step executor runs a ring's uniform phases coalesced on a shared network,
    sim.training.graph.simulate.COALESCE, where simulate_collective times the collective
    alone: +2.0% for 16 H100 over NDR, 0.0% for 8 on NVSwitch)."""
    folder = astra_microbenchmark(tmp_path, "all_reduce", npus, 64)
    r = run_traces(folder, topology, nodes=nodes, network=network)
    topo, params = _params(topology, nodes)
    ref = simulate_collective(CollectiveSetup(topo, npus, params), "all_reduce", 64 * MIB,
                              network=network)  # fmt: skip
    tol = 1e-12 if network == "analytical" else 0.03
    assert r.time_s == pytest.approx(ref.time_s, rel=tol)
    assert r.counts == {"collective": 1} and r.ranks == npus
    assert r.rank_end_s == [r.time_s] * npus


def _write(tmp_path: Path, nodes_by_rank: list[list[Node]], name: str = "t") -> str:
    prefix = str(tmp_path / name)
    write_traces(prefix, [Trace(META, tuple(nodes)) for nodes in nodes_by_rank])
    return prefix


def comp(i: int, us: int, *deps: int, cpu: bool = False) -> Node:
    return Node(i, f"c{i}", "COMP_NODE", data_deps=deps, duration_micros=us, is_cpu_op=cpu)


def test_send_then_compute_takes_the_transfer_and_its_latency(tmp_path: Path) -> None:
    """Rank 0 computes 100 us and sends 1 MiB; rank 1 receives it, then computes 50 us:
    100 us + the analytical transfer + NCCL's send/recv latency + 50 us."""
    send = Node(1, "s", "COMM_SEND_NODE", data_deps=(0,), comm_dst=1, comm_tag=7, comm_bytes=MIB)
    recv = Node(0, "r", "COMM_RECV_NODE", comm_src=0, comm_tag=7, comm_bytes=MIB)
    prefix = _write(tmp_path, [[comp(0, 100), send], [recv, comp(1, 50, 0)]])
    r = run_traces(prefix, "dgx-h100", network="analytical")
    topo, params = _params("dgx-h100", None)
    timer = CollectiveTimer(topo, params, "analytical")
    wire = comm_time_s(timer, TRANSFER, (Comm("send", MIB, ((topo.gpus[0], topo.gpus[1]),),
                                              latency_s=p2p_latency_s(params)),))  # fmt: skip
    assert r.time_s == pytest.approx(100e-6 + wire + 50e-6, rel=1e-12)
    assert r.rank_end_s[0] == pytest.approx(100e-6 + wire, rel=1e-12)
    assert r.counts == {"compute": 2, "transfer": 1, "receive": 1}


def test_collectives_of_one_rank_run_one_at_a_time(tmp_path: Path) -> None:
    """Two independent all-reduces on the same ranks: ASTRA-sim's one communication node at
    a time per rank makes them take twice one."""
    ar = [Node(i, f"ar{i}", "COMM_COLL_NODE", comm_type="ALL_REDUCE", comm_bytes=4 * MIB)
          for i in (0, 1)]  # fmt: skip
    one = run_traces(_write(tmp_path, [ar[:1]] * 4, "one"), "dgx-h100", network="analytical")
    two = run_traces(_write(tmp_path, [ar] * 4, "two"), "dgx-h100", network="analytical")
    assert two.time_s == pytest.approx(2 * one.time_s, rel=1e-12)
    assert two.counts == {"collective": 2}


def test_cpu_ops_overlap_gpu_compute_and_metadata_takes_no_time(tmp_path: Path) -> None:
    """A CPU op runs beside GPU compute (its own stream); metadata and invalid nodes are
    zero-time; a memory node is zero-time and said so."""
    nodes = [
        Node(0, "pg", "METADATA_NODE"),
        comp(1, 100, 0),
        comp(2, 80, 0, cpu=True),
        Node(3, "x", "INVALID_NODE", data_deps=(1,)),
        Node(4, "m", "MEM_LOAD_NODE", data_deps=(3,),
             attrs=(Attr("tensor_size", "uint64_val", 4096),)),
        comp(5, 10, 4),
    ]  # fmt: skip
    r = run_traces(_write(tmp_path, [nodes]), "single-h100", network="analytical")
    assert r.time_s == pytest.approx(110e-6, rel=1e-12)
    assert r.counts["memory_not_simulated"] == 1
    assert any("1 memory nodes (4,096 B) take no time" in n for n in r.notes)


def test_a_barrier_synchronises_without_moving_bytes(tmp_path: Path) -> None:
    """Rank 1 computes 300 us before a barrier, rank 0 only 10: both end together at 300 us."""
    barrier = [Node(1, "b", "COMM_COLL_NODE", data_deps=(0,), comm_type="BARRIER", comm_bytes=0)]
    prefix = _write(tmp_path, [[comp(0, 10), *barrier], [comp(0, 300), *barrier]])
    r = run_traces(prefix, "dgx-h100", network="flow")
    assert r.rank_end_s == [pytest.approx(300e-6, rel=1e-12)] * 2


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 500), st.booleans(), st.integers(0, 5)), min_size=1,
                max_size=12))  # fmt: skip
def test_compute_only_rank_takes_its_streams(tmp_path_factory, spec) -> None:  # type: ignore[no-untyped-def]
    """One rank of compute nodes (random durations, CPU or GPU, random dependencies on
    earlier nodes): GPU nodes run one at a time and so do CPU nodes, so the time is at
    least each stream's sum and the longest dependency chain, at most the sum of all."""
    nodes, finish = [], []
    for i, (us, cpu, back) in enumerate(spec):
        deps = (i - 1 - back,) if i - 1 - back >= 0 else ()
        nodes.append(comp(i, us, *deps, cpu=cpu))
        finish.append(us + (finish[deps[0]] if deps else 0))
    prefix = _write(tmp_path_factory.mktemp("h"), [nodes])
    t = run_traces(prefix, "single-h100", network="analytical").time_s * 1e6
    gpu = sum(us for us, cpu, _ in spec if not cpu)
    cpu_sum = sum(us for us, cpu, _ in spec if cpu)
    assert max(gpu, cpu_sum, *finish) - 1e-6 <= t <= sum(us for us, _, _ in spec) + 1e-6
    if not cpu_sum:
        assert t == pytest.approx(gpu, rel=1e-9)


def test_contradicting_issue_orders_are_refused(tmp_path: Path) -> None:
    """Rank 0 issues group 1's all-reduce before group 2's, rank 1 the other way round:
    one line, not a hang."""
    a = Node(0, "a", "COMM_COLL_NODE", comm_type="ALL_REDUCE", comm_bytes=MIB, pg_name="1")
    b = Node(1, "b", "COMM_COLL_NODE", comm_type="ALL_REDUCE", comm_bytes=MIB, pg_name="2")
    prefix = _write(tmp_path, [[a, Node(1, "b", "COMM_COLL_NODE", data_deps=(0,),
                                        comm_type="ALL_REDUCE", comm_bytes=MIB, pg_name="2")],
                               [b, Node(0, "a", "COMM_COLL_NODE", data_deps=(1,),
                                        comm_type="ALL_REDUCE", comm_bytes=MIB, pg_name="1")]])  # fmt: skip
    (tmp_path / "t.groups.json").write_text('{"1": [0, 1], "2": [0, 1]}')
    with pytest.raises(ConfigError, match=r"can never start: .* in a circle") as e:
        run_traces(prefix, "dgx-h100", network="analytical")
    assert "\n" not in str(e.value)


def test_gather_is_refused_in_one_line(tmp_path: Path) -> None:
    g = Node(0, "g", "COMM_COLL_NODE", comm_type="GATHER", comm_bytes=MIB)
    prefix = _write(tmp_path, [[g]] * 2)
    with pytest.raises(ConfigError, match=r"t\.0\.et: GATHER has no clustersim collective"):
        run_traces(prefix, "dgx-h100", network="analytical")


def test_more_ranks_than_gpus_is_refused(tmp_path: Path) -> None:
    prefix = _write(tmp_path, [[comp(0, 1)]] * 9)
    with pytest.raises(ConfigError, match=r"9 ranks but topology 'dgx-h100' has 8 GPUs"):
        run_traces(prefix, "dgx-h100", network="analytical")


# -- the command line ----------------------------------------------------------------------


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_chakra_run_json_gives_time_s(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = astra_microbenchmark(tmp_path, "all_reduce", 8, 64)
    code, out, _ = _cli(capsys, "chakra", "run", str(folder), "--topology", "dgx-h100",
                        "--network", "analytical", "--json")  # fmt: skip
    data = json.loads(out)
    assert code == 0 and data["time_s"] > 0 and data["ranks"] == 8
    assert data["rank_end_s"]["max"] == data["time_s"]
    code, out, _ = _cli(capsys, "chakra", "run", str(folder), "--topology", "dgx-h100",
                        "--network", "analytical")  # fmt: skip
    assert code == 0 and "simulated time:" in out and "rank end times:" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["chakra", "run", "{tmp}/none", "--topology", "dgx-h100"], "no Chakra ET files"),
        (["chakra", "run", "{tmp}/all_reduce/8npus_64MB", "--topology", "dgx-h100",
          "--network", "packet"], "--network"),
        (["chakra", "run", "{tmp}/all_reduce/8npus_64MB", "--topology", "h100-ib-ndr",
          "--nodes", "0"], "--nodes 0"),
        (["chakra", "run", "{tmp}/all_reduce/8npus_64MB", "--topology", "single-h100"],
         "8 ranks but topology"),
        (["chakra", "run", "{tmp}/all_reduce/8npus_64MB", "--topology", "dgx-h100",
          "--comm-groups", "{tmp}/missing.json"], "missing.json"),
        (["chakra", "run", "{tmp}/all_reduce/8npus_64MB", "--topology", "dgx-h100",
          "--comm-groups", "{tmp}/huge.json"], "huge.json: cannot read a value"),
        (["chakra", "export", "nonexistent-scenario", "--out", "{tmp}/x"], "nonexistent"),
        (["chakra", "export", "gpt2-1gpu", "--out", "{tmp}/empty"], "'empty'"),
        (["chakra", "export", "gpt2-1gpu", "--out", "{tmp}/file.txt"], "not a folder"),
        (["chakra", "export", "gpt2-1gpu", "--out", "{tmp}/x", "--set", "parallel.tp=3"], "tp"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    astra_microbenchmark(tmp_path, "all_reduce", 8, 64)
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "huge.json").write_text('{"1": [' + "9" * 5000 + "]}")
    code, out, err = _cli(capsys, *(a.replace("{tmp}", str(tmp_path)) for a in argv))
    assert code == 2 and out == ""
    assert err.startswith("clustersim: error: ") and message in err
    assert len(err.strip().splitlines()) <= 2


def test_export_refuses_to_leave_stale_ranks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An older, larger set with the same name: refused before anything is written."""
    (tmp_path / "gpt2-1gpu.5.et").write_bytes(b"old")
    code, _, err = _cli(capsys, "chakra", "export", "gpt2-1gpu", "--out", str(tmp_path))
    assert code == 2 and "gpt2-1gpu.5.et: already there" in err
    assert not (tmp_path / "gpt2-1gpu.0.et").exists()


def test_cli_export_then_run_gives_the_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`chakra export` then `chakra run --json` on the same topology: run's step time."""
    sets = ["--set", "cluster.topology=dgx-h100", "--set", "parallel.pp=2", "--set",
            "parallel.dp=4", "--set", "training.global_batch=64"]  # fmt: skip
    code, out, _ = _cli(capsys, "run", "gpt2-1gpu", *sets, "--json")
    step = json.loads(out)["step_time_s"]
    code, out, _ = _cli(capsys, "chakra", "export", "gpt2-1gpu", "--out", str(tmp_path), *sets)
    assert code == 0 and "8 ranks written" in out and f"step {step:.6f} s" in out
    code, out, _ = _cli(capsys, "chakra", "run", str(tmp_path / "gpt2-1gpu"), "--topology",
                        "dgx-h100", "--network", "analytical", "--json")  # fmt: skip
    data = json.loads(out)
    assert code == 0 and data["time_s"] == pytest.approx(step, rel=1e-9)
    assert data["simulated_ranks"] == 2 and "folded" in data["notes"][0]
