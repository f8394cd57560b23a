"""A simulated step exported as Chakra traces: every rank, what ASTRA-sim needs (docs/chakra.md)."""

from __future__ import annotations

import itertools
from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest

from sim.chakra import (
    match_collectives,
    match_p2p,
    read_comm_groups,
    read_traces,
)
from sim.chakra.codec import encode_trace
from sim.chakra.export import StepTraces, write_step_traces
from sim.scenario.layer_list import load_any_scenario
from sim.training.graph.execute import StepRun
from sim.training.setup import StepSetup
from sim.training.step import run_step

pytest.importorskip(
    "google.protobuf", reason="Chakra traces need protobuf: pip install 'clustersim[chakra]'"
)

#: GPT-2 on one DGX H100 as TP 2 x PP 2 x DP 2 with ZeRO-3: parameter gathers, gradient
#: reduce-scatters, pipeline sends and the tied-embedding all-reduce of the first and last
#: stage, in a step that simulates in about a second.
SMALL = (
    "gpt2-1gpu",
    ("cluster.topology=dgx-h100", "parallel.tp=2", "parallel.pp=2", "parallel.dp=2",
     "training.global_batch=16", "parallel.zero=3"),
)  # fmt: skip


@cache
def _step(name: str, sets: tuple[str, ...], network: str) -> tuple[float, StepRun, StepSetup]:
    result, run, setup = run_step(load_any_scenario(name, sets), network)  # type: ignore[arg-type]
    return result.step_time_s, run, setup


def step_traces(name: str = SMALL[0], sets: tuple[str, ...] = SMALL[1],
                network: str = "analytical") -> StepTraces:  # fmt: skip
    _, run, setup = _step(name, sets, network)
    return StepTraces(setup, run, {"scenario": name})


def test_every_rank_gets_a_file_with_the_groups_beside(tmp_path: Path) -> None:
    """One file per rank named as ASTRA-sim opens them, the groups file, one metadata."""
    st = step_traces()
    summary = write_step_traces(st, str(tmp_path / "w"))
    assert summary.ranks == st.num_ranks == 8
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"w.{r}.et" for r in range(8)] + ["w.groups.json"]
    )
    traces = read_traces(tmp_path / "w")
    assert traces.num_ranks == 8
    assert {t.metadata for t in traces.traces} == {st.metadata}
    assert st.metadata.version == "0.0.4"
    assert read_comm_groups(summary.groups_path) == st.groups
    assert summary.nodes == sum(len(t) for t in traces.traces)


def test_file_bytes_are_the_codecs_encoding_of_each_ranks_trace(tmp_path: Path) -> None:
    """The writer's shared pieces give exactly what encode_trace gives rank by rank."""
    st = step_traces()
    write_step_traces(st, str(tmp_path / "w"))
    for rank in range(st.num_ranks):
        assert (tmp_path / f"w.{rank}.et").read_bytes() == encode_trace(st.trace(rank), "x")


def test_what_astra_sim_requires() -> None:
    """Compute in whole microseconds on the GPU, collectives of the four types ASTRA-sim
    simulates with integer kinds, a group id unless every rank, peers and tags on p2p."""
    st = step_traces()
    kinds = defaultdict(int)
    for trace in st.traces():
        for node in trace.nodes:
            kinds[node.type] += 1
            attrs = {a.name: a for a in node.attrs}
            assert node.is_cpu_op is False
            if node.type == "COMP_NODE":
                exact = attrs["duration_s"].value
                assert node.duration_micros == round(exact * 1e6)
            elif node.type == "COMM_COLL_NODE":
                assert node.comm_type in (
                    "ALL_REDUCE",
                    "ALL_GATHER",
                    "REDUCE_SCATTER",
                    "ALL_TO_ALL",
                )
                assert isinstance(node.comm_bytes, int) and node.comm_bytes > 0
                assert node.pg_name in st.groups  # no collective spans all 8 ranks here
            elif node.type == "COMM_SEND_NODE":
                assert None not in (node.comm_dst, node.comm_tag, node.comm_bytes)
            elif node.type == "COMM_RECV_NODE":
                assert None not in (node.comm_src, node.comm_tag, node.comm_bytes)
            assert attrs["task_id"].kind == "uint64_val"
    assert set(kinds) == {"COMP_NODE", "COMM_COLL_NODE", "COMM_SEND_NODE", "COMM_RECV_NODE"}


def test_all_gather_size_is_one_ranks_share() -> None:
    """Chakra's comm_size of an all-gather is one rank's contribution (ASTRA-sim's Ring.cc
    ends with comm_size * n): the graph's nccl-tests size over the group, in whole bytes."""
    st = step_traces()
    g = st.run.graph
    seen = 0
    for node in st.trace(0).nodes:
        if node.comm_type == "ALL_GATHER":
            task = next(a.value for a in node.attrs if a.name == "task_id")
            comm = g.comm[task][0]
            n = len(st.groups[node.pg_name])
            assert node.comm_bytes == round(comm.nbytes / n)
            seen += 1
    assert seen > 0


