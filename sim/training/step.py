"""Simulate one training step of a scenario: the public entry point of issue 3."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import replace

from sim.result import StepResult
from sim.scenario.load import Scenario
from sim.topology.model import Topology
from sim.training.compute.passes import CollectiveTimer
from sim.training.engine.setup import StepSetup, prepare_step
from sim.training.engine.simpy_engine import PipelineRun, run_pipeline
from sim.training.engine.stage import StageTimeline, buckets_of, reduces_after, stage_comm
from sim.training.hetero.replicas import mixed_path, mixed_step
from sim.training.hetero.report import gpu_type_report, mixed_notes
from sim.training.memory.advice import memory_advice
from sim.training.memory.report import memory_per_gpu
from sim.training.techniques import apply_techniques
from sim.training.techniques_report import techniques_record
from sim.workload.plan import placement_notes

__all__ = ["run_step", "simulate_step"]


_TIMERS: dict[tuple[int, int, str, str, str], tuple[object, object, CollectiveTimer]] = {}


def _timer(setup: StepSetup) -> CollectiveTimer:
    """One CollectiveTimer per (topology, collective parameters, network), reused across
    scenarios: collective times depend on nothing else."""
    topo, params = setup.topology, setup.profile.collectives
    par = setup.scenario.parallel
    key = (id(topo), id(params), setup.network, par.nccl_algo, par.nccl_proto)
    hit = _TIMERS.get(key)
    if hit is None or hit[0] is not topo or hit[1] is not params:
        if len(_TIMERS) > 32:
            _TIMERS.clear()
        timer = CollectiveTimer(topo, params, setup.network, par.nccl_algo, par.nccl_proto)
        hit = (topo, params, timer)
        _TIMERS[key] = hit
    return hit[2]


def simulate_step(
    scenario: Scenario, network: str | None = None, compute: Mapping[str, object] | None = None
) -> StepResult:
    """Simulate one optimizer step of ``scenario`` and explain where the time goes.

    Parameters
    ----------
    scenario : Scenario
        From :func:`sim.scenario.load.load_scenario`.
    network : str, optional
        ``flow`` or ``analytical``; default the scenario's.
    compute : mapping, optional
        Compute-model parameters laid over the catalog's and the profile's (numeric keys
        of :class:`sim.training.compute.params.ComputeParams`).

    Examples
    --------
    >>> from sim.scenario.load import load_scenario
    >>> r = simulate_step(load_scenario("llama3-8b-dgx"), network="analytical")
    >>> r.fits and 0 < r.mfu < 1
    True
    """
    return run_step(scenario, network, compute)[0]


def run_step(
    scenario: Scenario,
    network: str | None = None,
    compute: Mapping[str, object] | None = None,
    record: bool = False,
) -> tuple[StepResult, PipelineRun, StepSetup]:
    """:func:`simulate_step` plus the timelines behind the result (for traces).

    ``record`` keeps per-link rate samples of the flow network (trace counters).
    """
    setup = prepare_step(scenario, network)
    if compute:
        setup = replace(setup, compute=setup.compute.overridden(compute, "compute"))
    timer = _timer(setup)
    if mixed_path(setup):  # mixed GPU models or a speed-based split: every replica class
        mixed = mixed_step(setup, timer, record=record and setup.network == "flow")
        crit = mixed.critical
        run, setup = crit.run, crit.setup
        ideal = (
            run_pipeline(setup, timer, free_p2p=True, with_dp=False) if setup.plan.pp > 1 else run
        )
        result = _result(setup, timer, run, ideal, mixed.total_microbatches)
        notes = [*result.notes, *mixed_notes(mixed)]
        return replace(result, notes=notes, gpu_types=gpu_type_report(mixed)), run, setup
    run = run_pipeline(setup, timer, record=record and setup.network == "flow")
    ideal = run_pipeline(setup, timer, free_p2p=True, with_dp=False) if setup.plan.pp > 1 else run
    return _result(setup, timer, run, ideal), run, setup


def _breakdown(line: StageTimeline, ideal: StageTimeline) -> dict[str, float]:
    """The critical stage's time by cause; ``zero3_gather_exposed`` is what per-layer
    parameter gathers (ZeRO-3, FSDP SHARD_GRAD_OP forwards) leave on the critical path;
    ``cp_comm_exposed`` what the ring attention's K/V transfers leave exposed."""
    busy = line.compute_s + line.tp_exposed_s + line.ep_s + line.cp_exposed_s
    busy += line.zero3_exposed_s
    idle = max(0.0, line.compute_end_s - busy)
    ideal_busy = ideal.compute_s + ideal.tp_exposed_s + ideal.ep_s + ideal.cp_exposed_s
    ideal_busy += ideal.zero3_exposed_s
    ideal_idle = max(0.0, ideal.compute_end_s - ideal_busy)
    bubble = min(idle, ideal_idle)
    return {
        "compute": line.compute_s,
        "tp_comm_exposed": line.tp_exposed_s,
        "cp_comm_exposed": line.cp_exposed_s,
        "ep_comm": line.ep_s,
        "zero3_gather_exposed": line.zero3_exposed_s,
        "pipeline_bubble": bubble,
        "pp_comm_exposed": idle - bubble,
        "dp_comm_exposed": line.dp_end_s - line.compute_end_s,
        "optimizer": line.optimizer_s,
        "param_gather": line.param_gather_s,
    }


