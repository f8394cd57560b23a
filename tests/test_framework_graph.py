"""What a named framework changes in the step's task graph and result: its defaults, TP
overlap at a measured cost, Megatron-Core's overlapped parameter all-gather, FSDP2's
gather-once with pipeline parallelism, and memory held as the framework holds it."""

from __future__ import annotations

import pytest

from sim.errors import ConfigError
from sim.scenario.load import load_scenario
from sim.training.compute.passes import (
    ASYNC_COMM_SLOWDOWN,
    OpsCost,
    TPOverlap,
    async_exposed_s,
)
from sim.training.graph.build import AHEAD_LABEL
from sim.training.graph.costs import chunk_costs, op_context, param_units, tp_overlap
from sim.training.graph.execute import run_graph
from sim.training.graph.task import COLLECTIVE, COMPUTE
from sim.training.memory.allocator import device_memory_bytes
from sim.training.setup import prepare_step
from sim.training.step import _timer, simulate_step
from sim.workload.frameworks import PRESETS, grad_bucket_bytes
from sim.workload.ops import layer_ops

SMALL = ["cluster.nodes=4", "parallel.dp=1", "training.global_batch=32"]  # llama2-70b: TP8 PP4 DP1
#: The shipped scenarios name their frameworks; this takes it away (the framework-neutral step).
NONE = "training.framework=null"


def _run(*sets: str, name: str = "llama2-70b-256-ib"):  # type: ignore[no-untyped-def]
    setup = prepare_step(load_scenario(name, list(sets)), "analytical")
    return setup, run_graph(setup, _timer(setup))


def test_defaults_come_from_the_framework_and_the_scenario_wins() -> None:
    """A framework sets ZeRO, gradient dtype, cross-entropy, overlap switches and bucket size
    where the scenario is silent; what the scenario writes wins."""
    titan = load_scenario("gpt2-1gpu", ["training.framework=torchtitan"])
    assert titan.parallel.zero == 3 and titan.training.grad_dtype == "fp32"
    nemo = load_scenario("gpt2-1gpu", ["training.framework=nemo"])
    assert nemo.training.grad_dtype == "bf16" and nemo.parallel.overlap_tp
    mine = load_scenario("gpt2-1gpu", ["training.framework=nemo", "training.grad_dtype=fp32",
                                       "parallel.overlap_tp=false"])  # fmt: skip
    assert mine.training.grad_dtype == "fp32" and not mine.parallel.overlap_tp
    setup = prepare_step(load_scenario("gpt3-175b-1024", ["training.framework=megatron-core"]))
    assert setup.plan.bucket_bytes == grad_bucket_bytes(PRESETS["megatron-core"], setup.plan.dp)


def test_behaviours_need_a_framework_and_bad_ones_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"needs training\.framework"):
        load_scenario("gpt2-1gpu", ["training.framework=null", "framework.tp_comm_overlap=false"])
    with pytest.raises(ConfigError, match=r"framework.gathered_units: expected an integer >= 1"):
        load_scenario("gpt2-1gpu", ["training.framework=fsdp", "framework.gathered_units=0"])
    with pytest.raises(ConfigError, match=r"training\.framework"):
        load_scenario("gpt2-1gpu", ["training.framework=megatron"])


def test_tp_overlap_has_a_measured_cost() -> None:
    """Overlapped TP communication leaves ``1 - hidden`` of itself exposed (never less than
    what exceeds the compute) and slows the GEMMs beside it by ``slowdown``."""
    c = OpsCost(1.0, 0.4, 0.0, 0.0, 0.0, {}, gemm_s=0.8)
    o = TPOverlap(hidden=0.875, slowdown=0.059)
    assert c.overlapped_compute_s(o) == pytest.approx(1.0 + 0.059 * 0.8)
    assert c.exposed_tp_s(o) == pytest.approx(0.125 * 0.4)
    big = OpsCost(0.1, 1.0, 0.0, 0.0, 0.0, {}, gemm_s=0.1)
    assert big.exposed_tp_s(o) == pytest.approx(1.0 - 0.1 * 1.059)
    assert c.exposed_tp_s(None) == 0.4 and c.overlapped_compute_s(None) == 1.0


