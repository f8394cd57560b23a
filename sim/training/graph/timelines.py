"""What each pipeline stage did during an executed step: its passes and their costs,
communication spans, and when compute, the gradient reduction and the step ended."""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.training.compute.passes import PassCost

__all__ = ["PassRecord", "StageTimeline"]


@dataclass
class PassRecord:
    """One executed pass (for traces)."""

    stage: int
    kind: str
    mb: int
    chunk: int
    start_s: float
    end_s: float


@dataclass
class StageTimeline:
    """What one pipeline stage did during the step (seconds)."""

    compute_s: float = 0.0
    tp_exposed_s: float = 0.0
    ep_s: float = 0.0
    cp_exposed_s: float = 0.0
    zero3_exposed_s: float = 0.0
    compute_end_s: float = 0.0
    dp_end_s: float = 0.0
    end_s: float = 0.0
    optimizer_s: float = 0.0
    param_gather_s: float = 0.0
    param_exposed_s: float = 0.0
    passes: list[PassRecord] = field(default_factory=list)
    repeats: list[int] = field(default_factory=list)  # times each pass runs (1 but folded)
    comm: list[tuple[str, float, float]] = field(default_factory=list)  # (name, start, end)

    def add_pass(
        self, cost: PassCost, rec: PassRecord, ahead: bool = False, times: int = 1
    ) -> None:
        """Account one pass that ran from ``rec.start_s`` to ``rec.end_s``; ``ahead``: its
        gathers are a distributed optimizer's parameter all-gathers run ahead of the
        forward (their exposure is ``param_exposed_s``), else ZeRO-3/FSDP unit gathers.
        ``times``: the pass stands for that many identical ones (a folded step's repeated
        block, :mod:`sim.training.graph.fold`; ``rec`` is the last)."""
        # (x * 1 is x: an unfolded pass adds exactly what it did before)
        self.compute_s += cost.compute_s * times
        self.tp_exposed_s += cost.tp_exposed_s * times
        self.ep_s += cost.ep_s * times
        self.cp_exposed_s += cost.cp_exposed_s * times
        waited = rec.end_s - rec.start_s - cost.busy_s
        if waited > 1e-9 * max(cost.busy_s, 1e-12):  # not rounding: gathers left exposed
            if ahead:
                self.param_exposed_s += waited * times
            else:
                self.zero3_exposed_s += waited * times
        self.passes.append(rec)
        self.repeats.append(times)
