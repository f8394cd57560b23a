"""When a plan does not fit: by how much, and which single change makes it fit.

The candidates are the knobs a user turns first: activation recomputation, a higher
ZeRO stage, a smaller micro-batch (same global batch), twice the tensor or pipeline
parallelism (half the data parallelism). Each is checked with the same memory model;
the ones that fit are listed with their memory, best first.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from sim.errors import ConfigError
from sim.scenario.load import Scenario
from sim.training.memory.report import MemoryParams, MemoryReport, memory_per_gpu
from sim.workload.frameworks import Semantics
from sim.workload.models import ModelSpec
from sim.workload.plan import ParallelPlan
from sim.workload.plan_checks import validate_plan
from sim.workload.trainable import DEFAULT, Techniques

__all__ = ["memory_advice", "scenario_advice"]

GIB = 2**30


#: Sequences at least this long get a context-parallel suggestion (CP x2) when they do not
#: fit; shorter ones keep today's advice (CP pays a ring per layer for little memory).
CP_ADVICE_MIN_SEQ = 16384


def _candidates(plan: ParallelPlan, seq: int = 0,
                flash: bool = True) -> Iterator[tuple[str, ParallelPlan]]:  # fmt: skip
    for mode in ("selective", "full"):
        if ("none", "selective", "full").index(mode) > ("none", "selective", "full").index(
            plan.recompute
        ):
            yield f"parallel.recompute={mode}", replace(plan, recompute=mode)
    for z in range(plan.zero + 1, 4):
        if plan.dp_cp > 1:
            yield f"parallel.zero={z}", replace(plan, zero=z, fsdp=None)
    if plan.micro_batch > 1:
        mb = plan.micro_batch // 2
        yield f"parallel.micro_batch={mb}", replace(plan, micro_batch=mb)
    if plan.dp % 2 == 0:
        yield f"parallel.tp={2 * plan.tp}", replace(plan, tp=2 * plan.tp, dp=plan.dp // 2)
        yield f"parallel.pp={2 * plan.pp}", replace(plan, pp=2 * plan.pp, dp=plan.dp // 2)
        cp = 2 * plan.cp
        if flash and seq >= CP_ADVICE_MIN_SEQ and seq % (2 * cp) == 0 and plan.ep == 1:
            yield f"parallel.cp={cp}", replace(plan, cp=cp, dp=plan.dp // 2)


def memory_advice(
    model: ModelSpec,
    plan: ParallelPlan,
    seq: int,
    report: MemoryReport,
    params: MemoryParams | None = None,
    flash_attention: bool = True,
    cross_entropy: str = "fp32",
    tech: Techniques = DEFAULT,
    semantics: Semantics | None = None,
) -> list[str]:
    """Notes for a result whose plan does not fit (empty when it fits); ``semantics``:
    the framework holding the memory (as :func:`memory_per_gpu`).

    >>> from sim.workload.models import model_preset
    >>> from sim.training.memory.report import memory_per_gpu
    >>> m, plan = model_preset("llama2-13b"), ParallelPlan(dp=8, global_batch=16)
    >>> r = memory_per_gpu(m, plan, 4096, 80 * GIB)
    >>> notes = memory_advice(m, plan, 4096, r)
    >>> notes[0].startswith("DOES NOT FIT"), "parallel.zero=3" in notes[1]
    (True, True)
    """
    if report.fits:
        return []
    notes = [
        f"DOES NOT FIT: {report.total_bytes / GIB:.1f} GiB needed on stage {report.stage}, "
        f"{report.over_bytes / GIB:.1f} GiB more than the {report.hbm_bytes / GIB:.1f} GiB "
        f"of HBM (largest part: {max(report.breakdown, key=report.breakdown.__getitem__)})"
    ]
    fits = []
    for label, cand in _candidates(plan, seq, flash_attention):
        try:
            validate_plan(cand, model, cand.num_gpus)
        except ConfigError:
            continue
        r = memory_per_gpu(
            model, cand, seq, report.hbm_bytes, params, flash_attention, cross_entropy, tech,
            semantics,
        )  # fmt: skip
        if r.fits:
            fits.append((r.total_bytes, label))
    if fits:
        changes = ", ".join(f"{label} ({b / GIB:.1f} GiB)" for b, label in sorted(fits))
        notes.append(f"plans that fit with one change: {changes}")
    else:
        notes.append(
            "no single change among recompute, ZeRO stage, micro-batch, TP x2, PP x2"
            + (", CP x2" if seq >= CP_ADVICE_MIN_SEQ else "")
            + " makes it "
            "fit; combine them or use more GPUs"
        )
    return notes


def scenario_advice(scenario: Scenario, plan: ParallelPlan, report: MemoryReport) -> list[str]:
    """:func:`sim.training.memory.advice.memory_advice` for :func:`scenario_memory`'s report."""
    tr = scenario.training
    return memory_advice(scenario.model, plan, tr.seq_len, report, None, tr.flash_attention,
                         tr.cross_entropy, tr.techniques, scenario.framework)  # fmt: skip
