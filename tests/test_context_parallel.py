"""Context parallelism (``parallel.cp``): ring attention over load-balanced sequence chunks.

Closed forms from the ring-attention algorithm (Liu et al., arXiv:2310.01889) as
Megatron-Core runs it: each of the ``cp - 1`` forward steps moves K and V of the rank's
``s / cp`` tokens, ``2 b (s / cp) kv_heads_rank head_dim`` bf16 elements; the backward
moves twice that. Gradients reduce over the ``dp * cp`` ranks holding the same weights.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cli import main
from sim.scenario.load import load_scenario
from sim.studies.plan.space import layouts
from sim.training.compute.passes import ring_exposed_s
from sim.training.memory.activations import stage_activation_bytes
from sim.training.memory.report import memory_per_gpu
from sim.training.setup import prepare_step
from sim.training.step import simulate_step
from sim.workload.comms import step_comm
from sim.workload.context import ring_bytes_per_layer, ring_step_bytes
from sim.workload.models import model_preset
from sim.workload.ops import context_for, layer_ops
from sim.workload.plan import ParallelPlan, full_order, groups, rank_coords
from sim.workload.zero import dp_bytes_per_step

LLAMA3_8B = model_preset("llama3-8b")  # 32 heads, 8 KV heads of 128, 32 layers
H100_HBM = 80e9  # H100 SXM: 80 GB of HBM3 (NVIDIA H100 datasheet), as the catalog has it
LONG = [
    "model.max_seq=131072",  # Llama 3.1's context; the preset states Llama 3's 8,192
    "training.seq_len=131072",
    "training.global_batch=8",
    "parallel.dp=null",
    "parallel.recompute=full",
]


def _run(cp: int, sets: list[str], network: str = "analytical") -> object:
    sc = load_scenario("llama3-8b-dgx", [*sets, f"parallel.cp={cp}", "parallel.dp=null"])
    return simulate_step(sc, network=network)


# ---------------------------------------------------------------- cp = 1 is today's model


def test_cp1_adds_no_ring_and_leaves_the_attention_kernel_as_it_was() -> None:
    """cp=1 builds the same layer ops as a plan that never heard of CP."""
    plan = ParallelPlan(tp=2, sp=True, global_batch=2)
    ops = layer_ops(context_for(LLAMA3_8B, plan, 8192))
    assert all(o.kind != "cp_comm" for o in ops.fwd + ops.bwd)
    core = next(o for o in ops.fwd if o.name == "attn_core")
    assert core.shape == (1.0, 16.0, 8192.0, 128.0, 1.0)
    assert core.flops == 4.0 * 8192**2 * 4096 / 2


def test_cp1_result_is_the_default_result() -> None:
    """Writing parallel.cp=1 changes nothing; CP fields read 0 and cp=1."""
    base = simulate_step(load_scenario("llama3-8b-dgx"), network="analytical")
    same = simulate_step(load_scenario("llama3-8b-dgx", ["parallel.cp=1"]), network="analytical")
    assert base.to_dict() == same.to_dict()
    assert base.plan["cp"] == 1 and base.cp_bytes_per_gpu == 0.0
    assert base.breakdown["cp_comm_exposed"] == 0.0


@settings(max_examples=40, deadline=None)
@given(
    tp=st.sampled_from([1, 2, 4]),
    pp=st.sampled_from([1, 2, 3]),
    dp=st.sampled_from([1, 2, 4]),
    order=st.permutations(["tp", "pp", "dp"]),
)
def test_cp1_groups_are_the_three_axis_groups(tp: int, pp: int, dp: int, order: list[str]) -> None:
    """With cp=1 the DP group of a rank is its (tp, pp) neighbours along dp, as before CP."""
    plan = ParallelPlan(tp=tp, pp=pp, dp=dp, order=tuple(order), global_batch=dp)
    for g in groups(plan, "dp"):
        coords = [rank_coords(plan, r) for r in g]
        assert [c.dp for c in coords] == list(range(dp))
        assert len({(c.tp, c.pp) for c in coords}) == 1
    assert sorted(groups(plan, "cp")) == [[r] for r in range(plan.num_gpus)]


# ---------------------------------------------------------------- placement and groups


def test_cp_is_placed_right_after_tp_by_default() -> None:
    """Default order tp, cp, pp, dp: with tp=2, cp=2 the CP peer of rank 0 is rank 2."""
    plan = ParallelPlan(tp=2, cp=2, dp=2, global_batch=2)
    assert full_order(plan.order) == ("tp", "cp", "pp", "dp")
    assert sorted(groups(plan, "cp"))[:2] == [[0, 2], [1, 3]]
    assert groups(plan, "tp")[0] == [0, 1]


@settings(max_examples=40, deadline=None)
@given(
    tp=st.sampled_from([1, 2]),
    cp=st.sampled_from([1, 2, 4]),
    pp=st.sampled_from([1, 2]),
    dp=st.sampled_from([1, 2, 3]),
    order=st.permutations(["tp", "cp", "pp", "dp"]),
)
def test_dp_reduce_group_is_dp_times_cp(
    tp: int, cp: int, pp: int, dp: int, order: list[str]
) -> None:
    """Every DP (gradient) group holds dp*cp ranks of one (tp, pp); each CP ring lies inside
    one DP group; both kinds partition the ranks."""
    plan = ParallelPlan(tp=tp, cp=cp, pp=pp, dp=dp, order=tuple(order), global_batch=dp)
    n = plan.num_gpus
    dps, cps = groups(plan, "dp"), groups(plan, "cp")
    for kind_groups, size in ((dps, dp * cp), (cps, cp)):
        assert sorted(r for g in kind_groups for r in g) == list(range(n))
        assert all(len(g) == size for g in kind_groups)
    for g in dps:
        assert len({(rank_coords(plan, r).tp, rank_coords(plan, r).pp) for r in g}) == 1
    for ring in cps:
        assert any(set(ring) <= set(g) for g in dps)


def test_engine_reduces_gradients_over_dp_cp_ranks() -> None:
    """cp=2, dp=4 on a DGX: the simulated DP group has 8 GPUs; with dp=1 and cp=8 gradients
    are still reduced (the volumes of an 8-way data-parallel job)."""
    setup = prepare_step(load_scenario("llama3-8b-dgx", ["parallel.cp=2", "parallel.dp=4"]))
    assert all(len(g) == 8 for g in setup.stages[0].dp)
    only_cp = ParallelPlan(cp=8, dp=1, zero=1, global_batch=8)
    c = step_comm(LLAMA3_8B, only_cp, 8192)
    assert c.dp_grad_op == "reduce_scatter" and c.dp_grad_bytes > 0
    dp8 = ParallelPlan(dp=8, zero=1, global_batch=8)
    assert dp_bytes_per_step(1e9, only_cp) == dp_bytes_per_step(1e9, dp8)


# ---------------------------------------------------------------- ring bytes


@settings(max_examples=40, deadline=None)
@given(
    cp=st.sampled_from([2, 4, 8]),
    tp=st.sampled_from([1, 2, 4, 8, 16]),
    b=st.integers(1, 3),
    chunks=st.integers(1, 4),
)
def test_ring_bytes_per_layer_match_the_closed_form(cp: int, tp: int, b: int, chunks: int) -> None:
    """Forward: cp-1 steps of 2 b (s/cp) kv_rank d * 2 bytes; backward twice that; the ring
    op in the layer's op list carries exactly these."""
    m = LLAMA3_8B if tp <= 8 else model_preset("llama2-70b")
    seq = 2 * cp * 512 * chunks
    plan = ParallelPlan(tp=tp, cp=cp, micro_batch=b, global_batch=b)
    kv_rank = max(m.kv_heads // tp, 1)
    step = 2 * b * (seq // cp) * kv_rank * m.head_dim * 2
    assert ring_step_bytes(m, plan, seq) == step
    assert ring_bytes_per_layer(m, plan, seq) == ((cp - 1) * step, 2 * (cp - 1) * step)
    ops = layer_ops(context_for(m, plan, seq))
    ring = [o for o in ops.fwd + ops.bwd if o.kind == "cp_comm"]
    assert [(o.comm_bytes, o.shape[0], o.comm_op) for o in ring] == [
        (step, cp - 1, "send_recv"),
        (2 * step, cp - 1, "send_recv"),
    ]


def test_result_cp_bytes_count_every_layer_micro_batch_and_recompute() -> None:
    """llama3-8b, cp=2, dp=4, 8 KV heads, s=8192: 32 layers x 32 micro-batches x (forward
    + backward) ring bytes under torchtitan's per-op SAC, which saves the attention output
    (the ring's exchanges happen inside that op); framework-neutral selective recompute
    (Megatron's: the attention core) runs the ring's forward again."""
    r = _run(2, [])
    fwd, bwd = ring_bytes_per_layer(LLAMA3_8B, ParallelPlan(cp=2, global_batch=1), 8192)
    assert fwd == 2 * 4096 * 8 * 128 * 2
    assert r.plan["recompute"] == "selective" and r.plan["micro_batches"] == 32
    assert r.cp_bytes_per_gpu == 32 * 32 * (fwd + bwd)
    assert _run(2, ["training.framework=null"]).cp_bytes_per_gpu == 32 * 32 * (2 * fwd + bwd)


# ---------------------------------------------------------------- compute and memory


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_counted_flops_per_rank_divide_by_cp(cp: int) -> None:
    """Linear layers and (load-balanced) attention: each CP rank counts 1/cp of the FLOPs."""
    one = layer_ops(context_for(LLAMA3_8B, ParallelPlan(global_batch=1), 32768))
    split = layer_ops(context_for(LLAMA3_8B, ParallelPlan(cp=cp, global_batch=1), 32768))
    assert split.model_flops * cp == pytest.approx(one.model_flops, rel=1e-12)


def test_mfu_counts_the_same_model_flops_with_cp() -> None:
    """Model FLOPs per step do not depend on cp: TFLOP/s x step time is the same."""
    a, b = _run(1, ["parallel.micro_batch=1"]), _run(4, [])
    work_a, work_b = a.tflops_per_gpu * a.step_time_s, b.tflops_per_gpu * b.step_time_s
    assert work_b == pytest.approx(work_a, rel=1e-9)


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_activation_memory_halves_at_cp2(recompute: str) -> None:
    """With fused attention every stored activation is per token: cp=2 holds half."""
    kw = dict(seq=65536, held=3, layers=32, last=True, flash_attention=True)
    one = stage_activation_bytes(LLAMA3_8B, ParallelPlan(recompute=recompute, global_batch=1), **kw)
    two = stage_activation_bytes(
        LLAMA3_8B, ParallelPlan(cp=2, recompute=recompute, global_batch=1), **kw
    )
    assert two == one / 2


def test_128k_sequences_of_llama3_8b_fit_a_dgx_only_with_cp() -> None:
    """seq_len 131072 on 8 H100 (full recompute, ZeRO-3): cp=1 and cp=2 do not fit in
    80 GB, cp=4 and cp=8 do (activations and logits divide by cp; model states do not)."""
    sc = load_scenario("llama3-8b-dgx", LONG)
    fits = {}
    for cp in (1, 2, 4, 8):
        plan = ParallelPlan(cp=cp, dp=8 // cp, zero=3, recompute="full", global_batch=8)
        fits[cp] = memory_per_gpu(sc.model, plan, 131072, H100_HBM).fits
    assert fits == {1: False, 2: False, 4: True, 8: True}


def test_advice_suggests_cp_for_long_sequences() -> None:
    """A 128k-token job that does not fit names a CP change among those that would."""
    r = _run(2, LONG)
    assert not r.fits
    assert any("parallel.cp=4" in n for n in r.notes)


# ---------------------------------------------------------------- step time


def test_long_sequences_on_nvlink_hide_the_ring() -> None:
    """128k tokens on one DGX: attention per ring step dwarfs a 268 MB NVLink transfer,
    so nothing is exposed and the step moves by less than 5%: with the parametric
    attention by the smaller GEMMs only (slower), with a kernel's table (the torchtitan
    preset's cuDNN) also by the ring's off-diagonal blocks running at the kernel's faster
    non-causal rate (-1.7%)."""
    base, cp8 = _run(1, LONG), _run(8, LONG)
    assert cp8.fits and not base.fits
    assert cp8.breakdown["cp_comm_exposed"] == 0.0
    assert cp8.cp_bytes_per_gpu > 0
    assert abs(cp8.step_time_s / base.step_time_s - 1) < 0.05
    fitted = ["training.attention_kernel=fitted"]
    base, cp8 = _run(1, [*LONG, *fitted]), _run(8, [*LONG, *fitted])
    assert base.step_time_s <= cp8.step_time_s < 1.05 * base.step_time_s


def test_ring_across_a_slow_network_is_exposed_and_grows_with_cp() -> None:
    """TP=8 inside a server and CP across servers on one 100G TCP NIC per server: the eight
    TP ranks' ring sends share the NIC; the exposed ring time grows with cp and the step
    slows."""
    sets = ["cluster.topology=h100-tcp-100g", "parallel.tp=8", "parallel.zero=1",
            "training.global_batch=16"]  # fmt: skip
    runs = {cp: _run(cp, sets) for cp in (1, 2, 4)}
    exposed = {cp: r.breakdown["cp_comm_exposed"] for cp, r in runs.items()}
    assert exposed[1] == 0.0 < exposed[2] < exposed[4]
    assert runs[1].step_time_s < runs[2].step_time_s < runs[4].step_time_s
    assert sum(runs[2].breakdown.values()) == pytest.approx(runs[2].step_time_s, rel=1e-9)


def test_flow_and_analytical_networks_agree_on_the_ring_alone() -> None:
    """One DGX, pp=1: the ring is timed the same way on both backends."""
    a, f = _run(2, [], "analytical"), _run(2, [], "flow")
    assert a.cp_bytes_per_gpu == f.cp_bytes_per_gpu
    assert a.breakdown["cp_comm_exposed"] == f.breakdown["cp_comm_exposed"]


@settings(max_examples=60, deadline=None)
@given(
    step_s=st.floats(0, 1),
    attn_s=st.floats(0, 10),
    more=st.floats(0, 10),
    steps=st.integers(0, 15),
)
def test_exposed_ring_is_bounded_and_shrinks_with_compute(
    step_s: float, attn_s: float, more: float, steps: int
) -> None:
    """0 <= exposed <= every step's transfer; more attention compute never exposes more."""
    e = ring_exposed_s(step_s, attn_s, steps)
    assert 0.0 <= e <= steps * step_s + 1e-12
    assert ring_exposed_s(step_s, attn_s + more, steps) <= e + 1e-12


# ---------------------------------------------------------------- planner


def test_planner_searches_cp_only_when_asked() -> None:
    """Default search: cp=1 only (today's layouts); cps=(1, 2) adds CP layouts that divide."""
    base, _ = layouts(LLAMA3_8B, 16, 8, 16)
    more, _ = layouts(LLAMA3_8B, 16, 8, 16, cps=(1, 2), seq_len=8192)
    assert all(lay.cp == 1 for lay in base)
    assert [lay for lay in more if lay.cp == 1] == base
    with_cp = [lay for lay in more if lay.cp == 2]
    assert with_cp and all(lay.tp * lay.cp * lay.pp * lay.dp == 16 for lay in with_cp)
    assert "cp2" in with_cp[0].label()


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("sets", "needle"),
    [
        (["parallel.cp=3"], "seq_len/2"),
        (["parallel.cp=2"], "x 2 x 1 x 8 = 16"),  # dp=8 given: 16 GPUs on an 8-GPU DGX
        (["parallel.cp=2", "parallel.dp=4", "training.flash_attention=false"], "flash"),
        (["parallel.cp=0"], "parallel.cp"),
    ],
)
def test_bad_cp_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], sets: list[str], needle: str
) -> None:
    argv = ["run", "llama3-8b-dgx", "--network", "analytical"]
    for s in sets:
        argv += ["--set", s]
    code = main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and needle in lines[0] and "Traceback" not in err


