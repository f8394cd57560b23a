"""Chrome trace-event JSON of a simulated step (opens in Perfetto / chrome://tracing).

A process per GPU, each with four tracks: ``compute`` (forward and backward passes, the
optimizer step), ``tp/sp comm`` (the pass's tensor-parallel collectives, and MoE
all-to-alls), ``dp/zero comm`` (gradient buckets, ZeRO-3 parameter prefetch, the ZeRO-1/2
parameter all-gather after the optimizer) and ``pp send`` (pipeline sends). The engine
simulates DP replica 0 and lets it stand for its identical peers, so every GPU of a
pipeline stage shows that stage's timeline. Past :data:`MAX_GPU_PROCESSES` GPUs only
representative GPUs get a process (each TP rank of replica 0, or one GPU per stage when
even those are too many), and the trace's ``otherData.note`` says which GPUs each stands for.

Within a pass the TP collectives are drawn as one span of their exposed time (what compute
does not hide) after the pass's compute (the step graph does not order kernels inside a
pass); ZeRO-3/FSDP parameter gathers, gradient buckets, pipeline sends and the tail of the
step as the executed graph's tasks ran them (on either network). On the flow network a ``network`` process
carries counters: utilisation per link class, and per link for the busiest
:data:`MAX_LINK_COUNTERS` links (carried rate / capacity).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from sim.training.graph.execute import StepRun
from sim.training.graph.timelines import PassRecord, StageTimeline
from sim.training.setup import StepSetup

__all__ = [
    "MAX_GPU_PROCESSES",
    "MAX_LINK_COUNTERS",
    "SPAN_NAMES",
    "TRACKS",
    "chrome_trace",
    "trace_json",
]

TRACKS = {"compute": 1, "tp/sp comm": 2, "dp/zero comm": 3, "pp send": 4}
MAX_GPU_PROCESSES = 64
MAX_LINK_COUNTERS = 32
_NETWORK_PID = 0
#: Span names of the step graph's communication tasks (by task label).
SPAN_NAMES = {
    "zero_all_gather": "zero3 gather",
    "param_all_gather": "param all_gather",
    "tied_all_reduce": "tied embedding all_reduce",
    "pp_send": "pp send",
}


def _meta(pid: int, name: str, tid: int | None = None, thread: str | None = None) -> dict[str, Any]:
    if tid is None:
        return {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}}
    return {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": thread}}


def _span(
    pid: int, tid: int, name: str, start_s: float, end_s: float, **args: Any
) -> dict[str, Any]:
    return {
        "name": name,
        "ph": "X",
        "pid": pid,
        "tid": tid,
        "ts": start_s * 1e6,
        "dur": max(0.0, end_s - start_s) * 1e6,
        "args": args,
    }


def _pass_events(setup: StepSetup, run: StepRun, pid: int, r: PassRecord) -> list[dict[str, Any]]:
    """Compute, TP/EP and ZeRO-3 prefetch spans of one pass."""
    plan = setup.plan
    cost = run.costs[(r.chunk * plan.pp + r.stage, r.kind)]
    label = f"{r.kind}{r.mb}" + (f" chunk {r.chunk}" if plan.virtual_stages > 1 else "")
    start = r.start_s
    out = [
        _span(
            pid,
            TRACKS["compute"],
            label,
            start,
            start + cost.compute_s,
            microbatch=r.mb,
            chunk=r.chunk,
        )
    ]
    if cost.tp_exposed_s > 0:
        tp_start = start + cost.compute_s
        out.append(
            _span(pid, TRACKS["tp/sp comm"], f"{label} tp", tp_start, tp_start + cost.tp_exposed_s)
        )
    if cost.ep_s > 0:
        ep_start = r.end_s - cost.ep_s
        out.append(_span(pid, TRACKS["tp/sp comm"], f"{label} ep all_to_all", ep_start, r.end_s))
    return out


def _stage_events(
    setup: StepSetup, run: StepRun, pid: int, line: StageTimeline
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for r in line.passes:
        out += _pass_events(setup, run, pid, r)
    for label, start, end in line.comm:
        tid = TRACKS["pp send"] if label == "pp_send" else TRACKS["dp/zero comm"]
        out.append(_span(pid, tid, SPAN_NAMES.get(label, label), start, end))
    if line.optimizer_s:
        t = line.end_s - line.param_gather_s - line.optimizer_s
        out.append(_span(pid, TRACKS["compute"], "optimizer", t, t + line.optimizer_s))
    return out


def _processes(setup: StepSetup) -> tuple[list[tuple[str, int, str]], str]:
    """(GPU name, stage, label) per process, and the note on what they stand for."""
    plan, stages = setup.plan, setup.stages
    if setup.topology.num_gpus <= MAX_GPU_PROCESSES:
        out = []
        for s, st in enumerate(stages):
            for t in range(plan.tp):
                for replica in st.dp[t]:
                    out.append((replica, s, f"{replica}: stage {s}, tp rank {t}"))
        note = "a process per GPU; every data-parallel replica shows replica 0's simulated timeline"
        return sorted(out, key=lambda x: setup.topology.gpus.index(x[0])), note
    if plan.pp * plan.tp <= MAX_GPU_PROCESSES:
        out = [(g, s, f"{g}: stage {s}, tp rank {t} (stands for {plan.dp_cp} GPUs)")
               for s, st in enumerate(stages) for t, g in enumerate(st.gpus)]  # fmt: skip
        note = f"a process per GPU of data-parallel replica 0; each stands for its {plan.dp_cp} replicas"
        return out, note
    out = [(st.gpus[0], s, f"{st.gpus[0]}: stage {s} (stands for {plan.tp * plan.dp_cp} GPUs)")
           for s, st in enumerate(stages)]  # fmt: skip
    note = f"a process per pipeline stage (GPU of tp rank 0, replica 0): each stands for {plan.tp * plan.dp_cp} GPUs"
    return out, note


def _counters(run: StepRun) -> list[dict[str, Any]]:
    net = run.network
    samples = getattr(net, "samples", None)
    if not samples:
        return []
    topo = net.topology  # type: ignore[union-attr]
    scopes = np.asarray(topo.link_scope)
    cap = {s: float(topo.capacity_Bps[scopes == s].sum()) for s in ("nvlink", "pcie", "net")}
    busiest = [int(i) for i in np.argsort(-net.link_bytes, kind="stable")[:MAX_LINK_COUNTERS]  # type: ignore[union-attr]
               if net.link_bytes[i] > 0]  # type: ignore[union-attr]  # fmt: skip
    out = [_meta(_NETWORK_PID, "network (link utilisation)")]
    for t, links, rates in samples:
        args = {}
        for s, c in cap.items():
            if c > 0:
                args[s] = float(rates[scopes[links] == s].sum()) / c if len(links) else 0.0
        ts = t * 1e6
        out.append(
            {
                "name": "utilisation per class",
                "ph": "C",
                "pid": _NETWORK_PID,
                "tid": 0,
                "ts": ts,
                "args": args,
            }
        )
        rate_of = {int(i): float(r) for i, r in zip(links, rates, strict=True)}
        for i in busiest:
            u, v = topo.links[i]
            out.append({"name": f"{u}->{v}", "ph": "C", "pid": _NETWORK_PID, "tid": 0, "ts": ts,
                        "args": {"utilisation": rate_of.get(i, 0.0) / float(topo.capacity_Bps[i])}})  # fmt: skip
    return out


def chrome_trace(setup: StepSetup, run: StepRun) -> dict[str, Any]:
    """Trace-event document of ``run`` (times in microseconds)."""
    events: list[dict[str, Any]] = []
    processes, note = _processes(setup)
    per_stage = {s: _stage_events(setup, run, -1, line) for s, line in enumerate(run.lines)}
    for pid, (_, s, label) in enumerate(processes, start=1):
        events.append(_meta(pid, label))
        events.append(
            {
                "name": "process_sort_index",
                "ph": "M",
                "pid": pid,
                "tid": 0,
                "args": {"sort_index": pid},
            }
        )
        for name, tid in TRACKS.items():
            events.append(_meta(pid, "", tid, name))
        events += [{**e, "pid": pid} for e in per_stage[s]]
    events += _counters(run)
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "scenario": setup.scenario.name,
            "topology": setup.topology.name,
            "network": setup.network,
            "gpus": setup.topology.num_gpus,
            "note": note,
        },
    }


def trace_json(setup: StepSetup, run: StepRun) -> str:
    """Deterministic JSON text of :func:`chrome_trace`."""
    return json.dumps(chrome_trace(setup, run), sort_keys=True, separators=(",", ":"))