def _link_bytes(setup: StepSetup, timer: CollectiveTimer, run: PipelineRun) -> dict[str, float]:
    """Cluster-wide bytes per link scope: DP (simulated for every TP rank), PP of replica 0
    times the number of replicas, TP/EP collectives times the groups that run them, and
    the collectives after the optimizer (ZeRO-1/2 gathers, tied embeddings).

    On the flow network the DP collectives are counted as simulated: every TP rank's
    groups that contain replica 0 (other replicas' expert-DP and hybrid shard groups are
    not simulated, so not counted).
    """
    plan, topo = setup.plan, setup.topology
    out = dict.fromkeys(("nvlink", "pcie", "net"), 0.0)

    def add(kind_group: tuple[str, ...], op: str, nbytes: float, times: float) -> None:
        timer.time_s(kind_group, op, nbytes)
        for scope, b in timer.wire_bytes[(tuple(kind_group), op, float(nbytes))].items():
            out[scope] += times * b

    if run.network is not None:  # flow: DP rings of every TP rank and replica 0's sends
        scopes = topo.link_scope
        for i in run.network.link_bytes.nonzero()[0]:
            out[scopes[i]] += float(run.network.link_bytes[i])
        for scope, b in run.pp_wire_bytes.items():
            out[scope] += b * (plan.dp_cp - 1)
    else:  # analytical: DP of TP rank 0's group stands for every TP rank's
        for s, stage in enumerate(setup.stages):
            for (kind, op, nbytes), n in _dp_collectives(setup, run, s).items():
                group = stage.group(kind)[0]
                add(group, op, nbytes, n * len(stage.dp) * plan.dp_cp / len(group))
        for scope, b in run.pp_wire_bytes.items():
            out[scope] += b * plan.dp_cp
    for s, stage in enumerate(setup.stages):  # after the optimizer, timed alone
        c = stage_comm(setup, s)
        for kind, nbytes in (("shard", c.dp_param_gather_bytes), ("edp", c.edp_param_gather_bytes)):
            if nbytes > 0:
                group = stage.group(kind)[0]
                add(group, "all_gather", nbytes, len(stage.dp) * plan.dp_cp / len(group))
        if c.tied_embedding_bytes > 0 and s == 0:
            pair = (setup.stages[0].gpus[0], setup.stages[-1].gpus[0])
            add(pair, "all_reduce", c.tied_embedding_bytes, plan.tp * plan.dp_cp)
    groups_per_stage = {
        "tp": plan.dp_cp,
        "ep": plan.tp * plan.dp // max(1, plan.ep),
        "cp": plan.tp * plan.dp_cp,  # one ring pair per rank; wire bytes are one pair's
    }
    for line in run.lines:
        for rec in line.passes:
            cost = run.costs[(rec.chunk * plan.pp + rec.stage, rec.kind)]
            for kind, per in cost.wire_bytes.items():
                for scope, b in per.items():
                    out[scope] += b * groups_per_stage.get(kind, 1)
    return out


def _dp_collectives(setup: StepSetup, run: PipelineRun, s: int) -> Counter[tuple[str, str, float]]:
    """How often stage ``s``'s TP rank 0 issues each data-parallel collective in a step."""
    plan = setup.plan
    out: Counter[tuple[str, str, float]] = Counter()
    line = run.lines[s]
    last_b = {c: max(r.mb for r in line.passes if r.kind == "B" and r.chunk == c)
              for c in range(plan.virtual_stages)}  # fmt: skip
    buckets = Counter(step for b in buckets_of(setup, s) for step in b.steps)
    passes: Counter[tuple[int, str]] = Counter()
    for rec in line.passes:
        passes[(rec.chunk * plan.pp + s, rec.kind)] += 1
        if reduces_after(setup, rec.kind, rec.mb, last_b[rec.chunk]):
            out.update(buckets)
    for key, n in passes.items():
        for u in run.costs[key].units:
            if u.gather_bytes:
                out[("shard", "all_gather", u.gather_bytes)] += n
            if u.expert_gather_bytes:
                out[("edp", "all_gather", u.expert_gather_bytes)] += n
    return out


def _peak_flops(topo: Topology, precision: str) -> float:
    """Dense peak FLOP/s per GPU at ``precision``: the mean over a mixed cluster's GPUs."""
    models = topo.gpu_models or (topo.gpu,)
    return sum(g.peak_flops.get(precision, g.peak_flops["bf16"]) for g in models) / len(models)