def test_overlap_tp_is_no_longer_free() -> None:
    """``parallel.overlap_tp`` costs what Transformer Engine's overlap costs: the step is
    slower than the old free overlap (all TP hidden behind compute) and faster than none."""
    setup = prepare_step(load_scenario("llama2-70b-256-ib", [*SMALL, "parallel.overlap_tp=true"]))
    assert tp_overlap(setup) == TPOverlap()
    costs = chunk_costs(setup, _timer(setup))
    f = costs[(0, "F")]
    assert f.tp_exposed_s > 0  # 12.5% of the TP time stays exposed
    base = [*SMALL, NONE]
    off = simulate_step(load_scenario("llama2-70b-256-ib", base), "analytical")
    on = simulate_step(load_scenario("llama2-70b-256-ib", [*base, "parallel.overlap_tp=true"]),
                       "analytical")  # fmt: skip
    assert on.step_time_s < off.step_time_s
    assert on.breakdown["compute"] > off.breakdown["compute"]  # GEMMs slowed beside TP


def _bwd_marks(*sets: str) -> dict[str, int]:
    """``Op.beside`` of every TP collective of one layer's backward."""
    setup = prepare_step(load_scenario("llama2-70b-256-ib", [*SMALL, *sets]), "analytical")
    return {o.name: o.beside for o in layer_ops(op_context(setup)).bwd if o.kind == "tp_comm"}


def test_megatron_runs_the_column_parallel_backward_collectives_beside_their_gemms() -> None:
    """Megatron's async column-parallel backward (``tp_async_backward``), where nothing else
    overlaps TP: under sequence parallelism the two re-gathers run beside the next GEMM
    (the input gradient's), the two input-gradient reduce-scatters beside the one before
    (the weight gradient's); the row-parallel layers' gathers stay on the critical path.
    Without sequence parallelism the two all-reduces run beside the weight gradient."""
    marks = _bwd_marks("parallel.overlap_tp=false")
    assert marks == {"attn_rs_bwd": 0, "qkv_regather": 1, "attn_ag_bwd": -1,
                     "mlp_rs_bwd": 0, "mlp_up_regather": 1, "mlp_ag_bwd": -1}  # fmt: skip
    plain = _bwd_marks("parallel.overlap_tp=false", "parallel.sp=false")
    assert plain == {"attn_ar_bwd": -1, "mlp_ar_bwd": -1}
    for off in (["parallel.overlap_tp=true"], ["parallel.overlap_tp=false", NONE],
                ["parallel.overlap_tp=false", "framework.tp_async_backward=false"]):  # fmt: skip
        assert set(_bwd_marks(*off).values()) == {0}, off


def test_an_async_collective_costs_what_outlasts_its_gemm_and_the_gemm_s_slowdown() -> None:
    """Exposed: ``max(0, comm - gemm) + 0.189 min(comm, gemm)`` (Lee et al.'s overlapped
    compute slowdown); the step loses that much of its exposed TP time and nothing else;
    the wire bytes do not change."""
    assert async_exposed_s(1.0, 4.0) == pytest.approx(ASYNC_COMM_SLOWDOWN)
    assert async_exposed_s(3.0, 2.0) == pytest.approx(1.0 + 2 * ASYNC_COMM_SLOWDOWN)
    assert async_exposed_s(0.0, 2.0) == 0.0
    base = [*SMALL, "parallel.overlap_tp=false"]
    on = simulate_step(load_scenario("llama2-70b-256-ib", base), "analytical")
    off = simulate_step(load_scenario("llama2-70b-256-ib",
                                      [*base, "framework.tp_async_backward=false"]), "analytical")  # fmt: skip
    assert on.breakdown["compute"] == off.breakdown["compute"]
    assert 0 < on.breakdown["tp_comm_exposed"] < off.breakdown["tp_comm_exposed"]
    assert on.step_time_s < off.step_time_s
    assert on.link_bytes_by_scope == off.link_bytes_by_scope


