"""Analytical step timeline: list scheduling of the pass DAG, contention in closed form.

On the ``analytical`` network every duration is known up front, so the step is a
longest-path problem over the dependency graph of passes: a pass starts when its stage
is free and its input has arrived (producer's end + pipeline-send time); gradient buckets
queue on the stage's DP stream. This runs in O(passes), which is what makes sweeps of
thousands of configurations cheap; the flow backend goes through SimPy, where contention
is re-solved as transfers start and end.

Contention the analytical model does account for (approximations, stated):

- the TP ranks' groups of one collective run together and share NICs and cables:
  :meth:`sim.training.compute.passes.CollectiveTimer.concurrent_time_s` charges the extra
  load of their most loaded link;
- under ZeRO-3/FSDP with reductions every micro-batch, a stage's parameter gathers and
  gradient reductions cross the same NICs: the gathers go first and the reductions use
  the gaps between them (:func:`fill_gaps`), so a NIC-bound stage takes its total network
  work; the flow backend shares the bandwidth instead, which delays the gathers a little
  and the reductions less.

  In that mode every pipeline stage is taken to gather and reduce at the same time as
  well (steady state), so all stages' groups share the links (ECMP spine collisions).

Not accounted for: pipeline sends beside DP traffic; stages' end-of-step reductions
(ZeRO-0/1/2 without per-micro-batch reduction) overlapping each other.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from sim.network.base import uncontended_time_s
from sim.training.compute.passes import CollectiveTimer, PassCost
from sim.training.engine.setup import StepSetup
from sim.training.engine.stage import (
    Bucket,
    PassRecord,
    StageTimeline,
    bucket_release_units,
    bucket_s,
    buckets_of,
    gathered_pass,
    optimizer_s,
    tail_gathers_s,
    unit_gather_s,
)
from sim.training.schedule.pipeline import Step, make_schedule
from sim.workload.zero import zero_semantics

__all__ = ["list_schedule", "run_pass_s"]


def _p2p_s(
    setup: StepSetup, timer: CollectiveTimer, src: int, dst: int, nbytes: float, latency_s: float
) -> float:
    if src == dst or nbytes <= 0:
        return 0.0
    a, b = setup.stages[src].gpus, setup.stages[dst].gpus
    return (
        max(uncontended_time_s(timer.topology, x, y, nbytes) for x, y in zip(a, b, strict=True))
        + latency_s
    )


def run_pass_s(
    setup: StepSetup,
    timer: CollectiveTimer,
    s: int,
    cost: PassCost,
    start_s: float,
    unit_ends: bool = True,
    windows: deque[tuple[float, float]] | None = None,
) -> tuple[float, list[float]]:
    """End of a pass started at ``start_s`` and each unit's end (gathers uncontended;
    ``unit_ends=False`` skips the list where nothing needs it). ``windows``, when given,
    receives the (start, end) of each parameter gather."""
    if not cost.gathers and not unit_ends:
        return start_s + cost.busy_s, []
    if cost.gathers:
        cache: dict[object, float] = {}
        gathers = []
        for u in cost.units:
            g = cache.get(u)
            if g is None:
                g = cache[u] = unit_gather_s(setup, timer, s, u, windows is not None)
            gathers.append(g)
        return gathered_pass(start_s, cost.units, gathers, windows)
    ends, t = [], start_s
    for u in cost.units:
        t += u.busy_s
        ends.append(t)
    return start_s + cost.busy_s, ends


def fill_gaps(start_s: float, work_s: float, windows: Sequence[tuple[float, float]]) -> float:
    """When ``work_s`` seconds of network work begun at ``start_s`` end if it yields to
    ``windows`` (sorted, disjoint busy intervals of higher priority).

    >>> fill_gaps(0.0, 2.0, [(1.0, 3.0)])
    4.0
    >>> fill_gaps(0.0, 1.0, [(1.0, 3.0)])
    1.0
    """
    t, work = start_s, work_s
    for a, b in windows:
        if b <= t:
            continue
        if a >= t + work:
            break
        work -= max(0.0, a - t)
        t = max(t, b)
    return t + work


def list_schedule(
    setup: StepSetup,
    timer: CollectiveTimer,
    costs: dict[tuple[int, str], PassCost],
    pp_bytes: Sequence[float],
    p2p_latency_s: float,
    *,
    free_p2p: bool = False,
    with_dp: bool = True,
) -> list[StageTimeline]:
    """Per-stage timelines of one step under the analytical model (seconds)."""
    plan = setup.plan
    p, v, m = plan.pp, plan.virtual_stages, plan.num_microbatches
    nvs = p * v
    orders = make_schedule(plan.schedule, p, m, v)
    send = {}
    for s in range(p):
        for d in {(s + 1) % p, (s - 1) % p}:
            send[(s, d)] = (
                0.0 if free_p2p else _p2p_s(setup, timer, s, d, pp_bytes[s], p2p_latency_s)
            )
    ready: dict[tuple[str, int, int], float] = {("F", 0, mb): 0.0 for mb in range(m)}
    lines = [StageTimeline() for _ in range(p)]
    idx, free = [0] * p, [0.0] * p
    bucket_ready: list[list[tuple[float | None, Bucket]]] = [[] for _ in range(p)]
    last_b = [
        {c: max(st.mb for st in orders[s] if st.kind == "B" and st.chunk == c) for c in range(v)}
        for s in range(p)
    ]
    every_mb = zero_semantics(plan).reduce_every_microbatch and plan.dp_cp > 1
    with_buckets = [with_dp and bool(buckets_of(setup, s)) for s in range(p)]
    # ZeRO-3/FSDP with reductions every micro-batch: a stage's parameter gathers and its
    # gradient reductions cross the same NICs; reductions use the gaps between gathers
    shared = every_mb and plan.zero >= 3 and plan.overlap_dp and any(with_buckets)
    net = [0.0] * p  # when each stage's queued reductions end
    busy: list[deque[tuple[float, float]]] = [deque() for _ in range(p)]
    done, total = 0, sum(len(o) for o in orders)
    while done < total:
        progressed = False
        for s in range(p):
            order, line = orders[s], lines[s]
            while idx[s] < len(order):
                st: Step = order[idx[s]]
                vs = st.chunk * p + s
                t_in = ready.get((st.kind, vs, st.mb))
                if t_in is None:
                    break
                cost = costs[(vs, st.kind)]
                start = max(free[s], t_in)
                release = (
                    with_buckets[s]
                    and st.kind == "B"
                    and (every_mb or st.mb == last_b[s][st.chunk])
                )
                seen = len(busy[s])
                end, unit_ends = run_pass_s(
                    setup, timer, s, cost, start, release, busy[s] if shared else None
                )
                for g0, g1 in list(busy[s])[seen:]:  # gathers preempt queued reductions
                    if g0 < net[s]:
                        net[s] += g1 - g0
                free[s] = end
                line.add_pass(cost, PassRecord(s, st.kind, st.mb, st.chunk, start, end))
                if st.kind == "F":
                    if vs < nvs - 1:
                        ready[("F", vs + 1, st.mb)] = end + send[(s, (vs + 1) % p)]
                    else:
                        ready[("B", vs, st.mb)] = end
                elif vs > 0:
                    ready[("B", vs - 1, st.mb)] = end + send[(s, (vs - 1) % p)]
                if release:
                    bs = buckets_of(setup, s)
                    for b, u in zip(bs, bucket_release_units(len(unit_ends), len(bs)), strict=True):
                        at = unit_ends[u] if unit_ends else end
                        if shared:
                            begin = max(net[s], at)
                            while busy[s] and busy[s][0][1] <= begin:
                                busy[s].popleft()
                            work = bucket_s(setup, timer, s, b, all_stages=True)
                            net[s] = fill_gaps(begin, work, busy[s])
                            line.comm.append((b.label, begin, net[s]))
                        else:
                            bucket_ready[s].append((at if plan.overlap_dp else None, b))
                idx[s] += 1
                done += 1
                progressed = True
            line.compute_end_s = free[s]
        assert progressed, "pipeline schedule deadlocked"
    for s in range(p):
        _finish(setup, timer, lines[s], s, bucket_ready[s], with_dp, net[s])
    return lines


def _finish(
    setup: StepSetup,
    timer: CollectiveTimer,
    line: StageTimeline,
    s: int,
    buckets: list[tuple[float | None, Bucket]],
    with_dp: bool,
    net_free_s: float = 0.0,
) -> None:
    """DP stream (after ``net_free_s``), optimizer and tail gathers of stage ``s``."""
    t = line.compute_end_s
    dp_free = line.compute_end_s if not setup.plan.overlap_dp else net_free_s
    for ready_t, bucket in buckets:
        start = max(dp_free, line.compute_end_s if ready_t is None else ready_t)
        dp_free = start + bucket_s(setup, timer, s, bucket)
        line.comm.append((bucket.label, start, dp_free))
    line.dp_end_s = max(dp_free, t)
    line.optimizer_s = optimizer_s(setup, s, line.compute_end_s) if with_dp else 0.0
    line.param_gather_s = tail_gathers_s(setup, timer, s) if with_dp else 0.0
    line.end_s = line.dp_end_s + line.optimizer_s + line.param_gather_s
