"""Simulate one training step of a scenario: the public entry point of issue 3."""

from __future__ import annotations

import copy
import math
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from sim.collectives.engine import SCOPE_NAME
from sim.errors import ConfigError
from sim.files import file_stamp
from sim.kept import Kept
from sim.result import StepResult
from sim.scenario.load import Scenario
from sim.topology.model import Topology
from sim.training.compute.params import ComputeParams
from sim.training.compute.passes import CollectiveTimer, timer_for
from sim.training.compute.power import gemm_rate
from sim.training.graph.costs import chunk_costs, layer_tensor_shares
from sim.training.graph.execute import StepRun, ideal_run, run_graph
from sim.training.graph.fold import fold_run
from sim.training.graph.task import COLLECTIVE, COMPUTE, Comm
from sim.training.graph.timelines import StageTimeline
from sim.training.hetero.replicas import mixed_path, mixed_step
from sim.training.hetero.report import gpu_type_report, mixed_notes
from sim.training.memory.advice import scenario_advice
from sim.training.memory.report import scenario_memory
from sim.training.setup import StepSetup, prepare_step
from sim.training.techniques import apply_techniques, ps_link_bytes
from sim.training.techniques_report import techniques_record
from sim.workload.plan import placement_notes

if TYPE_CHECKING:  # SimPy's executor is imported when a network is simulated
    from sim.training.graph.simulate import Progress

__all__ = ["collective_timer", "run_step", "simulate_step"]


def _timer(setup: StepSetup) -> CollectiveTimer:
    """The step's :class:`CollectiveTimer` (one per topology, parameters, network and the
    scenario's NCCL_ALGO/NCCL_PROTO restrictions, reused across scenarios)."""
    par = setup.scenario.parallel
    return timer_for(setup.topology, setup.profile.collectives, setup.network, par.nccl_algo,
                     par.nccl_proto)  # fmt: skip


def collective_timer(setup: StepSetup) -> CollectiveTimer:
    """The :class:`CollectiveTimer` that steps of ``setup``'s topology, collective
    parameters and network share: what a caller costs with it (a planner's bound) is
    cached for the step that follows."""
    return _timer(setup)


