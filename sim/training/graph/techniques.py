"""Gradient buckets under the data-parallel techniques of
:mod:`sim.workload.techniques`: their collectives and their local time.

A bucket of ``nbytes`` of gradients (``grad_bytes`` per element) becomes:

- ``bf16``/``fp8``: the same reduction of the cast bytes, after a cast kernel (read the
  gradient, write the cast copy; the reverse after the reduction);
- ``topk``: an all-gather of every rank's (value, int32 index) pairs, after the
  error-feedback add and the selection, and followed by the scatter-add of the gathered
  pairs (memory-bound passes, see :func:`topk_s`);
- ``powersgd``: two all-reduces, P (with the uncompressed tensors) then Q, after the
  matmuls of :func:`powersgd_s`; the bucket gets its share (by bytes) of its stage's
  P, Q and compute;
- ``ps``: no collective; a push of the bucket to the parameter servers and a pull of the
  updated parameters (:func:`ps_s`, closed form on the topology's NIC rates).

Approximations (stated in every result that uses them): the compression kernels run on
the data-parallel stream just before their bucket's collective (they delay it; their
competition with the backward's kernels for the GPU is not modelled) and launch
overheads of the per-tensor kernels are not counted; parameter-server traffic is not put
on the flow network (the server hosts are not in the topology graph), both backends use
the closed form.
"""

from __future__ import annotations

from functools import lru_cache

from sim.training.setup import StepSetup
from sim.workload.comms import rank_params
from sim.workload.models import ModelSpec
from sim.workload.plan import ParallelPlan
from sim.workload.techniques import (
    INDEX_BYTES,
    CommTechniques,
    compressed_bytes,
    powersgd_split,
    rank_matrices,
    techniques_of,
)

__all__ = [
    "PASSES_POWERSGD",
    "PASSES_TOPK",
    "Steps",
    "cast_s",
    "nic_Bps",
    "powersgd_s",
    "powersgd_stage",
    "ps_s",
    "ps_servers",
    "technique_steps",
    "topk_s",
]

Steps = tuple[tuple[str, str, float], ...]

#: Passes over the gradient (``grad_bytes`` each per element) of top-k with error
#: feedback: read gradient and residual and write their sum (3), the selection reads it
#: (1), the residual is rewritten (1). An estimate: torch.topk's radix select makes more
#: than one pass, so this is a lower bound.
PASSES_TOPK = 5
#: Passes of PowerSGD over a compressed matrix: error-feedback add (read M and the
#: residual, write M: 3), P = M Q and Q = M^T P read M (2), the decompressed P Q^T is
#: written and the residual M - P Q^T updated (2). Vogels et al. 2019, Algorithm 1.
PASSES_POWERSGD = 7


def _stream_Bps(setup: StepSetup) -> float:
    """HBM bandwidth a memory-bound kernel reaches (``stream_eff``), bytes/s."""
    return setup.topology.gpu.hbm_Bps * setup.compute.stream_eff


def cast_s(setup: StepSetup, nbytes: float, to_bytes: int) -> float:
    """Seconds to cast ``nbytes`` of gradients to ``to_bytes`` per element and back
    after the reduction (memory-bound: read + write, twice)."""
    g = setup.plan.grad_bytes
    return 2.0 * nbytes / g * (g + to_bytes) / _stream_Bps(setup)


def topk_s(setup: StepSetup, nbytes: float, ratio: float, ranks: int) -> float:
    """Seconds of top-k with error feedback on ``nbytes`` of gradients: PASSES_TOPK
    passes over them, then reading the ``ranks`` gathered (value, index) sets and adding
    them into a zeroed gradient (write once)."""
    g = setup.plan.grad_bytes
    gathered = ranks * ratio * nbytes / g * (g + INDEX_BYTES)
    return ((PASSES_TOPK + 1) * nbytes + gathered) / _stream_Bps(setup)


@lru_cache(maxsize=64)
def powersgd_stage(
    model: ModelSpec, plan: ParallelPlan, rank: int, stage: int
) -> tuple[float, ...]:
    """(P elements, Q elements, compressed elements, FLOPs) of one rank of ``stage``."""
    mats = rank_matrices(model, plan, stage)
    p, q, comp = powersgd_split(mats, rank_params(model, plan, stage).dense, rank)
    flops = 0.0
    for x in mats:
        if (x.rows + x.cols) * rank * 2 <= x.rows * x.cols:
            # P = M Q, Q = M^T P, decompress P Q^T (2 m n r each); Gram-Schmidt of P (2 m r^2)
            flops += x.count * (6 * x.rows * x.cols * rank + 2 * x.rows * rank * rank)
    return p, q, comp, flops


