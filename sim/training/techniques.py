"""What the data-parallel techniques change in a step's result: the amortised step time
(stale-synchronous parameter servers, local SGD), memory, and the ``techniques`` block.

The engines already ran the step with the techniques' gradient buckets
(:mod:`sim.training.graph.techniques`). Here, for the critical stage:

- ``staleness = s > 0`` (parameter server, stale-synchronous): a worker may run up to
  ``s`` steps ahead of its updates, so in steady state the step lasts
  ``max(C, D, (C + X) / (s + 1))`` where ``X`` is the exposed push/pull of the
  synchronous step, ``C`` the rest of it and ``D`` the total push/pull time (the network
  serialises steps' pushes). The exposed DP communication becomes that minus ``C``.
- ``sync_every = H`` (local SGD / DiLoCo): the replicas synchronise once every H steps,
  so the reported step is the average over H steps: the exposed synchronisation and the
  outer Nesterov step (OUTER_STEP_BYTES per parameter, memory-bound) count ``1 / H``
  each, and so do the synchronisation's bytes in ``link_bytes_by_scope`` (the graph's
  gradient tasks run ``1 / H`` copies).
- ``dp_mode = ps``: the push and the pull of every worker are on its links
  (:func:`ps_link_bytes`): the PCIe hops from the GPU to its NIC and the NIC's uplink,
  both ways; the server hosts are outside the topology, so nothing is counted past the
  uplink.
- memory: error-feedback buffers (top-k, PowerSGD: one fp32 gradient copy), PowerSGD's
  P and Q, and DiLoCo's outer state (OUTER_STATE_BYTES per parameter).
"""

from __future__ import annotations

from typing import Any

from sim.training.compute.passes import CollectiveTimer
from sim.training.graph.buckets import Bucket, buckets_of, stage_comm
from sim.training.graph.costs import bucket_s
from sim.training.graph.execute import StepRun
from sim.training.graph.techniques import nic_Bps, powersgd_stage, ps_servers
from sim.training.setup import StepSetup
from sim.workload.comms import rank_params
from sim.workload.plan import rank_coords
from sim.workload.techniques import (
    OUTER_STATE_BYTES,
    CommTechniques,
    techniques_of,
    topk_crossover_dp,
    wire_factor,
)
from sim.workload.zero import zero_semantics

__all__ = [
    "OUTER_STEP_BYTES",
    "TechniquesOutcome",
    "apply_techniques",
    "dp_wire_bytes",
    "ps_link_bytes",
]

#: HBM bytes per parameter of DiLoCo's outer step: read the fp32 master weights and the
#: snapshot to form the pseudo-gradient and write it (12); after its all-reduce read it,
#: read and write the outer momentum and the snapshot, write the fp32 and bf16 weights
#: (4 + 8 + 8 + 6). An estimate in the style of optimizer_bytes_per_param.
OUTER_STEP_BYTES = 38


class TechniquesOutcome:
    """Breakdown, memory additions, notes and the JSON block of the techniques."""

    def __init__(self) -> None:
        self.breakdown: dict[str, float] = {}
        self.memory: dict[str, float] = {}
        self.notes: list[str] = []
        self.block: dict[str, Any] = {}