def test_megatron_overlaps_the_parameter_gather_with_the_next_forward() -> None:
    """With the distributed optimizer and --overlap-param-gather, the updated parameters are
    gathered ahead of each chunk's first forward: no all-gather after the optimizer, the
    gathers on the links under their tag, and only the first forward of a chunk waits."""
    sets = ["cluster.nodes=8", "parallel.dp=2", "training.global_batch=32"]
    _, plain = _run(*sets, NONE)
    assert "param_all_gather" in plain.graph.label
    setup, mc = _run(*sets, "training.framework=megatron-core")
    g = mc.graph
    assert "param_all_gather" not in g.label
    gathers = [i for i in range(len(g)) if g.label[i] == AHEAD_LABEL]
    assert gathers and all(g.kind[i] == COLLECTIVE for i in gathers)
    first = {(p.stage, p.chunk): min(q.mb for q in g.passes if q.kind == "F" and
             (q.stage, q.chunk) == (p.stage, p.chunk)) for p in g.passes}  # fmt: skip
    for i in gathers:
        p = g.passes[g.pass_of[i]]
        assert p.kind == "F" and p.mb == first[(p.stage, p.chunk)]
    assert {c.tag for i in gathers for c in g.comm[i]} == {"param shard all_gather"}
    assert setup.plan.zero == 1


def test_megatron_gathers_a_later_pipeline_stage_in_one_bucket_from_the_step_start() -> None:
    """Megatron-Core cuts only pipeline rank 0's parameters into buckets (DDP's
    ``bucket_size = None`` for ``pp_rank > 0``) and the all-gather uses those buckets; its
    first bucket's all-gather is dispatched by ``zero_grad()`` at the step's start
    (distrib_optimizer.py at f2e5db40, the README benchmark's commit): a later stage
    gathers all its parameters in one all-gather that starts at 0, while its first forward
    waits for its input; stage 0 gathers unit by unit, one bucket ahead of its forward."""
    sets = ["cluster.nodes=8", "parallel.dp=2", "training.global_batch=32",
            "training.framework=megatron-core"]  # fmt: skip
    setup, mc = _run(*sets)
    g = mc.graph
    assert setup.plan.pp > 1 and setup.plan.virtual_stages == 1
    per_stage: dict[int, list[int]] = {}
    for i in range(len(g)):
        if g.label[i] == AHEAD_LABEL:
            per_stage.setdefault(g.stage[i], []).append(i)
    assert set(per_stage) == set(range(setup.plan.pp))
    units = len(mc.costs[(0, "F")].units)
    assert len(per_stage[0]) == units > 2
    for s in range(1, setup.plan.pp):
        (one,) = per_stage[s]
        assert g.deps[one] == [] and mc.start[one] == 0.0
        total = sum(c.nbytes for c in g.comm[one])
        want = sum(d + e for d, e in param_units(setup, s))
        assert total == pytest.approx(want, rel=1e-12)
        first_f = next(p for p, q in enumerate(g.passes) if (q.stage, q.kind) == (s, "F"))
        computes = [i for i in range(len(g)) if g.pass_of[i] == first_f and g.kind[i] == COMPUTE]
        assert mc.start[computes[0]] >= mc.end[one]  # waited for its parameters
    later = per_stage[0][2]  # the third unit's gather: dispatched by the first unit's pre-hook
    assert g.deps[later] and g.kind[g.deps[later][0]] == COMPUTE


def test_fsdp2_with_pipeline_parallelism_gathers_once_and_reduces_once() -> None:
    """torchtitan's FSDP2 under PP gathers each chunk's parameters before its first forward
    and keeps them; gradients reduce-scatter once per chunk after its last backward."""
    sets = ["cluster.nodes=8", "parallel.dp=2", "parallel.zero=3", "training.global_batch=32"]
    setup, fsdp = _run(*sets)
    _, titan = _run(*sets, "training.framework=torchtitan", "training.grad_dtype=fp32")
    m = setup.plan.num_microbatches

    def count(run, label_start):  # type: ignore[no-untyped-def]
        return sum(1 for x in run.graph.label if x.startswith(label_start))

    assert count(titan, "zero_all_gather") * m <= count(fsdp, "zero_all_gather")
    assert count(titan, "dp_") * m == count(fsdp, "dp_")


