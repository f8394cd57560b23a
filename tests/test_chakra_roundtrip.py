"""Export then import: a shipped scenario's step, written as Chakra traces and simulated again
from them on the same topology, takes the same time; folding replicas is checked, not trusted."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.chakra import read_trace, write_trace
from sim.chakra.export import StepTraces, write_step_traces
from sim.chakra.run import run_traces
from sim.scenario.layer_list import load_any_scenario
from sim.training.step import run_step

pytest.importorskip(
    "google.protobuf", reason="Chakra traces need protobuf: pip install 'clustersim[chakra]'"
)

SMALL_SETS = ("cluster.topology=dgx-h100", "parallel.tp=2", "parallel.pp=2", "parallel.dp=2",
              "training.global_batch=16", "parallel.zero=3")  # fmt: skip
#: ZeRO-3 with reductions overlapped every micro-batch over two NDR nodes: the analytical
#: executor's NIC sharing (gathers first, reductions in their gaps, every stage's groups at
#: once), which the traces carry in nic, fill and peer_groups.
SHARED_SETS = ("cluster.topology=h100-ib-ndr", "cluster.nodes=2", "parallel.tp=2",
               "parallel.pp=2", "parallel.dp=4", "training.global_batch=32", "parallel.zero=3",
               "parallel.overlap_dp=true")  # fmt: skip
#: The optimizer offloaded to the host CPU: gradients down and parameters up over PCIe
#: (MEM_STORE / MEM_LOAD nodes with host_copy), the CPU step on the host's stream.
OFFLOAD_SETS = (*SMALL_SETS[:5], "training.offload=cpu")


def roundtrip(tmp_path: Path, name: str, network: str, sets: tuple[str, ...] = (), *,
              fold: bool = True) -> tuple[float, float, object]:  # fmt: skip
    """(the step's time, the imported traces' time, the import's result)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    scenario = load_any_scenario(name, sets)
    result, run, setup = run_step(scenario, network)  # type: ignore[arg-type]
    write_step_traces(StepTraces(setup, run, {"scenario": name}), str(tmp_path / name))
    cluster = scenario.cluster  # type: ignore[union-attr]
    back = run_traces(tmp_path / name, cluster.topology, nodes=cluster.nodes, network=network,
                      fold=fold)  # fmt: skip
    return result.step_time_s, back.time_s, back


# The step time is reproduced exactly up to floating-point summation order (the traces keep
# each compute task's exact seconds in duration_s); 1e-9 is far inside the 1% asked for.
@pytest.mark.parametrize(
    ("name", "network", "sets"),
    [
        ("gpt2-1gpu", "analytical", ()),
        ("llama3-8b-dgx", "analytical", ()),
        ("llama2-70b-256-ib", "analytical", ()),
        ("llama2-70b-256-roce", "analytical", ()),
        pytest.param("gpt3-175b-1024", "analytical", (), marks=pytest.mark.slow),
        ("gpt2-1gpu", "analytical", SMALL_SETS),
        ("gpt2-1gpu", "analytical", SHARED_SETS),
        ("gpt2-1gpu", "flow", SHARED_SETS),
        ("gpt2-1gpu", "analytical", OFFLOAD_SETS),
        ("gpt2-1gpu", "flow", OFFLOAD_SETS),
        ("gpt2-1gpu", "flow", SMALL_SETS),
        ("llama3-8b-dgx", "flow", ()),
    ],
)
def test_export_then_import_reproduces_the_step(
    tmp_path: Path, name: str, network: str, sets: tuple[str, ...]
) -> None:
    step, back, _ = roundtrip(tmp_path, name, network, sets)
    assert back == pytest.approx(step, rel=1e-9)


def test_folding_replicas_changes_nothing_but_the_work(tmp_path: Path) -> None:
    """TP 2 x PP 2 x DP 2: replica 1 folded onto replica 0 or simulated rank by rank, the
    same time and the same end per rank; folded, half the ranks are simulated."""
    step, folded, r1 = roundtrip(tmp_path / "a", "gpt2-1gpu", "analytical", SMALL_SETS)
    _, whole, r2 = roundtrip(tmp_path / "b", "gpt2-1gpu", "analytical", SMALL_SETS, fold=False)
    assert folded == pytest.approx(step, rel=1e-9) and whole == pytest.approx(step, rel=1e-9)
    assert r1.simulated_ranks == 4 and r2.simulated_ranks == 8  # type: ignore[attr-defined]
    assert r1.rank_end_s == pytest.approx(r2.rank_end_s, rel=1e-9)  # type: ignore[attr-defined]
    assert "folded: 8 ranks simulated as 4" in r1.notes[0]  # type: ignore[attr-defined]


def test_a_replica_that_differs_is_not_folded(tmp_path: Path) -> None:
    """Lengthen one compute node of a rank of replica 1: its file no longer mirrors replica
    0's, so every rank is simulated and the longer node shows in the time."""
    _, _, before = roundtrip(tmp_path, "gpt2-1gpu", "analytical", SMALL_SETS)
    path = tmp_path / "gpt2-1gpu.7.et"
    trace = read_trace(path)
    last = max(range(len(trace.nodes)), key=lambda i: trace.nodes[i].start_time_micros
               if trace.nodes[i].type == "COMP_NODE" else -1)  # fmt: skip
    nodes = list(trace.nodes)
    attrs = tuple(a if a.name != "duration_s" else type(a)(a.name, a.kind, a.value + 0.01)
                  for a in nodes[last].attrs)  # fmt: skip
    nodes[last] = type(nodes[last])(**{**_fields(nodes[last]), "attrs": attrs})
    write_trace(path, type(trace)(trace.metadata, tuple(nodes)))
    r = run_traces(tmp_path / "gpt2-1gpu", "dgx-h100", network="analytical")
    assert r.simulated_ranks == 8
    assert "not folded: gpt2-1gpu.7.et is not gpt2-1gpu.3.et moved by 4 ranks" in r.notes[0]
    ends = before.rank_end_s  # type: ignore[attr-defined]
    assert r.rank_end_s[7] == pytest.approx(ends[7] + 0.01, rel=1e-9)
    assert r.time_s == max(r.rank_end_s) == r.rank_end_s[7]


def _fields(node: object) -> dict[str, object]:
    from dataclasses import fields

    return {f.name: getattr(node, f.name) for f in fields(node)}  # type: ignore[arg-type]
