"""Chrome trace-event JSON of a simulated step (opens in Perfetto / chrome://tracing).

A process per simulated GPU (each pipeline stage's GPU of DP replica 0, TP rank 0: the
GPUs it stands for behave identically), a track per stream (compute, pipeline sends,
DP reduction), and on the flow network a ``network`` process with link-utilisation
counters per link class (carried rate / capacity, summed over the class's links).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from sim.training.engine.setup import StepSetup
from sim.training.engine.simpy_engine import PipelineRun

__all__ = ["chrome_trace", "trace_json"]

TRACKS = {"compute": 1, "pp_send": 2, "dp": 3}


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
        "dur": (end_s - start_s) * 1e6,
        "args": args,
    }


def _counters(setup: StepSetup, run: PipelineRun) -> list[dict[str, Any]]:
    net = run.network
    samples = getattr(net, "samples", None)
    if not samples:
        return []
    topo = net.topology  # type: ignore[union-attr]
    scopes = np.asarray(topo.link_scope)
    cap = {s: float(topo.capacity_Bps[scopes == s].sum()) for s in ("nvlink", "pcie", "net")}
    out = [_meta(0, "network (link utilisation per class)")]
    for t, links, rates in samples:
        args = {}
        for s, c in cap.items():
            if c > 0:
                args[s] = float(rates[scopes[links] == s].sum()) / c if len(links) else 0.0
        out.append(
            {"name": "utilisation", "ph": "C", "pid": 0, "tid": 0, "ts": t * 1e6, "args": args}
        )
    return out


def chrome_trace(setup: StepSetup, run: PipelineRun) -> dict[str, Any]:
    """Trace-event document of ``run`` (times in microseconds)."""
    plan = setup.plan
    events: list[dict[str, Any]] = []
    stands_for = plan.tp * plan.dp
    for s, line in enumerate(run.lines):
        pid = s + 1
        gpu = setup.stages[s].gpus[0]
        events.append(_meta(pid, f"{gpu}: stage {s} (stands for {stands_for} GPUs)"))
        for name, tid in TRACKS.items():
            events.append(_meta(pid, "", tid, name))
        for r in line.passes:
            label = f"{r.kind}{r.mb}" + (f" chunk {r.chunk}" if plan.virtual_stages > 1 else "")
            events.append(
                _span(
                    pid,
                    TRACKS["compute"],
                    label,
                    r.start_s,
                    r.end_s,
                    microbatch=r.mb,
                    chunk=r.chunk,
                )
            )
        for name, start, end in line.comm:
            tid = TRACKS["pp_send"] if name == "pp_send" else TRACKS["dp"]
            events.append(_span(pid, tid, name, start, end))
        if line.optimizer_s:
            events.append(
                _span(
                    pid,
                    TRACKS["compute"],
                    "optimizer",
                    line.dp_end_s,
                    line.dp_end_s + line.optimizer_s,
                )
            )
    events += _counters(setup, run)
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "scenario": setup.scenario.name,
            "topology": setup.topology.name,
            "network": setup.network,
        },
    }


def trace_json(setup: StepSetup, run: PipelineRun) -> str:
    """Deterministic JSON text of :func:`chrome_trace`."""
    return json.dumps(chrome_trace(setup, run), sort_keys=True, separators=(",", ":"))