def _bucket_wire(setup: StepSetup, bucket: Bucket) -> float:
    """Bytes one GPU sends for a bucket's collectives (ring factors)."""
    plan = setup.plan
    size = {"dp": plan.dp, "edp": plan.edp, "shard": plan.shard, "replica": plan.dp // plan.shard}
    return sum(wire_factor(op, size[k]) * b for k, op, b in bucket.steps)


def dp_wire_bytes(setup: StepSetup, s: int) -> tuple[float, float]:
    """(plain, with the techniques) gradient-synchronisation bytes one GPU of stage ``s``
    sends per synchronisation (ring factors of nccl-tests; a parameter server's push and
    pull count the bucket twice)."""
    plan, c = setup.plan, stage_comm(setup, s)
    op = zero_semantics(plan).reduce_op
    before = (
        wire_factor(op, plan.dp) * c.dp_grad_bytes + wire_factor(op, plan.edp) * c.edp_grad_bytes
    )
    if techniques_of(setup.scenario.parallel).dp_mode == "ps":
        return before, 2.0 * (c.dp_grad_bytes + c.edp_grad_bytes)
    return before, plan.virtual_stages * sum(_bucket_wire(setup, b) for b in buckets_of(setup, s))


def ps_link_bytes(setup: StepSetup) -> dict[str, float]:
    """Bytes per link scope that the parameter-server push and pull put on the workers'
    links in one step: every GPU of stage ``s`` pushes and pulls ``dp_wire_bytes / 2``
    each way over the PCIe hops to its NIC and the NIC's uplink (:func:`_worker_hops`);
    empty unless ``dp_mode`` is ``ps``."""
    if techniques_of(setup.scenario.parallel).dp_mode != "ps" or setup.plan.dp == 1:
        return {}
    plan, graph = setup.plan, setup.topology.graph
    per_stage = [dp_wire_bytes(setup, s)[1] for s in range(plan.pp)]
    local: dict[int, list[str]] = {}  # node -> its GPUs in rank order
    nics: dict[int, list[str]] = {}
    for name, data in graph.nodes(data=True):
        if data.get("kind") == "nic":
            nics.setdefault(data["node"], []).append(name)
    out: dict[str, float] = {}
    for rank, gpu in enumerate(setup.topology.gpus[: plan.num_gpus]):
        mates = local.setdefault(graph.nodes[gpu]["node"], [])
        mates.append(gpu)
        node_nics = nics.get(graph.nodes[gpu]["node"], [])
        nbytes = per_stage[rank_coords(plan, rank).pp] / 2.0
        for scope, hops in _worker_hops(setup, gpu, len(mates) - 1, node_nics).items():
            out[scope] = out.get(scope, 0.0) + 2.0 * nbytes * hops
    return out


def _worker_hops(setup: StepSetup, gpu: str, k: int, nics: list[str]) -> dict[str, float]:
    """Link scope -> links one byte crosses from ``gpu``, the ``k``-th GPU of its server, to
    the fabric: the route to the nearest of the server's ``nics`` (the ``k``-th GPU takes
    the ``k mod n``-th of ``n`` equally near ones, as the router assigns ports) and that
    NIC's uplink."""
    topo = setup.topology
    if not nics:
        return {}
    paths = [topo.path(gpu, nic) for nic in nics]
    near = min(len(p.links) for p in paths)
    nearest = [i for i, p in enumerate(paths) if len(p.links) == near]
    pick = nearest[k % len(nearest)]
    out: dict[str, float] = {}
    path = paths[pick]
    for li, share in zip(path.links.tolist(), path.shares.tolist(), strict=True):
        out[topo.link_scope[li]] = out.get(topo.link_scope[li], 0.0) + share
    uplinks = topo.graph.out_edges(nics[pick], data=True)
    if any(d.get("scope") == "net" for _, _, d in uplinks):
        out["net"] = out.get("net", 0.0) + 1.0
    return out


def _memory(setup: StepSetup, stage: int) -> dict[str, float]:
    """Bytes the techniques add on a GPU of ``stage``."""
    tech, sc, plan = techniques_of(setup.scenario.parallel), setup.scenario, setup.plan
    params = rank_params(sc.model, plan, stage).total
    out: dict[str, float] = {}
    if tech.grad_compression == "topk":
        out["error_feedback"] = 4.0 * params
    if tech.grad_compression == "powersgd":
        p, q, comp, _ = powersgd_stage(sc.model, plan, tech.powersgd_rank, stage)
        out["error_feedback"] = 4.0 * comp
        out["powersgd_pq"] = 4.0 * (p + q - (params - comp))
    if tech.sync_every > 1:
        out["outer_optimizer"] = OUTER_STATE_BYTES * params
    return {k: v for k, v in out.items() if v > 0}


def apply_techniques(
    setup: StepSetup,
    timer: CollectiveTimer,
    run: StepRun,
    crit: int,
    breakdown: dict[str, float],
    mem_stage: int,
) -> TechniquesOutcome:
    """The techniques' effect on the critical stage's ``breakdown`` (see the module
    docstring); an empty outcome when none is active."""
    out = TechniquesOutcome()
    out.breakdown = dict(breakdown)
    tech = techniques_of(setup.scenario.parallel)
    if not tech.active or setup.plan.dp == 1:
        return out
    plan, bd = setup.plan, out.breakdown
    buckets = buckets_of(setup, crit)
    v, h = plan.virtual_stages, tech.sync_every
    comm_s = v * sum(bucket_s(setup, timer, crit, b) for b in buckets)
    local_s = v * sum(b.local_s for b in buckets) if tech.dp_mode != "ps" else 0.0
    exposed_sync = bd["dp_comm_exposed"]
    if tech.dp_mode == "ps" and tech.staleness > 0:
        rest = sum(bd.values()) - exposed_sync
        step = max(rest, comm_s, (rest + exposed_sync) / (tech.staleness + 1))
        bd["dp_comm_exposed"] = step - rest
        out.notes.append(
            f"stale-synchronous parameter server (staleness {tech.staleness}): steady-state "
            "step max(compute, push/pull, (compute + exposed) / (staleness + 1))"
        )
    if h > 1:
        params = rank_params(setup.scenario.model, plan, crit).total
        outer = params * OUTER_STEP_BYTES / (setup.topology.gpu.hbm_Bps * setup.compute.stream_eff)
        bd["dp_comm_exposed"] = exposed_sync / h
        bd["outer_optimizer"] = outer / h
        out.notes.append(
            f"local SGD / DiLoCo: replicas synchronise every {h} steps; the step time is the "
            f"average over {h} steps (synchronisation, outer step and their link bytes / {h})"
        )
    before = max(dp_wire_bytes(setup, s)[0] for s in range(plan.pp))
    after = max(dp_wire_bytes(setup, s)[1] for s in range(plan.pp))
    out.memory = _memory(setup, mem_stage)
    if out.memory:
        out.notes.append(
            f"memory: the techniques add {sum(out.memory.values()) / 2**30:.2f} GiB per GPU "
            f"({', '.join(out.memory)}); any fit advice above is for the plan without them"
        )
    out.block = {
        "grad_compression": tech.grad_compression,
        "dp_mode": tech.dp_mode,
        "sync_every": h,
        "dp_comm": {
            "wire_bytes_per_gpu_before": before,
            "wire_bytes_per_gpu_after": after / h,
            "ratio": (after / h) / before if before else 0.0,
            "comm_time_per_sync_s": comm_s,
            "exposed_s_per_step": bd["dp_comm_exposed"],
            "exposed_s_synchronous": exposed_sync,
            "compute_overhead_s_per_step": local_s / h,
        },
        "memory_added_bytes": dict(out.memory),
    }
    _parameters(setup, tech, out)
    return out


def _parameters(setup: StepSetup, tech: CommTechniques, out: TechniquesOutcome) -> None:
    """Technique parameters and approximation notes into ``out``."""
    comp = tech.grad_compression
    if comp == "topk":
        out.block["topk_ratio"] = tech.topk_ratio
        out.block["topk_crossover_dp"] = topk_crossover_dp(tech.topk_ratio, setup.plan.grad_bytes)
    if comp == "powersgd":
        out.block["powersgd_rank"] = tech.powersgd_rank
    if comp != "none":
        out.notes.append(
            f"grad_compression {comp}: compression kernels run on the DP stream before each "
            "bucket's collective (their contention with backward compute is not modelled); "
            "wire bytes use ring factors"
        )
    if tech.dp_mode == "ps":
        server_Bps, worker_Bps = nic_Bps(setup)
        out.block.update(
            ps_servers=ps_servers(setup),
            staleness=tech.staleness,
            ps_server_nic_Bps=server_Bps,
            ps_worker_nic_Bps=worker_Bps,
        )
        out.notes.append(
            "parameter server: closed-form push then pull at NIC line rates (not on the flow "
            "network; servers outside the topology: link bytes end at the workers' NIC "
            "uplinks); the servers' update is charged as the "
            "workers' Adam step, and worker memory still counts the optimizer states"
        )
