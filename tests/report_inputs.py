"""Real result records for the report tests, made with the simulator's public API.

Runs, sweep rows, plan lists and collective records here are what the simulator
computes (analytical network, so they are quick), flattened the way the result files
are documented in :mod:`sim.report.records`. Only the per-link rows are a stand-in:
today's ``run --json`` has no ``links``, so :func:`with_links` splits a run's per-class
wire bytes evenly over that class's links (each GPU's NVLink port, both directions).
"""

from __future__ import annotations

import csv
import io
import json
from functools import cache
from pathlib import Path
from typing import Any

from sim import (
    CollectiveSetup,
    ConfigError,
    TopologyError,
    load_scenario,
    load_topology,
    simulate_collective,
    simulate_step,
    sweep_sizes,
)
from sim.catalog import link_spec
from sim.studies.columns import SWEEP_METRICS, SWEEP_PARTS

SWEEP_NODES = (1, 2, 3, 4, 8, 16)
SWEEP_FABRICS = ("h100-ib-ndr", "h100-tcp-100g")
PLANS = ((8, 4, 1), (8, 2, 2), (8, 1, 4), (4, 4, 2), (4, 8, 1), (2, 8, 2))


def _run(scenario: str, sets: tuple[str, ...] = ()) -> dict[str, Any]:
    return simulate_step(load_scenario(scenario, list(sets)), network="analytical").to_dict()


@cache
def run_dicts() -> tuple[dict[str, Any], ...]:
    """Two runs: Llama-3-8B on one DGX H100, Llama-2-70B on 32 H100 over InfiniBand."""
    return (
        _run("llama3-8b-dgx"),
        _run("llama2-70b-256-ib", ("cluster.nodes=4", "parallel.dp=1")),
    )


def with_links(run: dict[str, Any]) -> dict[str, Any]:
    """The run plus ``links`` rows: its NVLink and network bytes split evenly over the
    GPUs' NVLink ports and NICs (one of each per GPU, both directions)."""
    links = []
    for scope, kind, end in (("nvlink", "nvlink4", "nvswitch"), ("net", "ib-ndr", "leaf")):
        per_link = run["link_bytes_by_scope"][scope] / (2 * run["gpus"])
        if per_link == 0:
            continue
        busy = min(1.0, per_link / (link_spec(kind).bandwidth_Bps * run["step_time_s"]))
        for g in range(run["gpus"]):
            for name in (f"gpu{g}->{end}", f"{end}->gpu{g}"):
                links.append({"name": name, "kind": kind, "bytes": per_link, "utilisation": busy})
    return {**run, "links": links}


@cache
def sweep_rows() -> tuple[dict[str, Any], ...]:
    """Llama-3-8B, FSDP over every GPU, 1 to 16 DGX nodes on NDR InfiniBand and on 100G TCP.

    Strong scaling (128 sequences per step whatever the size). At 3 nodes 128 sequences
    do not split over 24 replicas: those points fail with the simulator's reason. One
    extra point without ZeRO does not fit in memory. ``scaling_efficiency`` is throughput per GPU over
    that of the fabric's smallest point.
    """
    rows: list[dict[str, Any]] = []
    for fabric in SWEEP_FABRICS:
        base = None
        for nodes in SWEEP_NODES:
            grid = {"topology": fabric, "nodes": nodes, "parallel.zero": 3}
            sets = (
                f"cluster.topology={fabric}",
                f"cluster.nodes={nodes}",
                f"parallel.dp={8 * nodes}",
            )
            try:
                r = _run("llama3-8b-dgx", sets)
            except (ConfigError, TopologyError) as e:
                rows.append({**grid, "gpus": nodes * 8, "reason": str(e)})
                continue
            per_gpu = r["tokens_per_s"] / r["gpus"]
            base = base or per_gpu
            rows.append({**grid, **_sweep_metrics(r), "scaling_efficiency": per_gpu / base})
    oom = _run("llama3-8b-dgx", ("parallel.zero=0",))
    grid = {"topology": "dgx-h100", "nodes": 1, "parallel.zero": 0}
    rows.append({**grid, **_sweep_metrics(oom), "scaling_efficiency": None})
    return tuple(rows)


def _sweep_metrics(r: dict[str, Any]) -> dict[str, Any]:
    """The sweep columns a run record has (all but the scaling ones and reason), its
    breakdowns flattened as a sweep writes them (``breakdown.compute``...)."""
    out = {k: r[k] for k in SWEEP_METRICS if k in r}
    for field in SWEEP_PARTS:
        out.update({f"{field}.{k}": v for k, v in r[field].items()})
    return out


@cache
def plan_dicts() -> tuple[dict[str, Any], ...]:
    """Candidate plans for Llama-2-70B on 32 H100 (4 nodes), best first (fitting, shortest step)."""
    out = []
    for tp, pp, dp in PLANS:
        parallel = {"tp": tp, "pp": pp, "dp": dp, "zero": 1}
        sets = ("cluster.nodes=4", *(f"parallel.{k}={v}" for k, v in parallel.items()))
        out.append({"parallel": parallel, **_run("llama2-70b-256-ib", sets)})
    return tuple(sorted(out, key=lambda p: (not p["fits"], p["step_time_s"])))


@cache
def collective_dicts(
    topology: str = "dgx-h100", gpus: int | None = None
) -> tuple[dict[str, Any], ...]:
    """``clustersim collective --json`` records of all_reduce, 1 KiB to 1 GiB, factor 4."""
    topo = load_topology(topology)
    setup = CollectiveSetup(topo, gpus)
    out = []
    for size in sweep_sizes(1024, 2**30, 4):
        rec = simulate_collective(setup, "all_reduce", size, network="analytical").record()
        out.append({**rec, "count": int(size // 4), "dtype": "float", "topology": topo.name})
    return tuple(out)


def write_inputs(folder: Path) -> list[Path]:
    """Write one file of each kind (and format) into ``folder``; return their paths."""
    runs = run_dicts()
    files = {
        "run-8b.json": json.dumps(with_links(runs[0]), indent=1),
        "run-70b.json": json.dumps(with_links(runs[1]), indent=1),
        "plans.json": json.dumps(list(plan_dicts()), indent=1),
        "sweep.csv": _csv(sweep_rows()),
        "collective-dgx.json": json.dumps(list(collective_dicts())),
        "collective-ib.jsonl": "\n".join(json.dumps(r) for r in collective_dicts("h100-ib-ndr", 16))
        + "\n",
    }
    for name, text in files.items():
        (folder / name).write_text(text)
    return [folder / name for name in files]


def _csv(rows: tuple[dict[str, Any], ...]) -> str:
    header = list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, header, lineterminator="\n")
    writer.writeheader()
    writer.writerows([{k: ("" if v is None else v) for k, v in r.items()} for r in rows])
    return buf.getvalue()
