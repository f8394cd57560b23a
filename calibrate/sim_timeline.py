"""The simulated step as ``calibrate compare`` reads it, through ONE adapter function.

:func:`simulated_timeline` is the only place in ``calibrate`` that reads the training
engine's internals (today :func:`sim.training.step.run_step`, the engine's op lists and
:mod:`sim.training.trace`); the engine is being rewritten as a task graph, and switching
to it means rewriting this function alone. What it returns is engine-neutral:

- ``ops``: every compute kernel of one rank of the first pipeline stage for one
  micro-batch, forward then backward, with the class the compute model times it by
  (``gemm``, ``attn_fwd``, ``attn_bwd``, ``memory``, ``stream``), its shape and its time
  (launch overhead included, as the compute model charges it);
- ``optimizer_s``: that rank's optimizer step;
- ``streams``: the per-stream spans of that rank's GPU (the simulated trace's tracks:
  ``compute``, ``tp/sp comm``, ``dp/zero comm``, ``pp send``), seconds;
- ``step_time_s`` and the result's ``breakdown``.

>>> from sim.scenario.load import load_scenario
>>> t = simulated_timeline(load_scenario("gpt2-1gpu"))
>>> t.step_time_s > 0 and t.microbatches >= 1 and {o.cls for o in t.ops} >= {"gemm", "memory"}
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from sim.scenario.load import Scenario

__all__ = ["SimOp", "SimTimeline", "simulated_timeline"]


@dataclass(frozen=True)
class SimOp:
    """One simulated kernel: name, timing class, pass (``F``/``B``), shape, seconds."""

    name: str
    cls: str
    phase: str
    shape: tuple[float, ...]
    flops: float
    bytes: float
    time_s: float


@dataclass(frozen=True)
class SimTimeline:
    """The engine-neutral view of a simulated step (see the module docstring)."""

    step_time_s: float
    microbatches: int
    ops: tuple[SimOp, ...]
    optimizer_s: float
    launch_overhead_s: float
    streams: dict[str, list[tuple[float, float, str]]]
    breakdown: dict[str, float]


def _ops(setup: Any) -> list[SimOp]:
    from sim.training.compute.kernels import op_time_s
    from sim.training.graph.costs import op_context
    from sim.workload.ops import chunk_ops
    from sim.workload.stages import stage_layers

    plan = setup.plan
    layers = stage_layers(plan, setup.scenario.model)[0]
    ops = chunk_ops(op_context(setup), layers, True, plan.pp == 1)
    gpu, p = setup.gpu_at(0), setup.compute_at(0)
    return [SimOp(o.name, o.cls, phase, tuple(o.shape), o.flops, o.bytes, op_time_s(o, gpu, p))
            for phase, part in (("F", ops.fwd), ("B", ops.bwd)) for o in part
            if o.kind == "compute"]  # fmt: skip


def _streams(setup: Any, run: Any) -> dict[str, list[tuple[float, float, str]]]:
    from sim.training.trace import TRACKS, chrome_trace

    names = {tid: name for name, tid in TRACKS.items()}
    out: dict[str, list[tuple[float, float, str]]] = {name: [] for name in TRACKS}
    for e in chrome_trace(setup, run)["traceEvents"]:
        if e.get("ph") == "X" and e.get("pid") == 1 and e.get("tid") in names:
            start = float(e["ts"]) * 1e-6
            out[names[e["tid"]]].append((start, start + float(e["dur"]) * 1e-6, str(e["name"])))
    return out


def simulated_timeline(scenario: Scenario, compute: Mapping[str, object] | None = None,
                       network: str = "analytical") -> SimTimeline:  # fmt: skip
    """Simulate ``scenario`` with ``compute`` laid over its parameters; the adapter.

    Parameters
    ----------
    scenario : Scenario
        The job.
    compute : mapping, optional
        Compute-parameter overrides (a profile's ``compute:`` section).
    network : str
        ``analytical`` or ``flow``.

    Returns
    -------
    SimTimeline
    """
    from sim.training.graph.optimizer import optimizer_s
    from sim.training.step import run_step

    result, run, setup = run_step(scenario, network, compute)
    if compute:
        setup = replace(setup, compute=setup.compute.overridden(compute, "compute"))
    micro = scenario.training.global_batch // (scenario.parallel.micro_batch * setup.plan.dp)
    return SimTimeline(
        step_time_s=result.step_time_s, microbatches=max(1, micro), ops=tuple(_ops(setup)),
        optimizer_s=optimizer_s(setup, 0), launch_overhead_s=setup.compute_at(0).launch_overhead_s,
        streams=_streams(setup, run), breakdown=dict(result.breakdown),
    )  # fmt: skip