def _result(
    setup: StepSetup,
    timer: CollectiveTimer,
    run: PipelineRun,
    ideal: PipelineRun,
    total_microbatches: int | None = None,
) -> StepResult:
    """The StepResult of ``run``; ``total_microbatches`` (all replicas) when replicas run
    different counts (a proportional batch split)."""
    sc, plan, topo = setup.scenario, setup.plan, setup.topology
    crit = max(range(plan.pp), key=lambda s: (run.lines[s].end_s, -s))
    step = run.lines[crit].end_s
    m = plan.num_microbatches
    per_rank_model = sum(c.model_flops for c in run.costs.values()) * m
    per_rank_hw = sum(c.hardware_flops for c in run.costs.values()) * m
    model_flops = per_rank_model * plan.tp * plan.dp_cp
    hw_flops = per_rank_hw * plan.tp * plan.dp_cp
    if total_microbatches is not None:
        model_flops = (
            sum(c.model_flops for c in run.costs.values()) * total_microbatches * plan.tp * plan.cp
        )
        hw_flops = (
            sum(c.hardware_flops for c in run.costs.values())
            * total_microbatches
            * plan.tp
            * plan.cp
        )
    n = topo.num_gpus
    peak = _peak_flops(topo, sc.training.precision)
    tokens = sc.training.global_batch * sc.training.seq_len
    seq, flash, ce = sc.training.seq_len, sc.training.flash_attention, sc.training.cross_entropy
    hbm = min(g.hbm_bytes for g in topo.gpu_models or (topo.gpu,))  # fit on the smallest
    tech_cfg = sc.training.techniques
    mem = memory_per_gpu(sc.model, plan, seq, hbm, None, flash, ce, tech_cfg)
    techniques, tech_notes = techniques_record(setup, crit, mem, run.lines[crit].compute_end_s)
    notes = [
        *setup.compute.notes,
        *placement_notes(plan),
        *memory_advice(sc.model, plan, seq, mem, None, flash, ce, tech_cfg),
        *tech_notes,
    ]
    breakdown = _breakdown(run.lines[crit], ideal.lines[crit])
    assert abs(sum(breakdown.values()) - step) <= 1e-9 * max(step, 1e-12), (breakdown, step)
    tech = apply_techniques(setup, timer, run, crit, breakdown, mem.stage)
    if tech.block:  # amortised step (local SGD, stale PS) and the techniques' memory
        breakdown, notes = tech.breakdown, [*notes, *tech.notes]
        step = sum(breakdown.values())
    mem_parts = {**{k: float(v) for k, v in mem.breakdown.items()}, **tech.memory}
    mem_total = float(mem.total_bytes) + sum(tech.memory.values())
    price = sc.price.usd_per_gpu_hour(topo.gpu.name)
    cost = price * n * step / 3600.0 if price is not None else None
    return StepResult(
        scenario=sc.name,
        topology=topo.name,
        network=setup.network,
        gpus=n,
        gpu=topo.gpu.name,
        plan={
            "tp": plan.tp,
            "cp": plan.cp,
            "pp": plan.pp,
            "dp": plan.dp,
            "ep": plan.ep,
            "sp": plan.sp,
            "zero": plan.zero,
            "micro_batch": plan.micro_batch,
            "micro_batches": m,
            "schedule": plan.schedule,
            "virtual_stages": plan.virtual_stages,
            "recompute": plan.recompute,
            "fsdp": plan.fsdp,
            "shard_size": plan.shard,
            "grad_bytes": plan.grad_bytes,
        },
        step_time_s=float(step),
        tokens_per_s=tokens / step,
        tflops_per_gpu=model_flops / step / n / 1e12,
        hw_tflops_per_gpu=hw_flops / step / n / 1e12,
        mfu=model_flops / step / n / peak,
        hfu=hw_flops / step / n / peak,
        fits=mem_total <= mem.hbm_bytes,
        memory_per_gpu_bytes=mem_total,
        memory_breakdown=mem_parts,
        breakdown={k: float(v) for k, v in breakdown.items()},
        critical_stage=crit,
        link_bytes_by_scope=_link_bytes(setup, timer, run),
        cost_per_step_usd=cost,
        cost_per_million_tokens_usd=cost / tokens * 1e6 if cost is not None else None,
        notes=notes,
        compute_params=setup.compute.summary,
        cp_bytes_per_gpu=_cp_bytes(run),
        techniques={**tech.block, **techniques},
    )


def _cp_bytes(run: PipelineRun) -> float:
    """Ring-attention bytes one GPU of the busiest stage sends in a step (0 without CP)."""
    per_stage = [sum(run.costs[(r.chunk * len(run.lines) + r.stage, r.kind)].cp_bytes
                     for r in line.passes) for line in run.lines]  # fmt: skip
    return float(max(per_stage, default=0.0))
