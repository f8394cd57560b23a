"""ZeRO stages and FSDP strategies as the frameworks run them: bytes, timing, memory."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cli import main
from sim.errors import ConfigError
from sim.scenario.load import scenario_from_dict
from sim.training.step import simulate_step
from sim.workload.plan import ParallelPlan, groups
from sim.workload.zero import dp_bytes_per_step, parse_zero, zero_semantics

TWO_GPU = {
    "name": "two-gpu",
    "gpu": "H100-SXM",
    "nodes": 1,
    "node": {"gpus": 2, "fabric": "nvswitch", "nvlink": "nvlink4", "pcie": "pcie-gen5", "nics": 0},
}


@settings(max_examples=50, deadline=None)
@given(
    m=st.integers(1, 16),
    dp=st.sampled_from([2, 4, 8, 64]),
    params=st.floats(1e6, 1e11),
    grad=st.sampled_from([2, 4]),
)
def test_bytes_per_step_closed_forms(m: int, dp: int, params: float, grad: int) -> None:
    """Per rank per step (nccl-tests sizes, P parameters, g bytes per gradient, m micro-batches):
    ZeRO-0 all-reduce P g; ZeRO-1 reduce-scatter P g + all-gather 2P; ZeRO-2 (DeepSpeed)
    m P g + 2P; FSDP SHARD_GRAD_OP m P g + m 2P; ZeRO-3 m P g + 2m 2P."""

    def plan(zero: int, fsdp: str | None = None) -> ParallelPlan:
        return ParallelPlan(dp=dp, zero=zero, fsdp=fsdp, global_batch=m * dp, grad_bytes=grad)

    p, g = params, grad
    assert dp_bytes_per_step(p, plan(0)) == {"all_reduce": p * g}
    assert dp_bytes_per_step(p, plan(1)) == {"reduce_scatter": p * g, "all_gather": 2 * p}
    assert dp_bytes_per_step(p, plan(2)) == {"reduce_scatter": m * p * g, "all_gather": 2 * p}
    assert dp_bytes_per_step(p, plan(2, "SHARD_GRAD_OP")) == {
        "reduce_scatter": m * p * g, "all_gather": m * 2 * p,
    }  # fmt: skip
    assert dp_bytes_per_step(p, plan(3)) == {
        "reduce_scatter": m * p * g,
        "all_gather": 2 * m * 2 * p,
    }
    total = [sum(dp_bytes_per_step(p, plan(z)).values()) for z in (1, 2, 3)]
    if m > 1:
        assert total[0] < total[1] < total[2]
    else:
        assert total[0] == total[1] < total[2]


def test_hybrid_shard_adds_the_replica_all_reduce_of_the_shard() -> None:
    plan = ParallelPlan(dp=16, zero=3, fsdp="HYBRID_SHARD", shard_size=8, global_batch=32)
    assert zero_semantics(plan).hybrid
    assert dp_bytes_per_step(1.0, plan)["all_reduce"] == 2 * 4 / 8
    assert groups(plan, "shard")[0] == list(range(8))
    assert groups(plan, "replica")[0] == [0, 8]


@pytest.mark.parametrize(
    ("value", "stage", "fsdp"),
    [("FULL_SHARD", 3, "FULL_SHARD"), ("shard_grad_op", 2, "SHARD_GRAD_OP"),
     ("HYBRID_SHARD", 3, "HYBRID_SHARD"), ("NO_SHARD", 0, "NO_SHARD"), (1, 1, None)],
)  # fmt: skip
def test_fsdp_names_are_zero_stages(value: object, stage: int, fsdp: str | None) -> None:
    assert parse_zero(value) == (stage, fsdp)


@pytest.mark.parametrize("value", [4, "FULLSHARD", True, 1.5])
def test_bad_zero_values_name_what_is_allowed(value: object) -> None:
    with pytest.raises(ConfigError, match="FULL_SHARD"):
        parse_zero(value)


def _llama13b(zero: object, **training: object) -> dict[str, object]:
    """Llama-2-13B on 64 H100 (8 nodes, NDR), 4 micro-batches per step: the issue's case."""
    return {
        "model": {"preset": "llama2-13b"},
        "cluster": {"topology": "h100-ib-ndr", "nodes": 8},
        "parallel": {"dp": 64, "zero": zero, "micro_batch": 1, "recompute": "selective"},
        "training": {"global_batch": 256, "seq_len": 4096, **training},
        "network": "analytical",
    }


def test_zero2_and_zero3_move_more_and_take_longer_than_zero1() -> None:
    """The issue's example (Llama-2-13B, 64 GPUs, 4 micro-batches): ZeRO-2 reduce-scatters
    every micro-batch, ZeRO-3 also gathers every layer twice; ZeRO-1 is not the slowest."""
    runs = {z: simulate_step(scenario_from_dict(_llama13b(z))) for z in (1, 2, 3)}
    net = {z: r.link_bytes_by_scope["net"] for z, r in runs.items()}
    assert net[1] < net[2] < net[3]
    # ZeRO-1 = RS P g + AG 2P; ZeRO-2 = 4 P g + 2P (g = 4): ratio (16 + 2) / (4 + 2) = 3
    assert net[2] / net[1] == pytest.approx(3.0, rel=0.02)
    assert runs[1].step_time_s < runs[2].step_time_s < runs[3].step_time_s
    assert (
        runs[1].memory_per_gpu_bytes > runs[2].memory_per_gpu_bytes > runs[3].memory_per_gpu_bytes
    )


