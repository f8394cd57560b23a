"""The pipeline timeline per stage, read from a simulated step: the explorer's one window
on the executed task graph (:class:`sim.training.graph.execute.StepRun`)."""

from __future__ import annotations

from typing import Any

__all__ = ["stage_timeline"]


def stage_timeline(run: Any) -> list[dict[str, Any]]:
    """Per pipeline stage, its passes in start order: kind (``F``/``B``...), micro-batch,
    model chunk, start and end (seconds from the step's start).

    ``run`` is the executed step :func:`sim.training.step.run_step` returns.

    >>> from sim import load_scenario
    >>> from sim.training.step import run_step
    >>> _, run, _ = run_step(load_scenario("gpt2-1gpu"), "analytical")
    >>> line = stage_timeline(run)[0]
    >>> line["stage"], line["passes"][0]["kind"], line["passes"][0]["start_s"]
    (0, 'F', 0.0)
    """
    out = []
    for s, line in enumerate(run.lines):
        passes = sorted(line.passes, key=lambda p: (p.start_s, p.end_s))
        out.append({
            "stage": s,
            "passes": [{"kind": p.kind, "mb": p.mb, "chunk": p.chunk,
                        "start_s": float(p.start_s), "end_s": float(p.end_s)} for p in passes],
        })  # fmt: skip
    return out