def test_gathering_once_shares_the_fabric_with_the_own_stage_only() -> None:
    """ZeRO-3 gathering every micro-batch contends with every stage's groups (all stages
    gather throughout the step); FSDP2 under PP gathers each chunk once, the stages one
    after another as the pipeline fills, so a stage's gathers and its one reduction
    contend with its own groups only."""
    sets = ["cluster.nodes=8", "parallel.dp=2", "parallel.zero=3", "training.global_batch=32"]
    setup, fsdp = _run(*sets)
    _, titan = _run(*sets, "training.framework=torchtitan", "training.grad_dtype=fp32")

    def comms(run, label_start):  # type: ignore[no-untyped-def]
        g = run.graph
        return [c for t in range(len(g)) if g.kind[t] == COLLECTIVE
                and g.label[t].startswith(label_start) for c in g.comm[t]]  # fmt: skip

    every = {grp for st in setup.stages for grp in st.group("shard")}
    assert comms(fsdp, "zero_all_gather")
    assert all(set(c.peers) == every for c in comms(fsdp, "zero_all_gather"))
    for label in ("zero_all_gather", "dp_"):
        got = comms(titan, label)
        assert got and all(set(c.peers) == set(c.groups) for c in got)
        assert all(len(c.peers) < len(every) for c in got)


def test_prefetch_depth_follows_the_framework() -> None:
    """DeepSpeed keeps one gathered unit ahead (its prefetch), FSDP two."""
    sets = ["parallel.zero=3"]
    _, ds = _run(*sets, "training.framework=deepspeed", name="llama3-8b-dgx")
    g = ds.graph
    gather = g.stream_order[g.stream("s0.gather")]
    units = [i for i in range(len(g)) if g.label[i] == "pass"]
    # gather j (j >= 1) waits for unit j - 1 of its pass
    waits = [d for i in gather[1:20] for d in g.deps[i] if d in set(units)]
    assert waits


def test_torchtitan_recomputes_as_its_checkpointing_does() -> None:
    """The torchtitan preset times per-op SAC and, as torchtitan has since August 2025, a
    recompute that replays the whole block (``early_stop=False``); each is its own key,
    and a framework-neutral scenario keeps Megatron's attention-core recompute. SAC re-runs
    more than the attention core (slower, more hardware FLOPs); PyTorch's default early
    stop, which torchtitan's published runs had, skips each block's trailing ops."""

    def step(*sets: str):  # type: ignore[no-untyped-def]
        return simulate_step(load_scenario("llama3-8b-dgx", list(sets)), network="analytical")

    titan = op_context(prepare_step(load_scenario("llama3-8b-dgx"), "analytical"))
    assert (titan.selective, titan.early_stop) == ("op", False)
    plain = op_context(prepare_step(load_scenario("llama3-8b-dgx", [NONE]), "analytical"))
    assert (plain.selective, plain.early_stop) == ("attention", False)
    base = step()
    core = step("framework.selective_recompute=attention")
    early = step("framework.recompute_early_stop=true")
    assert core.step_time_s < early.step_time_s < base.step_time_s
    assert core.hfu * core.step_time_s < base.hfu * base.step_time_s


def test_memory_is_held_as_the_framework_holds_it() -> None:
    """With a framework, memory follows its semantics and fits what a process can use on
    the GPU; without one, the framework-neutral model and the catalog's HBM."""
    plain = simulate_step(load_scenario("llama3-8b-dgx", [NONE]), "analytical")
    titan = simulate_step(load_scenario("llama3-8b-dgx", ["training.framework=torchtitan"]),
                          "analytical")  # fmt: skip
    assert plain.memory_per_gpu_bytes != titan.memory_per_gpu_bytes
    # what cudaMemGetInfo reported on an H100 80GB (79.18 GiB; the catalog says 80e9 bytes)
    assert device_memory_bytes("H100-SXM", 80e9) == 85_017_493_504