def test_bf16_gradients_halve_the_reduction() -> None:
    fp32 = simulate_step(scenario_from_dict(_llama13b(1)))
    bf16 = simulate_step(scenario_from_dict(_llama13b(1, grad_dtype="bf16")))
    assert bf16.link_bytes_by_scope["net"] < fp32.link_bytes_by_scope["net"]
    assert bf16.memory_breakdown["grads"] == pytest.approx(fp32.memory_breakdown["grads"] / 2)


def test_fsdp_names_run_and_hybrid_shards_within_a_node() -> None:
    """FULL_SHARD is ZeRO-3 plus FSDP's flat-gradient copies; HYBRID_SHARD shards over the
    8 GPUs of a node by default, so less crosses the network than FULL_SHARD over all 64."""
    full = simulate_step(scenario_from_dict(_llama13b("FULL_SHARD")))
    z3 = simulate_step(scenario_from_dict(_llama13b(3)))
    hybrid = simulate_step(scenario_from_dict(_llama13b("HYBRID_SHARD")))
    assert full.plan["fsdp"] == "FULL_SHARD" and hybrid.plan["shard_size"] == 8
    assert full.step_time_s > z3.step_time_s
    assert full.link_bytes_by_scope == pytest.approx(z3.link_bytes_by_scope)
    assert hybrid.link_bytes_by_scope["net"] < full.link_bytes_by_scope["net"]
    # FSDP's sharded parameter is the fp32 master: no bf16 shard beside it
    assert full.memory_breakdown["weights"] < z3.memory_breakdown["weights"]


def test_shard_size_errors_name_the_key() -> None:
    raw = _llama13b("FULL_SHARD")
    raw["parallel"]["shard_size"] = 8  # type: ignore[index]
    with pytest.raises(ConfigError, match=r"shard_size.*HYBRID_SHARD"):
        simulate_step(scenario_from_dict(raw))
    raw = _llama13b("HYBRID_SHARD")
    raw["parallel"]["shard_size"] = 5  # type: ignore[index]
    with pytest.raises(ConfigError, match=r"parallel\.shard_size: 5 must divide"):
        simulate_step(scenario_from_dict(raw))


def _two_gpu(tmp_path: Path, zero: object, overlap: bool) -> dict[str, object]:
    f = tmp_path / "topo.yaml"
    f.write_text(yaml.safe_dump(TWO_GPU))
    return {
        "model": {"preset": "gpt2-124m"},
        "cluster": {"topology": str(f)},
        "parallel": {"dp": 2, "zero": zero, "micro_batch": 1, "overlap_dp": overlap},
        "training": {"global_batch": 4, "seq_len": 1024},
    }


@pytest.mark.parametrize("zero", [2, 3, "SHARD_GRAD_OP"])
def test_zero_collectives_run_on_the_flow_network_and_agree_when_alone(
    tmp_path: Path, zero: object
) -> None:
    """Gathers and reduce-scatters are collective tasks on the network: with nothing
    contending (reductions after the backward) flow and analytical agree exactly; when
    they overlap, gathers and reductions share the NVLink and the flow step is longer."""
    sc = scenario_from_dict(_two_gpu(tmp_path, zero, overlap=False))
    flow, ana = simulate_step(sc, network="flow"), simulate_step(sc, network="analytical")
    assert flow.step_time_s == pytest.approx(ana.step_time_s, rel=1e-9)
    assert flow.breakdown == pytest.approx(ana.breakdown, rel=1e-9, abs=1e-12)
    if zero == 3:
        sc = scenario_from_dict(_two_gpu(tmp_path, zero, overlap=True))
        flow, ana = simulate_step(sc, network="flow"), simulate_step(sc, network="analytical")
        assert flow.step_time_s > ana.step_time_s


def test_zero3_gathers_are_prefetched_behind_compute() -> None:
    """Per-layer gathers overlap the previous layer's compute: only a small part is exposed
    on a node's NVLink, and every layer's gather is counted in the bytes."""
    r = simulate_step(scenario_from_dict(_llama13b(3)))
    assert 0 < r.breakdown["zero3_gather_exposed"] < 0.05 * r.step_time_s


def test_cli_accepts_fsdp_names(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "llama3-8b-dgx", "--set", "parallel.zero=SHARD_GRAD_OP",
                 "--network", "analytical", "--json"])  # fmt: skip
    assert code == 0 and '"fsdp": "SHARD_GRAD_OP"' in capsys.readouterr().out
    assert main(["run", "llama3-8b-dgx", "--set", "parallel.zero=FULLSHARD"]) == 2
    assert "FULL_SHARD" in capsys.readouterr().err
