"""What a run will cost before it starts: wall time and peak memory, and the limits.

Every entry point asks this module before any work whose size the input decides (the
simulated GPUs, transfers, micro-batches, collective sizes, sweep points, samples):
a run whose estimate exceeds the limits is refused up front, in one line giving the
estimate, the limit and what would make it fit (``--network analytical``, fewer
nodes), instead of running for an hour or until the machine runs out of memory.

The limits
    :func:`time_limit_s`: ``CLUSTERSIM_TIME_LIMIT`` (seconds; ``0`` or ``none``: no
    limit), else :data:`DEFAULT_TIME_LIMIT_S`. :func:`memory_limit_bytes`:
    ``CLUSTERSIM_MEMORY_LIMIT`` (bytes, ``16GiB``...), else the smallest of the
    process's address-space limit (``ulimit -v``, less :data:`ADDRESS_SPACE_OVERHEAD`) and
    :data:`MEMORY_SHARE` of the machine's physical memory.

Estimates are CPU seconds and resident bytes; wall time equals CPU time on an idle core
(a loaded machine's wall time is longer, its CPU time about the same).

Caps that do not depend on the machine (:data:`MAX_SWEEP_POINTS`...) are fixed, so the
same input is refused everywhere.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sim.errors import ConfigError

__all__ = [
    "DEFAULT_TIME_LIMIT_S",
    "MAX_SWEEP_POINTS",
    "MEMORY_SHARE",
    "SWEEP_ROW_BYTES",
    "Estimate",
    "check_estimate",
    "check_sweep_points",
    "cluster_shape",
    "estimate_collective",
    "estimate_events",
    "estimate_export",
    "estimate_plan",
    "estimate_samples",
    "estimate_step",
    "estimate_steps",
    "estimate_topology",
    "guard_step",
    "memory_limit_bytes",
    "time_limit_s",
]

#: Wall-time limit of one run when ``CLUSTERSIM_TIME_LIMIT`` is not set (seconds): the
#: slowest shipped example (Llama-2-70B ZeRO-3 on 256 GPUs, flow network) takes ~2 min.
DEFAULT_TIME_LIMIT_S = 600.0
#: Share of the machine's physical memory one run may plan to use.
MEMORY_SHARE = 0.8
#: Address space a run maps beyond its resident memory (libraries, thread stacks,
#: allocator arenas; measured VmPeak - VmHWM ~ 240 MB), taken off an ``ulimit -v`` limit.
ADDRESS_SPACE_OVERHEAD = 256 * 2**20
#: Most points of one sweep. Each finished row is kept until the file is rewritten in
#: point order (about 1 KB in memory, measured 0.5-1 KB); the fastest points take
#: ~0.03 s (analytical network), most 0.1-60 s: 100,000 points are an hour to months of
#: simulation on one core. Split a bigger study into several sweeps.
MAX_SWEEP_POINTS = 100_000
#: Memory one sweep row holds until the sweep ends (bytes, rounded up from ~1 KB).
SWEEP_ROW_BYTES = 2048


@dataclass(frozen=True)
class Estimate:
    """A run's predicted cost.

    Attributes
    ----------
    what : str
        The run, for messages (``"a step on 80,000 GPUs (flow network)"``).
    time_s : float
        Predicted wall time (s) on one core of a typical machine.
    memory_bytes : float
        Predicted peak resident memory (bytes).
    suggestion : str
        What would make it cheaper, for the refusal (``"--network analytical"``).
    """

    what: str
    time_s: float
    memory_bytes: float
    suggestion: str = ""


def _env_limit(name: str, parse: Callable[[object, str], float], example: str) -> float | None:
    """The limit in the environment variable ``name`` (None: unset; inf: ``0``/``none``)."""
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    if text.lower() in ("0", "none", "off", "inf"):
        return float("inf")
    try:
        return parse(text, name)
    except ConfigError:
        raise ConfigError(f"{name}={text!r}: expected e.g. {example}, or none") from None


def _seconds_of(text: object, what: str) -> float:
    from sim.units import parse_time

    try:
        value = float(str(text))
    except ValueError:
        return parse_time(text, what)
    return parse_time(value, what)


def time_limit_s() -> float:
    """The wall-time limit of one run (s); ``inf`` when switched off."""
    env = _env_limit("CLUSTERSIM_TIME_LIMIT", _seconds_of, "600 (seconds) or 600s")
    return DEFAULT_TIME_LIMIT_S if env is None else env


def _physical_memory() -> float:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return float("inf")


def memory_limit_bytes() -> float:
    """The peak-memory limit of one run (bytes); ``inf`` when switched off."""
    from sim.units import parse_bytes

    env = _env_limit("CLUSTERSIM_MEMORY_LIMIT", parse_bytes, "16GiB")
    if env is not None:
        return env
    limit = MEMORY_SHARE * _physical_memory()
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:  # address space, not resident memory:
            limit = min(limit, float(soft) - ADDRESS_SPACE_OVERHEAD)
    except (ImportError, ValueError, OSError):  # pragma: no cover - not POSIX
        pass
    return limit


def _seconds(t: float) -> str:
    if t < 120:
        return f"{t:.0f} s"
    if t < 7200:
        return f"{t / 60:.0f} min"
    if t < 2 * 86400:
        return f"{t / 3600:.1f} h"
    return f"{t / 86400:,.0f} days"


def _bytes(b: float) -> str:
    from sim.units import format_bytes

    return format_bytes(b)


def check_estimate(est: Estimate) -> Estimate:
    """Refuse ``est`` when it exceeds :func:`time_limit_s` or :func:`memory_limit_bytes`.

    Returns
    -------
    Estimate
        ``est``, when it fits.

    Raises
    ------
    ConfigError
        One line: the run, its estimate, the limit it exceeds and the suggestion.
    """
    t_limit, m_limit = time_limit_s(), memory_limit_bytes()
    over_t, over_m = est.time_s > t_limit, est.memory_bytes > m_limit
    if not (over_t or over_m):
        return est
    if over_t:
        limit = f"the time limit is {_seconds(t_limit)} (CLUSTERSIM_TIME_LIMIT)"
    else:
        limit = f"the memory limit is {_bytes(m_limit)} (CLUSTERSIM_MEMORY_LIMIT)"
    hint = f"; {est.suggestion}" if est.suggestion else ""
    raise ConfigError(
        f"{est.what} would take about {_seconds(est.time_s)} and {_bytes(est.memory_bytes)}; "
        f"{limit}{hint}, or raise the limit"
    )


def check_sweep_points(points: int) -> None:
    """Refuse a sweep of more than :data:`MAX_SWEEP_POINTS` points before listing any.

    >>> check_sweep_points(10**6)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    sim.errors.ConfigError: sweep: 1,000,000 points; at most 100,000 in one sweep (...
    """
    if points > MAX_SWEEP_POINTS:
        raise ConfigError(
            f"sweep: {points:,} points; at most {MAX_SWEEP_POINTS:,} in one sweep (each row "
            f"is kept until the end, ~{SWEEP_ROW_BYTES // 1024} KiB, and takes 0.03 s to "
            "minutes to simulate); split the grid into several sweeps"
        )


# --- the estimates ---------------------------------------------------------------------
#
# Fitted to ``benchmarks/budget_calibration.py`` on the shared 2-core host (CPU seconds,
# peak RSS; a quiet single core takes about the same CPU time), as upper envelopes: the
# measured cases sit at 0.5-1x of the estimate. Measured (CPU s / RSS MB):
#   analytical step, GPT-3 175B (TP 8, PP 8, ZeRO 1): 1k 2.6/129, 4k 3.4/172, 16k 6.8/355,
#     16k on the 3-tier fat tree 9.4/524, 80k 31.7/1556
#   analytical step, Llama-3 8B pure DP (ZeRO 3): 1k 2.8/137, 16k 13.3/505
#   flow step, GPT-3 175B: 1k 3.3/139, 4k 5.0/209, 16k 11.7/496
#   flow step, Llama-3 8B pure DP: 1k 3.8/173, 4k 6.8/351, 8k 12.4/580, 32k 40.5/2016
#   flow step, Llama-2-70B on 256 GPUs (RoCE): as shipped 2.4/121, ZeRO-3 DP 32 11.7/191
# The time goes to building the topology and its routes (per GPU: the servers' parts,
# NICs and fabric links) and to the step's collectives over every rank of the plan; ZeRO
# 3 adds the parameter all-gathers, the flow network max-min solves over every flow.

#: Start-up: interpreter, numpy/scipy/networkx, scenario and profile (CPU s, bytes).
START_S, START_BYTES = 2.5, 150e6
#: Per GPU of the cluster and step (CPU s): network backend -> (ZeRO 0-2, ZeRO 3).
STEP_S_PER_GPU = {"analytical": (0.42e-3, 0.75e-3), "flow": (0.65e-3, 1.3e-3)}
#: Per GPU (bytes): network backend -> peak resident memory.
STEP_BYTES_PER_GPU = {"analytical": 25e3, "flow": 65e3}
#: Cost of a three-tier fat tree over a two-tier one (more switches, links and routes).
THREE_TIER = 1.4
#: ZeRO-3 on the flow network: every layer's parameter all-gathers run on the network for
#: every micro-batch (CPU s per layer and micro-batch of a replica). Measured: Llama-2-70B
#: ZeRO-3, DP 32 x TP 8 on 256 GPUs (RoCE): 80 layers x 32 micro-batches, 11.7 s.
ZERO3_FLOW_S_PER_LAYER_MICROBATCH = 4e-3
#: A collective sweep (CPU s per GPU): backend -> (the first size: routes, schedules and
#: the tuner's candidates over the whole group, whatever the network; each further size,
#: which reuses them). Measured (h100-ib-ndr, 1 KiB, CPU s / RSS MB): analytical 2k
#: 3.0/182, 8k 11.2/705, 16k 24.0/1998, 80k 94/>8200 (stopped at an 8 GiB cap); flow 1k
#: 2.5/157, 8k 12.9/705, and 1 GiB on 8k 18.3/830; 8 B-1 GiB (28 sizes) on 4k ~16 s.
#: The issue reports 1 GiB on 131,072 GPUs (flow) at 5 min and 11.4 GB: ~90-120 KB per GPU.
COLLECTIVE_S_PER_GPU = {"analytical": (1.5e-3, 0.02e-3), "flow": (1.8e-3, 0.08e-3)}
COLLECTIVE_BYTES_PER_GPU = 130e3
#: An all-to-all on a simulated network: its n - 1 pairwise phases differ, so every one is
#: solved with its n flows over ~n rate levels (CPU s per GPU^3 and size; bytes per GPU^2).
#: Measured 2026-11-26, h100-ib-ndr, 1 GiB, flow: 32 GPUs 1.2 s / 74 MB, 64 GPUs 2.2 s /
#: 142 MB, 128 GPUs 7.5 s / 421 MB, 256 GPUs over 68 s (wall, RSS; a loaded 2-core host).
ALL_TO_ALL_S_PER_GPU3, ALL_TO_ALL_BYTES_PER_GPU2 = 4.0e-6, 22e3
#: Event simulation of a run (sim.reliability.events): per segment-run, per run (CPU s;
#: measured 2.5 us per segment), and memory per segment (the work list) and per run.
EVENT_S_PER_SEGMENT, EVENT_S_PER_RUN = 3e-6, 50e-6
#: CPU seconds per simulated interruption (the interrupt, the lost segment's rerun and the
#: restart): 12 us measured on a 2-core VM (2 runs of 2,000 segments, ~2,040 interruptions
#: each, 51 ms).
EVENT_S_PER_INTERRUPTION = 12e-6
EVENT_BYTES_PER_SEGMENT, EVENT_BYTES_PER_RUN = 16.0, 200.0
#: Monte Carlo of step times (sim.variability): per sample and GPU (s; measured 1e-7),
#: per sample (bytes, the sampled steps and their summaries; measured ~200).
SAMPLE_S_PER_GPU, SAMPLE_BYTES = 1.5e-7, 300.0


def cluster_shape(topology: str, nodes: int | None) -> tuple[int, int]:
    """(GPUs, fabric tiers) of a topology preset or file, from its description alone
    (nothing is built): tiers 1 for one server, 2 or 3 for a parametric fabric."""
    from sim.topology.presets import load_spec

    spec = load_spec(topology, nodes=nodes) if nodes is not None else load_spec(topology)
    kind = spec.network.kind
    tiers = 1 if kind == "none" else 3 if kind == "fat-tree-3tier" else 2
    return spec.nodes * spec.gpus_per_node, tiers


def _gpus_word(n: int) -> str:
    return f"{n:,} GPU{'s' * (n != 1)}"


def _simulated(network: str) -> bool:
    """Whether ``network`` is simulated (not a closed form): the registry says."""
    from sim.network import backend

    return not backend(network).closed_form


def _suggest(network: str, gpus: int) -> str:
    if _simulated(network):
        return "try --network analytical (no contention; seconds where flow takes minutes)"
    return f"try fewer nodes (the cost grows with the {gpus:,} GPUs simulated)"


def estimate_step(scenario: Any, network: str | None = None) -> Estimate:
    """The estimate of one training step of ``scenario`` (either kind of scenario).

    Reads the cluster's description (not built) and the parallel plan; see the constants
    above for the model and its measurements.
    """
    net = network or scenario.network
    gpus, tiers = cluster_shape(scenario.cluster.topology, scenario.cluster.nodes)
    zero3 = int(getattr(scenario.parallel, "zero", 0) == 3)
    per_gpu = STEP_S_PER_GPU[net][zero3] * (THREE_TIER if tiers == 3 else 1.0)
    mem = STEP_BYTES_PER_GPU[net] * (THREE_TIER if tiers == 3 else 1.0)
    time_s = START_S + per_gpu * gpus
    if zero3 and _simulated(net):
        time_s += ZERO3_FLOW_S_PER_LAYER_MICROBATCH * _layer_microbatches(scenario, gpus)
    what = f"one {net}-network step on {_gpus_word(gpus)}"
    return Estimate(what, time_s, START_BYTES + mem * gpus, _suggest(net, gpus))


def _layer_microbatches(scenario: Any, gpus: int) -> int:
    """Layers x micro-batches of one replica (the plan as the step would resolve it)."""
    par, training = scenario.parallel, scenario.training
    found = getattr(scenario.model, "layers", 1)  # a count, or a layer list's layers
    layers = len(found) if isinstance(found, (tuple, list)) else int(found or 1)
    split = max(1, par.tp * par.pp * getattr(par, "cp", 1))
    dp = par.dp or max(1, gpus // split)
    return layers * max(1, training.global_batch // max(1, par.micro_batch * dp))


def estimate_collective(
    gpus: int, tiers: int, sizes: int, network: str, op: str = "all_reduce"
) -> Estimate:
    """The estimate of a collective sweep of ``sizes`` sizes of ``op`` on ``gpus`` GPUs
    (an all-to-all on a simulated network grows as the cube of the GPUs)."""
    topo = STEP_S_PER_GPU["analytical"][0] * gpus * (THREE_TIER if tiers == 3 else 1.0)
    first, more = COLLECTIVE_S_PER_GPU[network]
    what = f"a {network}-network {op} of {sizes} size(s) on {_gpus_word(gpus)}"
    memory = START_BYTES + COLLECTIVE_BYTES_PER_GPU * gpus
    time_s = START_S + topo + gpus * (first + more * (sizes - 1))
    if op == "all_to_all" and _simulated(network):
        time_s += ALL_TO_ALL_S_PER_GPU3 * gpus**3 * sizes
        memory += ALL_TO_ALL_BYTES_PER_GPU2 * gpus**2
    return Estimate(what, time_s, memory, _suggest(network, gpus))


def estimate_samples(samples: int, gpus: int) -> Estimate:
    """The estimate of ``--samples`` sampled steps of a plan on ``gpus`` GPUs."""
    return Estimate(
        f"--samples {samples:,} on {_gpus_word(gpus)}",
        SAMPLE_S_PER_GPU * samples * gpus,
        SAMPLE_BYTES * samples,
        "fewer samples (10,000 give percentiles to ~1%)",
    )


def estimate_events(segments: int, runs: int, interruptions: float = 0.0) -> Estimate:
    """The estimate of ``runs`` event simulations of a job of ``segments`` segments and
    ``interruptions`` expected interruptions per run (each one a lost segment and a
    restart: :data:`EVENT_S_PER_INTERRUPTION`)."""
    per_run = EVENT_S_PER_SEGMENT * segments + EVENT_S_PER_INTERRUPTION * interruptions
    return Estimate(
        f"reliability.simulate_runs {runs:,} over {segments:,} checkpoint intervals and "
        f"~{interruptions:.3g} interruptions per run",
        runs * (per_run + EVENT_S_PER_RUN),
        EVENT_BYTES_PER_SEGMENT * segments + EVENT_BYTES_PER_RUN * runs,
        "fewer runs, or a longer reliability.interval (young/daly choose one)",
    )


#: Of an analytical step's cost per GPU, the share of building the cluster and its routes
#: (80k GPUs: 10.3 of 31.7 CPU s), which a layout search pays once.
TOPOLOGY_SHARE = 0.33


def estimate_plan(topology: str, nodes: int | None, simulated: int) -> Estimate:
    """The estimate of a layout search that simulates at least ``simulated`` analytical
    steps on the cluster (it builds the cluster once)."""
    gpus, tiers = cluster_shape(topology, nodes)
    per_gpu = STEP_S_PER_GPU["analytical"][0] * (THREE_TIER if tiers == 3 else 1.0)
    time_s = START_S + per_gpu * gpus * (TOPOLOGY_SHARE + (1 - TOPOLOGY_SHARE) * simulated)
    memory = START_BYTES + STEP_BYTES_PER_GPU["analytical"] * gpus
    return Estimate(
        f"a layout search on {_gpus_word(gpus)} (at least {simulated} analytical steps)",
        time_s, memory, "try fewer GPUs (--gpus) or a smaller --top",
    )  # fmt: skip


def estimate_topology(topology: str, nodes: int | None) -> Estimate:
    """The estimate of building a cluster and its fabric summary and bill of materials
    (``topologies --show/--export``): an analytical step's share of building the cluster
    (:data:`TOPOLOGY_SHARE`, time and memory). Measured: ``h100-ib-ndr-3tier`` on 32,768
    GPUs, 6.1 CPU s and 442 MB (the estimate: 8.9 s, 530 MB); 131,072 GPUs were stopped
    at 20 CPU s holding 1.5 GB (the estimate: 28 s, 1.7 GB)."""
    gpus, tiers = cluster_shape(topology, nodes)
    scale = TOPOLOGY_SHARE * (THREE_TIER if tiers == 3 else 1.0)
    return Estimate(
        f"building topology {topology} on {_gpus_word(gpus)}",
        START_S + STEP_S_PER_GPU["analytical"][0] * scale * gpus,
        START_BYTES + STEP_BYTES_PER_GPU["analytical"] * scale * gpus,
        "try fewer nodes (--nodes)",
    )


def estimate_export(scenario: Any, network: str | None = None) -> Estimate:
    """The estimate of ``chakra export``: at least its step's (:func:`estimate_step`);
    writing one trace file per rank comes on top."""
    step = estimate_step(scenario, network)
    return Estimate(f"a Chakra export of {step.what}", step.time_s, step.memory_bytes,
                    step.suggestion)  # fmt: skip


def estimate_steps(steps: Sequence[Estimate], what: str) -> Estimate:
    """The estimate of several steps run one after another in one process (``compare``):
    their times add up; the memory is the largest step's plus every other step's share
    of building its cluster (:data:`TOPOLOGY_SHARE`: clusters are kept for reuse)."""
    if not steps:
        return Estimate(what, START_S, START_BYTES)
    big = max(steps, key=lambda e: e.memory_bytes)
    kept = sum(TOPOLOGY_SHARE * (e.memory_bytes - START_BYTES) for e in steps if e is not big)
    return Estimate(
        f"{what} (the largest: {big.what})",
        START_S + sum(e.time_s - START_S for e in steps),
        big.memory_bytes + kept,
        big.suggestion,
    )


def guard_step(scenario: Any, network: str | None = None) -> Estimate:
    """Refuse a step (of a run or a sweep point) whose estimate exceeds the limits."""
    return check_estimate(estimate_step(scenario, network))
