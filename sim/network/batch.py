"""A synchronous step's transfers started together, with one event when all have landed.

A collective step of a few thousand ranks is tens of thousands of transfers; through
:meth:`FlowNetwork.transfer <sim.network.flow.FlowNetwork.transfer>` each costs a route
lookup, an event, its ``succeed`` and a step of SimPy's loop, and the engine then waits
on an ``all_of`` over them all. :func:`start_batch` takes the step's routes as already
resolved :class:`~sim.topology.paths.Path` objects with their latencies, queues the flows
as ``transfer`` would, and gives every flow the same :class:`Countdown` in place of an
event: its ``succeed`` counts arrivals and fires the one event when the last transfer
lands, at the instant the ``all_of`` would have fired.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import simpy

from sim.network.flowstate import new_flows
from sim.topology.paths import Path

if TYPE_CHECKING:
    from sim.network.flow import FlowNetwork

__all__ = ["Countdown", "start_batch"]


class Countdown:
    """Stands for ``left`` transfers' arrival events: fires ``event`` at the last one."""

    __slots__ = ("event", "left")

    def __init__(self, event: simpy.Event, left: int) -> None:
        self.event, self.left = event, left

    def succeed(self, _value: object = None) -> None:
        """One transfer landed; the last one fires :attr:`event`."""
        self.left -= 1
        if not self.left:
            self.event.succeed()

    def landed(self, _event: simpy.Event) -> None:
        """Callback form of :meth:`succeed` (for a zero-byte transfer's timer)."""
        self.succeed()


def start_batch(
    net: FlowNetwork,
    paths: Sequence[Path],
    latency_s: np.ndarray,
    nbytes: np.ndarray,
    max_rate_Bps: np.ndarray,
    tag: str = "",
) -> simpy.Event:
    """Start one transfer per path (``nbytes[i]`` bytes, rate cap ``max_rate_Bps[i]``,
    landing ``latency_s[i]`` after its last byte); the event fires when all have landed.

    Equivalent to ``all_of([net.transfer(...) for each])`` with the same routes. Raises
    ValueError for negative or non-finite sizes or non-positive caps.
    """
    if not (np.all(nbytes >= 0.0) and np.all(np.isfinite(nbytes))):
        raise ValueError("nbytes must be finite and >= 0")
    if not np.all(max_rate_Bps > 0):
        raise ValueError("max_rate_Bps must be > 0")
    done = net.env.event()
    if not len(paths):
        return done.succeed()
    count = Countdown(done, len(paths))
    sizes, lats, caps = nbytes.tolist(), latency_s.tolist(), max_rate_Bps.tolist()
    flows = [i for i, (p, b) in enumerate(zip(paths, sizes, strict=True)) if len(p.links) and b]
    if len(flows) < len(paths):
        queued = set(flows)
        for i, (path, lat) in enumerate(zip(paths, lats, strict=True)):
            if i not in queued:  # as FlowNetwork.transfer: a timer only
                net._landing += 1
                timer = net.env.timeout(lat if len(path.links) else 0.0)
                timer.callbacks.append(net._landed)
                timer.callbacks.append(count.landed)
    if not flows:
        return done
    mine = [paths[i] for i in flows]
    net._weighted = net._weighted or any(p.weights is not None for p in mine)
    net._tagged = net._tagged or bool(tag)
    # every flow's "event" is the one Countdown (it only needs ``succeed``)
    events: list[simpy.Event] = [count] * len(flows)  # type: ignore[list-item]
    net._pending.append(
        new_flows(mine, [sizes[i] for i in flows], [lats[i] for i in flows],
                  [caps[i] for i in flows], events, [tag] * len(flows), net._nlinks)
    )  # fmt: skip
    if not net._solve_due:
        net._request_solve()
    return done
