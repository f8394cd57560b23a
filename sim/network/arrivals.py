"""Arrival events of a flow network's transfers, referred to by number.

A step of a few thousand ranks starts tens of thousands of transfers that all report to
one :class:`Countdown`. Keeping one Python object per flow (and calling it once per flow)
cost more than the sharing itself, so flows carry the *number* of their event
(:meth:`Arrivals.register`) and :meth:`Arrivals.land` counts how many of a timer's flows
report to each event: a countdown of ``k`` such flows is told ``k`` at once. Events fire in
the order of the flow at which each would have fired reporting one by one (a plain event at
its flow, a countdown at its last flow), so the simulation is unchanged.
"""

from __future__ import annotations

import functools

import numpy as np
import simpy

__all__ = ["Arrivals", "Countdown"]


class Countdown:
    """Stands for ``left`` transfers' arrival events: fires ``event`` at the last one
    (:meth:`sim.network.flow.FlowNetwork.transfer_batch`)."""

    __slots__ = ("event", "left")

    def __init__(self, event: simpy.Event, left: int) -> None:
        self.event, self.left = event, left

    def succeed(self, count: int = 1) -> None:
        """``count`` transfers landed; the last one fires :attr:`event`."""
        self.left -= count
        if not self.left:
            self.event.succeed()

    def landed(self, _event: simpy.Event) -> None:
        """Callback form of :meth:`succeed` (for a zero-byte transfer's timer)."""
        self.succeed()


class Arrivals:
    """Events by number, and the timers that fire them a latency after the last byte.

    Parameters
    ----------
    env : simpy.Environment
        The clock.

    Attributes
    ----------
    landing : int
        Transfers whose last byte is sent and that have not arrived yet.
    """

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.landing = 0
        self._events: dict[int, simpy.Event | Countdown] = {}
        self._next = 0

    def register(self, event: simpy.Event | Countdown) -> int:
        """A number for ``event`` until it has fired."""
        k = self._next
        self._next += 1
        self._events[k] = event
        return k

    def timer(self, delay_s: float, countdown: Countdown | None = None) -> simpy.Event:
        """A transfer that moves no bytes: it arrives ``delay_s`` from now."""
        self.landing += 1
        timer = self.env.timeout(delay_s)
        timer.callbacks.append(self._landed)
        if countdown is not None:
            timer.callbacks.append(countdown.landed)
        return timer

    def _landed(self, _event: simpy.Event) -> None:
        self.landing -= 1

    def land(self, events: np.ndarray, latency_s: np.ndarray) -> None:
        """Flows (their event numbers, in flow order) whose last byte was just sent
        arrive ``latency_s`` later: one timer per distinct latency, in order of each
        latency's first flow."""
        if not events.size:
            return
        if events.size == 1:  # most landings: one flow, one timer (same as the general path)
            self._timer(float(latency_s[0]), [int(events[0])], [1])
            return
        if latency_s.min() == latency_s.max():  # one latency: one timer for every flow
            self._land_group(events, float(latency_s[0]))
            return
        lats, first, group = np.unique(latency_s, return_index=True, return_inverse=True)
        for g in np.argsort(first, kind="stable").tolist():
            self._land_group(events[group == g], float(lats[g]))

    def _land_group(self, ids: np.ndarray, latency_s: float) -> None:
        """One timer for flows ``ids`` (event numbers, in flow order): each event told how
        many of its flows landed, in order of its last flow."""
        num, where, count = np.unique(ids[::-1], return_index=True, return_counts=True)
        last = ids.size - 1 - where  # each event's last flow in this timer
        order = np.argsort(last, kind="stable")
        self._timer(latency_s, num[order].tolist(), count[order].tolist())

    def _timer(self, latency_s: float, nums: list[int], counts: list[int]) -> None:
        self.landing += sum(counts)
        timer = self.env.timeout(latency_s)
        timer.callbacks.append(functools.partial(self._arrive, nums, counts))

    def _arrive(self, nums: list[int], counts: list[int], _timer: simpy.Event) -> None:
        self.landing -= sum(counts)
        events = self._events
        for k, c in zip(nums, counts, strict=True):
            ev = events[k]
            if isinstance(ev, Countdown):
                ev.succeed(c)
                if not ev.left:
                    del events[k]
            else:
                del events[k]
                ev.succeed()