def powersgd_s(setup: StepSetup, s: int) -> float:
    """Seconds of PowerSGD's compression of a whole stage-``s`` gradient: matmuls at the
    GPU's fp32 peak (``grad_bytes`` 4) or bf16 peak, or PASSES_POWERSGD memory-bound
    passes over the compressed matrices, whichever is longer (roofline)."""
    plan, gpu = setup.plan, setup.topology.gpu
    tech = techniques_of(setup.scenario.parallel)
    p, q, comp, flops = powersgd_stage(setup.scenario.model, plan, tech.powersgd_rank, s)
    peak = gpu.peak_flops.get("fp32" if plan.grad_bytes >= 4 else "bf16", gpu.peak_flops["bf16"])
    nbytes = (PASSES_POWERSGD * comp + 2 * (p + q)) * plan.grad_bytes
    return max(flops / peak, nbytes / _stream_Bps(setup))


def nic_Bps(setup: StepSetup) -> tuple[float, float]:
    """(one NIC's achievable rate, a GPU's share of its server's NICs) in bytes/s.

    From the NIC-to-switch links (scope ``net``) of server 0: line rate times the
    transport's achievable fraction (the collectives' ``link_factor``: efficiency, socket
    limits) times one minus the link's incast loss (many workers push to one server: the
    incast case), the same derating the collectives' links get.
    """
    topo, params = setup.topology, setup.profile.collectives
    caps = []
    for nic, data in topo.graph.nodes(data=True):
        if data.get("kind") != "nic" or data.get("node") != 0:
            continue
        for u, v, d in topo.graph.out_edges(nic, data=True):
            if d.get("scope") == "net":
                i = topo.link_index[(u, v)]
                line = float(topo.capacity_Bps[i])
                factor = params.link_factor("net", topo.link_transport[i], line)
                caps.append(line * factor * (1.0 - float(topo.link_loss[i])))
    if not caps:
        from sim.errors import ConfigError

        raise ConfigError(f"parallel.dp_mode: ps needs NICs; topology {topo.name!r} has none")
    return float(max(caps)), float(sum(caps)) / topo.gpus_per_node


def ps_servers(setup: StepSetup) -> int:
    """``parallel.ps_servers``, or one server host per node of the cluster."""
    given = techniques_of(setup.scenario.parallel).ps_servers
    return given if given is not None else setup.topology.nodes


def ps_s(setup: StepSetup, nbytes: float) -> float:
    """Seconds to push ``nbytes`` of gradients from every GPU to the servers and pull as
    many bytes of parameters back (BSP: the pull follows the push).

    Every GPU of the job pushes at once; the servers' NICs (one NIC each, as
    :func:`nic_Bps` derates it) carry
    ``gpus * nbytes / servers`` each way, a GPU's share of its server's NICs carries
    ``nbytes``; the slower of the two sets each phase, plus one message latency:
    ``2 * max(nbytes / worker_Bps, gpus * nbytes / (servers * server_Bps)) + 2 * latency``.
    """
    plan = setup.plan
    server_Bps, worker_Bps = nic_Bps(setup)
    workers = plan.tp * plan.pp * plan.dp
    phase = max(nbytes / worker_Bps, workers * nbytes / (ps_servers(setup) * server_Bps))
    latency = setup.profile.collectives.algorithm("direct").base_latency_s["simple"]
    return 2.0 * (phase + latency)


def technique_steps(
    setup: StepSetup, s: int, nbytes: float, expert: bool, steps: Steps
) -> tuple[Steps, float]:
    """A bucket's collectives and local seconds under the scenario's techniques, from its
    plain reduction ``steps`` of ``nbytes`` (see the module docstring)."""
    tech: CommTechniques = techniques_of(setup.scenario.parallel)
    plan, comp = setup.plan, tech.grad_compression
    kind = "edp" if expert else "dp"
    if tech.dp_mode == "ps":
        return (), ps_s(setup, nbytes)
    if comp in ("bf16", "fp8"):
        to = 2 if comp == "bf16" else 1
        new = tuple((k, op, compressed_bytes(tech, b, plan.grad_bytes)) for k, op, b in steps)
        return new, cast_s(setup, nbytes, to)
    ranks = plan.edp if expert else plan.dp
    if comp == "topk":
        out = ranks * compressed_bytes(tech, nbytes, plan.grad_bytes)
        return ((kind, "all_gather", out),), topk_s(setup, nbytes, tech.topk_ratio, ranks)
    if comp == "powersgd":
        p, q, _, _ = powersgd_stage(setup.scenario.model, plan, tech.powersgd_rank, s)
        share = nbytes / (rank_params(setup.scenario.model, plan, s).dense * plan.grad_bytes)
        g = plan.grad_bytes
        new = ((kind, "all_reduce", p * g * share), (kind, "all_reduce", q * g * share))
        return new, powersgd_s(setup, s) * share
    return steps, 0.0