def simulate_step(
    scenario: Scenario,
    network: str | None = None,
    compute: Mapping[str, object] | None = None,
    *,
    profile: str | None = None,
    force_profile: bool = False,
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
    profile : str, optional
        A profile overriding the scenario's (name, path or ``none``); without either, the
        shipped profile measured on the topology's hardware, as every entry point does
        (:func:`sim.training.setup.prepare_step`).
    force_profile : bool
        Use a profile measured on other hardware.

    Notes
    -----
    The simulation is deterministic, so results are kept (the last :data:`KEPT_RESULTS`):
    the same scenario asked again, through any entry point, is answered from the kept
    result, byte for byte. The opt-in sections of the layers over the step (variability,
    reliability, spot, energy) do not change the step and are not part of the key; calls
    with ``compute`` overrides (calibration fits) are always simulated. On the analytical
    network a long 1F1B or interleaved step is folded (:mod:`sim.training.graph.fold`: a
    few micro-batches simulated, the checked-periodic steady state repeated), equal to the
    whole graph's step to rounding (~1e-15 of the step).

    Examples
    --------
    >>> from sim.scenario.load import load_scenario
    >>> r = simulate_step(load_scenario("llama3-8b-dgx"), network="analytical")
    >>> r.fits and 0 < r.mfu < 1
    True
    """
    key = None if compute else _result_key(scenario, network, profile, force_profile)
    if key is not None:
        hit = _RESULTS.get(key)
        if hit is not None:
            _RESULTS.move_to_end(key)
            return copy.deepcopy(hit)  # callers may change its dicts; the kept one stays
    result = run_step(
        scenario, network, compute, profile=profile, force_profile=force_profile, whole=False
    )[0]
    if key is not None:
        _RESULTS[key] = copy.deepcopy(result)
        if len(_RESULTS) > KEPT_RESULTS:
            _RESULTS.popitem(last=False)
    return result


#: Step results kept for repeated questions (a planner's and a sweep's repeats, the API).
KEPT_RESULTS = 1024
_RESULTS: OrderedDict[Hashable, StepResult] = OrderedDict()


def _result_key(
    scenario: Scenario, network: str | None, profile: str | None, force: bool
) -> Hashable | None:
    """What a step's result depends on: the scenario without the sections of the layers
    over the step, the network, the profile choice and the stamps of the topology and
    profile files it names (None when unhashable)."""
    core = replace(scenario, variability=None, reliability=None, spot=None, energy=None)
    files = (scenario.cluster.topology, scenario.profile, profile)
    key = (core, network or scenario.network, profile, force, tuple(map(file_stamp, files)))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def run_step(
    scenario: Scenario,
    network: str | None = None,
    compute: Mapping[str, object] | None = None,
    record: bool = False,
    progress: Progress | None = None,
    *,
    profile: str | None = None,
    force_profile: bool = False,
    whole: bool = True,
) -> tuple[StepResult, StepRun, StepSetup]:
    """:func:`simulate_step` plus the executed task graph behind the result (for traces).

    ``record`` keeps per-link rate samples of a simulated network (trace counters);
    ``progress`` is called now and then during a simulated network's run. On the
    closed-form network a long 1F1B or interleaved step is folded (:mod:`sim.training.graph.fold`: a few
    micro-batches run, the periodic steady state repeated); ``whole`` (the default) then
    also runs the whole graph for the returned run (traces, exports, timelines), while
    the result stays the folded one, so it is the same through every entry point.
    """
    setup = prepare_step(scenario, network, profile=profile, force_profile=force_profile)
    if compute:
        setup = replace(setup, compute=setup.compute.overridden(compute, "compute"))
    notes: list[str] = []
    if not (compute and "sustained_clock" in compute):  # a clock set explicitly stays
        setup, notes = _power_clock(setup, compute or {})
    result, run, setup = _run(setup, record, progress, whole)
    return (replace(result, notes=[*notes, *result.notes]) if notes else result), run, setup


def _run(setup: StepSetup, record: bool = False, progress: Progress | None = None,
         whole: bool = True) -> tuple[StepResult, StepRun, StepSetup]:  # fmt: skip
    """The work of :func:`run_step` once ``setup`` is resolved."""
    timer = _timer(setup)
    if mixed_path(setup):  # mixed GPU models or a speed-based split: every replica class
        mixed = mixed_step(setup, timer, record=record, progress=progress)
        crit = mixed.critical
        run, setup = crit.run, crit.setup
        ideal = _ideal(setup, timer, run)
        result = _result(setup, timer, run, ideal, mixed.total_microbatches)
        notes = [*result.notes, *mixed_notes(mixed)]
        return replace(result, notes=notes, gpu_types=gpu_type_report(mixed)), run, setup
    costs = chunk_costs(setup, timer)
    folded = fold_run(setup, timer, costs)  # None on a simulated network (where record is)
    if folded is None:
        run = run_graph(setup, timer, record=record, progress=progress, costs=costs)
        return _result(setup, timer, run, _ideal(setup, timer, run)), run, setup
    result = _result(setup, timer, *folded)
    run = (
        run_graph(setup, timer, record=record, progress=progress, costs=costs)
        if whole
        else folded[0]
    )
    return result, run, setup


#: Compute parameters at a power-limited clock, per (base parameters, clock): the same
#: object for the same clock, so that what is costed per parameters stays kept.
_CLOCKED: Kept[ComputeParams] = Kept(limit=256)


def _clocked(compute: ComputeParams, clock: float) -> ComputeParams:
    return _CLOCKED.get(clock, (compute,), lambda: replace(compute, sustained_clock=clock))


def _power_clock(setup: StepSetup, overrides: Mapping[str, object]) -> tuple[StepSetup, list[str]]:
    """``setup`` with its GPUs' clock under their power limit, and a note saying so, where
    the compute parameters carry a power model (:mod:`sim.training.compute.power`); the
    model's ``sustained_clock`` from the step's time shares (:func:`_full_clock_shares`).

    A profile (or ``overrides``) that sets the GEMM ceiling (``matmul_eff_max``, from
    ``calibrate compute``'s back-to-back micro-benchmarks) measured it at the clock those
    ran at, so the model is not applied over it; nor on a cluster whose stages have their
    own parameters (mixed GPU models)."""
    if setup.compute.power_cap_w == 0 or setup.stage_compute:  # no power model
        return setup, []
    if "matmul_eff_max" in setup.profile.compute or "matmul_eff_max" in overrides:
        return setup, ["power-limited clock not applied: the GEMM ceiling in use comes from "
                       "micro-benchmarks timed at their own clock (a profile's matmul_eff_max)"]  # fmt: skip
    g, k, fp8 = _full_clock_shares(setup)
    model = setup.compute.step_power_model(fp8)
    assert model is not None  # power_cap_w is set
    drawn = ""
    if fp8 > 0 and setup.compute.power_gemm_fp8_w > 0:  # fp8 GEMMs' own draw blended in
        drawn = f", {model.gemm_w:.0f} W at full clock with fp8 GEMMs {fp8:.0%} of that time"
    clock = gemm_rate(model, g, k)
    note = (f"power-limited clock: tensor-core kernels at {clock:.3f} of their full-clock rate "
            f"under the {model.cap_w:.0f} W limit (at full clock they take {g:.0%} of the "
            f"step{drawn}, other kernels {k:.0%}, waiting {max(0.0, 1 - g - k):.0%}; "
            "sim/training/compute/power.py)")  # fmt: skip
    return replace(setup, compute=_clocked(setup.compute, round(clock, 12))), [note]


def _full_clock_shares(setup: StepSetup) -> tuple[float, float, float]:
    """(tensor-core share, other kernels' share) of the step run at full clock on the
    closed-form network (folded where it folds), and the fp8 GEMMs' part of the
    tensor-core time (0 unless the step is in fp8): tensor-core kernels (GEMMs and
    attention) are the layers' share of the critical stage's compute; other kernels the
    rest of that compute plus the optimizer step; the remainder (exposed communication,
    pipeline bubbles) is idle. Approximations: overlapped communication adds no power;
    convolutions count as other work."""
    full = replace(setup, network="analytical", compute=_clocked(setup.compute, 1.0))
    first, _, full = _run(full, whole=False)
    step, b = first.step_time_s, first.breakdown
    gemm, attn = layer_tensor_shares(full, _timer(full))
    share = gemm + attn
    g = share * b["compute"] / step
    fp8 = gemm / share if share > 0 and setup.scenario.training.precision == "fp8" else 0.0
    return g, min(1.0 - g, ((1.0 - share) * b["compute"] + b["optimizer"]) / step), fp8


def _ideal(setup: StepSetup, timer: CollectiveTimer, run: StepRun) -> StepRun:
    """The same pipeline with free sends and no data-parallel work: its idle time is the
    schedule's bubble."""
    if setup.plan.pp == 1:
        return run
    return ideal_run(setup, run)


def _breakdown(line: StageTimeline, ideal: StageTimeline) -> dict[str, float]:
    """The critical stage's time by cause; ``zero3_gather_exposed`` is what per-layer
    parameter gathers (ZeRO-3, FSDP SHARD_GRAD_OP forwards) leave on the critical path,
    ``param_gather`` the distributed optimizer's all-gather after the step or what it
    leaves exposed when run ahead of the forward (``overlap_param_gather``);
    ``cp_comm_exposed`` what the ring attention's K/V transfers leave exposed."""
    busy = line.compute_s + line.tp_exposed_s + line.ep_s + line.cp_exposed_s
    busy += line.zero3_exposed_s + line.param_exposed_s
    idle = max(0.0, line.compute_end_s - busy)
    ideal_busy = ideal.compute_s + ideal.tp_exposed_s + ideal.ep_s + ideal.cp_exposed_s
    ideal_busy += ideal.zero3_exposed_s + ideal.param_exposed_s
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
        "param_gather": line.param_gather_s + line.param_exposed_s,
    }


def _link_bytes(setup: StepSetup, timer: CollectiveTimer, run: StepRun) -> dict[str, float]:
    """Cluster-wide bytes per link scope moved in one step: every communication task of the
    graph (its wire bytes as the tuner routes them, times the copies the whole job runs of
    it: replica 0's pipeline sends stand for every replica's), and the TP/EP/CP collectives
    inside the passes times the groups that run them. The same on every network backend;
    a folded step's tasks count as many times as they run (``run.weight``)."""
    plan, g = setup.plan, run.graph
    # per task in task order, as one running sum per scope (a scope a task does not
    # touch adds +0.0, which changes no sum of non-negative bytes)
    seen: dict[int, tuple[float, float, float]] = {}
    nvlink = pcie = net = 0.0
    comm = g.comm
    weight = run.weight
    for i, kind in enumerate(g.kind):
        if kind == COMPUTE:
            continue
        parts = comm[i]
        per = seen.get(id(parts))
        if per is None:
            key = (kind, parts)
            per = timer.scope_bytes.get(key)
            if per is None:
                per = timer.scope_bytes[key] = _by_scope(_parts_bytes(timer, kind, parts))
            seen[id(parts)] = per
        w = weight[i] if weight is not None else 1  # (x * 1 is x)
        nvlink += per[0] * w
        pcie += per[1] * w
        net += per[2] * w
    out = dict(zip(SCOPE_NAME, (nvlink, pcie, net), strict=True))
    groups_per_stage = {
        "tp": plan.dp_cp,
        "ep": plan.tp * plan.dp // max(1, plan.ep),
        "cp": plan.tp * plan.dp_cp,  # one ring pair per rank; wire bytes are one pair's
    }
    scaled: dict[int, tuple[tuple[str, float], ...]] = {}  # by id of the (kept) pass cost
    for line in run.lines:
        for rec, times in zip(line.passes, line.repeats, strict=True):
            cost = run.costs[(rec.chunk * plan.pp + rec.stage, rec.kind)]
            pairs = scaled.get(id(cost))
            if pairs is None:
                pairs = scaled[id(cost)] = tuple(
                    (scope, b * groups_per_stage.get(group_kind, 1))
                    for group_kind, per_kind in cost.wire_bytes.items()
                    for scope, b in per_kind.items()
                )
            for scope, b in pairs:
                out[scope] += b * times
    for scope, b in ps_link_bytes(setup).items():
        out[scope] += b
    return out


def _by_scope(per: dict[str, float]) -> tuple[float, float, float]:
    """``per``'s bytes in :data:`SCOPE_NAME` order (nvlink, pcie, net), 0.0 where absent
    (KeyError for another scope)."""
    for scope in per:
        if scope not in SCOPE_NAME:
            raise KeyError(scope)
    nvlink, pcie, net = (per.get(scope, 0.0) for scope in SCOPE_NAME)
    return nvlink, pcie, net


def _parts_bytes(timer: CollectiveTimer, kind: int, parts: tuple[Comm, ...]) -> dict[str, float]:
    """Wire bytes per link scope of one communication task, times its copies."""
    out: dict[str, float] = {}
    topo = timer.topology
    for c in parts:
        if c.nbytes <= 0:
            continue
        for group in c.groups:
            if kind == COLLECTIVE:
                if len(group) < 2:
                    continue
                per = timer.link_bytes(group, c.op, c.nbytes)
            else:
                per = _route_bytes(topo, group[0], group[1], c.nbytes)
            for scope, b in per.items():
                out[scope] = out.get(scope, 0.0) + b * c.copies
    return out


def _route_bytes(topo: Topology, src: str, dst: str, nbytes: float) -> dict[str, float]:
    """Bytes per link scope that one transfer puts on its route's links."""
    out: dict[str, float] = {}
    if src == dst:
        return out
    path = topo.path(src, dst)
    for li, share in zip(path.links.tolist(), path.shares.tolist(), strict=True):
        scope = topo.link_scope[li]
        out[scope] = out.get(scope, 0.0) + nbytes * share
    return out


def _peak_flops(topo: Topology, precision: str) -> float:
    """Dense peak FLOP/s per GPU at ``precision``: the mean over a mixed cluster's GPUs."""
    models = topo.gpu_models or (topo.gpu,)
    return sum(g.peak_flops.get(precision, g.peak_flops["bf16"]) for g in models) / len(models)


def _result(
    setup: StepSetup,
    timer: CollectiveTimer,
    run: StepRun,
    ideal: StepRun,
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
    mem = scenario_memory(sc, plan, topo.gpu_models or (topo.gpu,))  # fit on the smallest
    techniques, tech_notes = techniques_record(setup, crit, mem, run.lines[crit].compute_end_s)
    notes = [
        *setup.compute.notes,
        *placement_notes(plan),
        *scenario_advice(sc, plan, mem),
        *tech_notes,
    ]
    breakdown = _breakdown(run.lines[crit], ideal.lines[crit])
    _check_finite(step, breakdown)
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
            **(
                {"microbatch_group_size": plan.microbatch_group_size}
                if plan.microbatch_group_size is not None
                else {}
            ),
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
        profile=setup.profile_info,
    )


def _cp_bytes(run: StepRun) -> float:
    """Ring-attention bytes one GPU of the busiest stage sends in a step (0 without CP)."""
    per_stage = [sum(run.costs[(r.chunk * len(run.lines) + r.stage, r.kind)].cp_bytes * n
                     for r, n in zip(line.passes, line.repeats, strict=True))
                 for line in run.lines]  # fmt: skip
    return float(max(per_stage, default=0.0))


def _check_finite(step_s: float, breakdown: dict[str, float]) -> None:
    """A step time past the float range (a rate or bandwidth near zero) is refused with
    the part of the step that overflowed, instead of NaN in the breakdown."""
    if math.isfinite(step_s):
        return
    bad = [k for k, v in breakdown.items() if not math.isfinite(v)]
    raise ConfigError(
        f"the step time overflows ({step_s} s) in {', '.join(bad) or 'the step'}: a rate or "
        "bandwidth of the scenario is too small (e.g. training.nvme_bandwidth, "
        "training.cpu_adam_rate)"
    )
