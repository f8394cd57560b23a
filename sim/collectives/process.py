"""A collective schedule as a SimPy process on a network backend (:func:`run_schedule`).

The timing model is :mod:`sim.collectives.engine`'s: base latency, then every step's
transfers started together and its step latency once they have landed. Alone on the
network (``exclusive``) a uniform phase is timed from its first step; on a shared one
(inside a training step) ``coalesce`` runs it as one step of all its bytes.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence

import numpy as np
import simpy

from sim.collectives.channels import CAPPED, overlapped
from sim.collectives.engine import SCOPE_NAME, RouteCache, wire_scale
from sim.collectives.params import CollectiveParams
from sim.collectives.schedule import Phase, Schedule
from sim.collectives.steparrays import (
    RouteTable,
    StepArrays,
    StepMemo,
    cached_step,
    sender_totals,
)
from sim.network.base import Network

__all__ = ["run_schedule"]


def run_schedule(
    env: simpy.Environment,
    network: Network,
    sched: Schedule,
    endpoints: Sequence[str],
    routes: RouteCache,
    params: CollectiveParams,
    protocol: str,
    exclusive: bool = False,
    nccl_channels: int = 0,
    tag: str = "",
    coalesce: bool = False,
) -> Generator[simpy.Event, object, None]:
    """SimPy process body: run ``sched`` on ``network`` with ``protocol``.

    Parameters
    ----------
    endpoints : sequence of str
        Graph node of each participant (ranks, then in-network reducers).
    exclusive : bool
        True when nothing else uses the network meanwhile; lets uniform phases be timed
        from one step (exact). Leave False inside a training step with other traffic.
    nccl_channels : int
        Channels NCCL runs the algorithm on (0: uncapped): each transfer is capped at its
        share of its sender's channel rate, and overlapped ring steps that fill a slice
        per channel take max(data, step latency) (:func:`predict_step_sync` charges the
        same).
    tag : str
        What the bytes belong to in the network's ``link_bytes_by_tag`` (e.g. ``"dp"``).
    coalesce : bool
        On a shared network (not ``exclusive``) with a batch backend, run each uniform
        phase's ``repeat`` steps as ONE step moving ``repeat`` times the bytes, then charge
        the ``repeat`` step latencies (overlapped steps: ``max(data, repeat * latency)``)
        and ``repeat - 1`` more route latencies (the step's longest).
        An approximation, for speed (a 128-rank ring phase is 127 steps, each a re-solve
        per distinct finish time): with constant rates every step is held by the same
        slowest transfer, so both give the same time and the same bytes per link; when
        other traffic changes the rates mid-phase, a transfer that lockstep would hold at
        each step boundary runs ahead instead, as NCCL's ranks do by up to NCCL_STEPS
        slices. Bytes per link are the same either way.
    """
    algo = params.algorithm(sched.algorithm)
    scale = wire_scale(params, sched.algorithm, protocol)
    capped = sched.algorithm in CAPPED and nccl_channels > 0
    rate_cap_Bps = nccl_channels * params.channels.bandwidth_Bps[protocol] if capped else math.inf
    memo = StepMemo()
    table = routes.table
    first = _steps_run(sched, endpoints, table, memo, exclusive, coalesce)
    if first:
        network.expect_routes(table, np.concatenate([s.route for s in first.values()]))
    yield env.timeout(algo.base_latency_s[protocol])
    for i, phase in enumerate(sched.phases):
        k = 0
        uniform = phase.uniform and phase.repeat > 1
        skip = exclusive and uniform  # time the first step, then skip ahead
        reps = _steps_per_start(phase, exclusive, coalesce)
        while k < phase.repeat:
            t0 = env.now
            # alone on the network, a step's bytes are the uniform phase's steps' bytes
            before = network.link_bytes.copy() if skip else None
            step = first.pop((i, k), None) or cached_step(sched, i, k, endpoints, table, memo)
            sent = sender_totals(step, sched.chunk_bytes, sched.n)
            if len(step):
                yield _start(network, step, sent * reps, sched.chunk_bytes * reps, scale,
                             rate_cap_Bps, table, tag)  # fmt: skip
                if reps > 1:  # the other steps' route latencies (each step lands once)
                    yield env.timeout((reps - 1) * float(table.latency_s[step.route].max()))
                if not phase.streamed:
                    scope = SCOPE_NAME[int(table.scope[step.route].max())]
                    lat = algo.step_latency_s[scope][protocol] * reps
                    # overlapped steps: the handshake runs alongside the data (max, not sum)
                    both = phase.overlap and overlapped(
                        params.channels, float(sent.max(initial=0.0)), nccl_channels
                    )
                    yield env.timeout(max(0.0, lat - (env.now - t0)) if both else lat)
            k += reps
            if before is not None and k < phase.repeat:
                rest = phase.repeat - k
                network.add_link_bytes((network.link_bytes - before) * rest, tag)
                yield env.timeout((env.now - t0) * rest)
                k = phase.repeat


def _steps_per_start(phase: Phase, exclusive: bool, coalesce: bool) -> int:
    """Steps of ``phase`` each start of :func:`run_schedule` runs: a uniform phase's
    ``repeat`` as one on a shared network with ``coalesce``, else 1."""
    uniform = phase.uniform and phase.repeat > 1
    return phase.repeat if coalesce and uniform and not exclusive else 1


def _steps_run(
    sched: Schedule,
    endpoints: Sequence[str],
    table: RouteTable,
    memo: StepMemo,
    exclusive: bool,
    coalesce: bool,
) -> dict[tuple[int, int], StepArrays]:
    """Every step :func:`run_schedule` starts, by (phase, step): alone on the network, a
    uniform phase's first step only. Empty past :data:`EXPECTED_TRANSFERS` transfers (the
    steps are then converted as they run, and their routes not announced)."""
    out: dict[tuple[int, int], StepArrays] = {}
    total = 0
    for i, phase in enumerate(sched.phases):
        if exclusive and phase.uniform and phase.repeat > 1:
            ks = range(1)
        else:
            ks = range(0, phase.repeat, _steps_per_start(phase, exclusive, coalesce))
        for k in ks:
            step = out[(i, k)] = cached_step(sched, i, k, endpoints, table, memo)
            total += len(step)
            if total > EXPECTED_TRANSFERS:
                return {}
    return {key: step for key, step in out.items() if len(step)}


#: Most transfers of a schedule whose routes :func:`run_schedule` announces to the network
#: before its first step (:func:`_steps_run` holds them all meanwhile).
EXPECTED_TRANSFERS = 1_000_000


def _start(
    network: Network,
    step: StepArrays,
    sent: np.ndarray,
    chunk_bytes: float,
    scale: float,
    rate_cap_Bps: float,
    table: RouteTable,
    tag: str,
) -> simpy.Event:
    """Start a step's transfers through the backend's ``transfer_routes`` (routes by
    number), each of its payload's wire bytes and capped at its share of its sender's
    channel rate."""
    table.freeze()
    payload = step.chunks * chunk_bytes
    limit = np.full(len(step), math.inf)
    if math.isfinite(rate_cap_Bps):
        pos = sent > 0
        limit[pos] = rate_cap_Bps * payload[pos] / sent[pos] * scale
    return network.transfer_routes(table, step.route, payload * scale, limit, tag)
