"""Words for numbers: units that fit, names of the step's parts, and one sentence per figure.

Pure functions of the data the figures draw (no matplotlib), so each sentence is tested
against the numbers it quotes.

>>> seconds_text(0.5), seconds_text(2.25), seconds_text(4e-5)
('500 ms', '2.25 s', '40 µs')
>>> rate_text(1520.0), rate_text(2.4e6)
('1.52k', '2.4M')
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sim.report.series import ScalingSeries

__all__ = [
    "PART_NAMES",
    "StudyPoint",
    "breakdown_sentence",
    "memory_sentence",
    "part_name",
    "rate_text",
    "scaling_sentence",
    "seconds_text",
]

PART_NAMES = {
    "compute": "compute",
    "tp_comm_exposed": "exposed TP communication",
    "cp_comm_exposed": "exposed CP (ring attention) communication",
    "ep_comm": "expert-parallel all-to-all",
    "zero3_gather_exposed": "exposed ZeRO-3 parameter gathers",
    "pipeline_bubble": "pipeline bubble",
    "pp_comm_exposed": "exposed pipeline sends",
    "dp_comm_exposed": "exposed DP communication",
    "optimizer": "optimizer step",
    "outer_optimizer": "outer optimizer (local SGD)",
    "param_gather": "parameter all-gather after the step",
    "weights": "weights",
    "grads": "gradients",
    "activations": "activations",
    "workspace": "workspace (CUDA context, NCCL buffers)",
    "fragmentation": "allocator fragmentation",
    "error_feedback": "error-feedback buffers",
    "powersgd_pq": "PowerSGD P and Q",
    "other": "other",
}
"""How the report names each part of the step and of memory (the glossary explains them)."""

GIB = 2.0**30


def part_name(key: str) -> str:
    """The readable name of a breakdown or memory component."""
    return PART_NAMES.get(key, key.replace("_", " "))


def seconds_text(s: float) -> str:
    """A duration in the unit that fits: µs, ms or s, three significant digits."""
    if s < 1e-3:
        return f"{s * 1e6:.3g} µs"
    if s < 1.0:
        return f"{s * 1e3:.3g} ms"
    return f"{s:.3g} s"


def rate_text(x: float) -> str:
    """A count per second with k/M/G, three significant digits."""
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= size:
            return f"{x / size:.3g}{unit}"
    return f"{x:.3g}"


@dataclass(frozen=True)
class StudyPoint:
    """One simulated point of a study as the per-point figures draw it.

    Attributes
    ----------
    facet : str
        Its panel (e.g. the model), ``""`` for one panel.
    series : str
        Its series within the panel, e.g. ``"fabric=ib"`` (``""`` for one series).
    label : str
        Its bar's label, e.g. ``"fabric=ib, 64 GPUs"``.
    gpus : int
        GPUs.
    step_time_s : float
        Step time, seconds.
    breakdown, memory : dict[str, float]
        Step time by part (seconds) and memory of the fullest GPU by kind (bytes).
    memory_bytes : float
        Total memory of the fullest GPU, bytes.
    hbm_bytes : float or None
        The GPU's capacity, bytes.
    fits : bool
        Whether it fits.
    """

    facet: str
    series: str
    label: str
    gpus: int
    step_time_s: float
    breakdown: dict[str, float]
    memory: dict[str, float]
    memory_bytes: float
    hbm_bytes: float | None
    fits: bool


def _in(facet: str) -> str:
    return f" ({facet})" if facet else ""


def scaling_sentence(series: Sequence[ScalingSeries]) -> str:
    """Which series keeps most and least of its per-GPU throughput at its largest size."""
    ends = [
        (s.gpus[-1], s.efficiency[-1], s)
        for s in series
        if len(s.gpus) > 1 and s.efficiency and s.efficiency[-1] == s.efficiency[-1]
    ]
    if not ends:
        return "No series has two GPU counts that fit: there is no scaling to show."
    hi = max(ends, key=lambda e: (e[1], e[0]))
    lo = min(ends, key=lambda e: (e[1], -e[0]))

    def name(s: ScalingSeries) -> str:
        return ", ".join(p for p in (s.facet, s.label) if p) or "the sweep"

    first = (
        f"At {hi[0]} GPUs {name(hi[2])} keeps {hi[1]:.0%} of its throughput per GPU at "
        f"{hi[2].gpus[0]} GPU{'s' if hi[2].gpus[0] > 1 else ''}"
    )
    if lo[2] is hi[2]:
        return first + "."
    return f"{first}; {name(lo[2])} keeps {lo[1]:.0%} at {lo[0]} GPUs."


def breakdown_sentence(points: Sequence[StudyPoint]) -> str:
    """At the largest GPU count: the biggest part other than compute, and its share."""
    if not points:
        return "No simulated point."
    top = max(p.gpus for p in points)
    worst: tuple[float, str, StudyPoint] | None = None
    for p in points:
        if p.gpus != top or p.step_time_s <= 0:
            continue
        for key, value in p.breakdown.items():
            share = value / p.step_time_s
            if key != "compute" and (worst is None or share > worst[0]):
                worst = (share, key, p)
    if worst is None or worst[0] < 0.005:
        return f"At {top} GPUs the step is compute: nothing else takes 0.5% of it."
    share, key, p = worst
    compute = p.breakdown.get("compute", 0.0) / p.step_time_s
    return (
        f"At {top} GPUs{_in(', '.join(x for x in (p.facet, p.series) if x))} {part_name(key)} is "
        f"{share:.0%} of the {seconds_text(p.step_time_s)} step; compute is {compute:.0%}."
    )


def memory_sentence(points: Sequence[StudyPoint]) -> str:
    """The range of memory the fullest GPU needs, its capacity, and how many points overflow."""
    if not points:
        return "No simulated point."
    lo = min(points, key=lambda p: p.memory_bytes)
    hi = max(points, key=lambda p: p.memory_bytes)
    caps = {p.hbm_bytes for p in points if p.hbm_bytes}
    cap = f" of {max(caps) / GIB:.0f} GiB" if len(caps) == 1 else ""
    over = [p for p in points if not p.fits]
    text = (
        f"The fullest GPU holds {lo.memory_bytes / GIB:.1f} to {hi.memory_bytes / GIB:.1f} GiB"
        f"{cap}; the largest part is {part_name(max(hi.memory, key=hi.memory.__getitem__))}"
        if hi.memory
        else f"The fullest GPU holds {lo.memory_bytes / GIB:.1f} to {hi.memory_bytes / GIB:.1f} GiB{cap}"
    )
    if over:
        return text + f"; {len(over)} point{'s do' if len(over) > 1 else ' does'} not fit."
    return text + "; every point fits."