def test_json_shows_cp(capsys: pytest.CaptureFixture[str]) -> None:
    """run --json: plan.cp, cp_bytes_per_gpu and breakdown.cp_comm_exposed; text names CP."""
    import json

    args = ["run", "llama3-8b-dgx", "--network", "analytical", "--set", "parallel.cp=2",
            "--set", "parallel.dp=4"]  # fmt: skip
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["plan"]["cp"] == 2 and data["cp_bytes_per_gpu"] > 0
    assert "cp_comm_exposed" in data["breakdown"]
    assert main(args) == 0
    assert "context parallel cp=2" in capsys.readouterr().out


def test_ep_with_cp_is_refused() -> None:
    """MoE expert parallelism beside CP is not modelled: said, not silently wrong."""
    from sim.errors import ConfigError
    from sim.workload.plan_checks import validate_plan

    moe = dataclasses.replace(LLAMA3_8B, experts=8, top_k=2)
    with pytest.raises(ConfigError, match=r"parallel\.cp"):
        validate_plan(ParallelPlan(cp=2, dp=2, ep=2, global_batch=2), moe, 4)


def test_cp_groups_crossing_servers_are_noted() -> None:
    """tp=8 fills a server, so each CP ring of 2 spans two servers: the result says so."""
    from sim.workload.plan import placement_notes

    plan = ParallelPlan(tp=8, cp=2, global_batch=1)
    assert [r // 8 for r in groups(plan, "cp")[0]] == [0, 1]
    assert placement_notes(plan) == [
        "CP groups of 2 span 2 nodes each (8 GPUs per node): CP traffic crosses the network"
    ]