def test_ranks_with_equal_traces_share_one_trace_object() -> None:
    """Llama-3-8B's 8 data-parallel ranks run the same trace: one object, no group id."""
    st = step_traces("llama3-8b-dgx", ())
    traces = st.traces()
    assert len(traces) == 8 and len({id(t) for t in traces}) == 1
    assert st.groups == {}
    assert all(n.pg_name is None for n in traces[0].nodes)


def test_collectives_and_messages_match_across_all_ranks() -> None:
    """Every rank's nodes pair up as ASTRA-sim pairs them, with no fold."""
    st = step_traces()
    ts = _trace_set(st)
    colls = match_collectives(ts, st.groups)
    p2p = match_p2p(ts)
    g = st.run.graph
    # the tied-embedding all-reduce of the first and last stage runs on every TP rank of
    # every replica: 2 TP ranks x 2 replicas pairs
    tied = [c for c in colls if _label(ts, c.ranks[0], c.node_ids[0]) == "tied_all_reduce"]
    assert len(tied) == 4 and all(len(c.ranks) == 2 for c in tied)
    sends = sum(len(c.groups) for parts in g.comm for c in parts if c.op == "send")
    assert len(p2p) == sends * 2  # every pipeline send of replica 0, in both replicas


def test_issue_order_is_one_order_on_every_rank() -> None:
    """ASTRA-sim runs one collective or send at a time per rank: the ranks' chains of
    communication nodes never contradict each other (else it deadlocks)."""
    st = step_traces()
    ts = _trace_set(st)
    op_of: dict[tuple[int, int], object] = {}
    for c in match_collectives(ts, st.groups):
        for r, i in zip(c.ranks, c.node_ids, strict=True):
            op_of[(r, i)] = ("c", c.group, c.index)
    for p in match_p2p(ts):
        op_of[(p.src, p.send_id)] = ("p", p.src, p.dst, p.tag, p.index)
    after: dict[object, set[object]] = defaultdict(set)
    for r, trace in enumerate(ts.traces):
        chain = [n for n in trace.nodes if n.type in ("COMM_COLL_NODE", "COMM_SEND_NODE")]
        ids = {n.id for n in trace.nodes}
        for a, b in itertools.pairwise(chain):
            assert a.id in _ancestors(trace, b.id, ids)
            after[op_of[(r, a.id)]].add(op_of[(r, b.id)])
    _assert_acyclic(after)


def test_chain_dependencies_are_named_so_an_import_drops_them() -> None:
    """Each dependency added only for ASTRA-sim's issue order is listed in issue_after."""
    st = step_traces()
    found = 0
    for node in st.trace(0).nodes:
        chain = next((a.value for a in node.attrs if a.name == "issue_after"), ())
        assert set(chain) <= set(node.ctrl_deps) and not set(chain) & set(node.data_deps)
        found += len(chain)
    assert found > 0


def _trace_set(st: StepTraces):  # type: ignore[no-untyped-def]
    from sim.chakra import TraceSet

    return TraceSet("w", tuple(st.traces()))


def _label(ts, rank: int, node_id: int) -> str:  # type: ignore[no-untyped-def]
    return next(n.name for n in ts.traces[rank].nodes if n.id == node_id)


def _ancestors(trace, node_id: int, ids: set[int]) -> set[int]:  # type: ignore[no-untyped-def]
    by = {n.id: n for n in trace.nodes}
    out: set[int] = set()
    todo = list(by[node_id].deps)
    while todo:
        d = todo.pop()
        if d not in out:
            out.add(d)
            todo.extend(by[d].deps)
    return out


def _assert_acyclic(after: dict[object, set[object]]) -> None:
    state: dict[object, int] = {}

    def visit(x: object) -> None:
        state[x] = 1
        for y in after.get(x, ()):
            assert state.get(y) != 1, f"issue orders contradict at {y}"
            if y not in state:
                visit(y)
        state[x] = 2

    for x in list(after):
        if x not in state:
            visit(x)


def test_offload_copies_are_memory_nodes_and_the_cpu_step_a_cpu_op() -> None:
    """Offloaded optimizer: per GPU a MEM_STORE (gradients down) and a MEM_LOAD (parameters
    up) of the same tensor_size with host_copy, and the CPU step with is_cpu_op."""
    sets = (*SMALL[1][:5], "training.offload=cpu")
    st = step_traces(SMALL[0], sets)
    nodes = st.trace(5).nodes
    mem = [n for n in nodes if n.type in ("MEM_STORE_NODE", "MEM_LOAD_NODE")]
    assert [n.type for n in mem] == ["MEM_STORE_NODE", "MEM_LOAD_NODE"]
    sizes = {next(a.value for a in n.attrs if a.name == "tensor_size") for n in mem}
    assert len(sizes) == 1 and sizes.pop() > 0
    assert all(any(a.name == "host_copy" and a.value is True for a in n.attrs) for n in mem)
    cpu = [n for n in nodes if n.is_cpu_op]
    assert [n.name for n in cpu] == ["cpu_optimizer"]
