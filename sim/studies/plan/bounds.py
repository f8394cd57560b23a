"""A lower bound on a layout's step time, from one cheap simulated step per compute shape.

The compute of one micro-batch through the whole model depends on TP, SP, EP, CP, the
micro-batch size and recompute only (the *shape*), not on PP, DP or ZeRO. So the planner
simulates, once per shape, a one-micro-batch step of the same model on one server (or
the few servers one EP group needs) with PP = 1 and reads its compute time ``t``
(``breakdown["compute"]``, communication excluded). A pipeline of ``p`` stages with
``v`` chunks each and ``m`` micro-batches then needs at least
``(m + (p - 1) / v) * t / p``: every stage averages ``t / p`` per micro-batch, the
slowest at least as much, and the fill and drain add ``p - 1`` chunk times. A layout
whose bound exceeds the best step times found so far cannot enter the ranking and is
not simulated.
"""

from __future__ import annotations

import dataclasses

from sim.errors import ClusterSimError
from sim.scenario.load import ClusterSection, Scenario
from sim.studies.plan.space import Layout

__all__ = ["Shape", "ShapeTimes", "lower_bound_s", "shape_of"]

Shape = tuple[int, bool, int, int, str, int]  # tp, sp, ep, micro_batch, recompute, cp


def shape_of(layout: Layout) -> Shape:
    """The part of a layout that sets its compute per micro-batch."""
    return (layout.tp, layout.sp, layout.ep, layout.micro_batch, layout.recompute, layout.cp)


class ShapeTimes:
    """Compute seconds of one micro-batch through the whole model, per shape (memoised).

    Parameters
    ----------
    scenario : Scenario
        The job (model, training settings, profile).
    topology : str
        Topology preset or file of the cluster.
    gpus_per_node : int
        GPUs of one server: the probe runs on one server (``nodes = 1`` where the
        topology is multi-node).
    multi_node : bool
        Whether the topology takes a ``nodes`` override.
    """

    def __init__(
        self, scenario: Scenario, topology: str, gpus_per_node: int, multi_node: bool
    ) -> None:
        self.scenario, self.gpus_per_node = scenario, gpus_per_node
        self.cluster = ClusterSection(topology, 1 if multi_node else None)
        self._t: dict[Shape, float] = {}
        self.simulated = 0

    def seconds(self, shape: Shape) -> float:
        """Compute time of one micro-batch of ``shape`` (0.0 when the probe cannot run)."""
        if shape not in self._t:
            self._t[shape] = self._probe(shape)
        return self._t[shape]

    def _probe(self, shape: Shape) -> float:
        from sim.training.step import simulate_step

        tp, sp, ep, mb, recompute, cp = shape
        nodes = -(-tp * ep * cp // self.gpus_per_node)  # enough servers for one EP/CP group
        if nodes > 1 and self.cluster.nodes is None:
            return 0.0  # a single-server topology: no bound
        dp = nodes * self.gpus_per_node // (tp * cp)
        if dp < 1 or dp % ep:
            return 0.0
        sc = self.scenario
        par = dataclasses.replace(
            sc.parallel, tp=tp, pp=1, dp=dp, ep=ep, sp=sp, zero=0, micro_batch=mb,
            schedule="1f1b", virtual_stages=1, recompute=recompute, cp=cp,
        )  # fmt: skip
        training = dataclasses.replace(sc.training, global_batch=mb * dp)
        cluster = dataclasses.replace(self.cluster, nodes=nodes) if nodes > 1 else self.cluster
        probe = dataclasses.replace(sc, cluster=cluster, parallel=par, training=training)
        try:
            result = simulate_step(probe, "analytical")
        except ClusterSimError:
            return 0.0  # no bound: the layout is simulated
        self.simulated += 1
        return float(result.breakdown.get("compute", 0.0))


def lower_bound_s(layout: Layout, global_batch: int, per_microbatch_s: float) -> float:
    """``(m + (pp - 1) / v) * t / pp`` seconds (see the module docstring).

    >>> lower_bound_s(Layout(tp=1, pp=4, dp=2, micro_batch=1), 16, 2.0)
    5.5
    """
    m = global_batch // (layout.micro_batch * layout.dp)
    p, v = layout.pp, layout.virtual_stages
    return (m + (p - 1) / v) * per_microbatch_s / p
