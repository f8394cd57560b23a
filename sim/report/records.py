"""The flat result records a report reads, one pydantic model per kind of result.

These are the documented formats of clustersim's result files (SI units, as written by
the simulator):

* :class:`RunRecord`: ``clustersim run --json`` (one :class:`~sim.StepResult` as a dict),
  optionally with per-link utilisation rows ``links`` (:class:`LinkRecord`).
* :class:`PlanRecord`: one entry of a plan search's JSON list (best first): a run record
  plus the ``parallel`` settings it was run with.
* :class:`SweepRow`: one point of a sweep (a CSV or JSONL row): the grid keys the sweep
  varied (any other columns) plus the metrics below; a point that could not be simulated
  carries a ``reason`` and no metrics.
* :class:`CollectiveRecord`: one size of ``clustersim collective --json``.

Results written by a newer clustersim may carry fields these models do not know: they are
ignored (kept, for sweep rows, as grid keys), so an older report still reads them. Known
fields are type-checked, and a record missing one that the report needs is refused.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sim.studies.columns import (
    SWEEP_BREAKDOWN,
    SWEEP_MEMORY,
    SWEEP_METRICS,
    SWEEP_PARTS,
    SWEEP_SCOPES,
)

__all__ = [
    "SWEEP_BREAKDOWN",
    "SWEEP_MEMORY",
    "SWEEP_METRICS",
    "SWEEP_PARTS",
    "SWEEP_SCOPES",
    "CollectiveRecord",
    "LinkRecord",
    "PlanRecord",
    "RunRecord",
    "SweepRow",
]


class _Record(BaseModel):
    """Frozen record; fields a newer simulator adds are ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class LinkRecord(_Record):
    """Traffic on one directed link during one step.

    Attributes
    ----------
    name : str
        The link, e.g. ``"gpu0->nvswitch0"``.
    kind : str
        Link kind or class, e.g. ``"nvlink4"`` or ``"ib-ndr"``.
    utilisation : float
        Busy fraction of the link's capacity over the step, in [0, 1].
    bytes : float
        Bytes carried during the step.
    """

    name: str
    kind: str
    utilisation: float = Field(ge=0.0, le=1.0 + 1e-9)
    bytes: float = Field(ge=0.0)


class RunRecord(_Record):
    """One simulated training step, as ``clustersim run --json`` writes it.

    Attributes
    ----------
    scenario, topology, network, gpu : str
        What was simulated: scenario name, topology preset, network backend, GPU model.
    gpus : int
        GPUs in the job.
    plan : dict
        The resolved parallel plan (tp, pp, dp, zero, ...).
    step_time_s : float
        Wall time of one optimizer step, seconds.
    tokens_per_s : float
        Training throughput, tokens per second.
    tflops_per_gpu : float
        Model TFLOP/s per GPU.
    mfu : float
        Model FLOP utilisation, a fraction.
    fits : bool
        Whether the fullest GPU's memory fits its HBM.
    memory_per_gpu_bytes : float
        Memory of the fullest GPU, bytes.
    memory_breakdown : dict[str, float]
        That memory per component (weights, grads, optimizer, activations, workspace), bytes.
    breakdown : dict[str, float]
        The step time per component (compute, exposed communication, bubble, ...), seconds;
        the parts sum to ``step_time_s``.
    link_bytes_by_scope : dict[str, float]
        Bytes on the wire per link class (nvlink, pcie, net) per step.
    hbm_bytes : float, optional
        HBM capacity per GPU, bytes; when absent the report looks ``gpu`` up in the catalog.
    links : list of LinkRecord, optional
        Per-link utilisation (newer versions); the heatmap needs it.
    """

    scenario: str
    topology: str = ""
    network: str = ""
    gpu: str = ""
    gpus: int = Field(ge=1)
    plan: dict[str, Any] = Field(default_factory=dict)
    step_time_s: float = Field(gt=0.0)
    tokens_per_s: float = Field(ge=0.0)
    tflops_per_gpu: float = Field(ge=0.0)
    hw_tflops_per_gpu: float | None = None
    mfu: float = Field(ge=0.0)
    hfu: float | None = None
    fits: bool
    memory_per_gpu_bytes: float = Field(ge=0.0)
    memory_breakdown: dict[str, float]
    breakdown: dict[str, float]
    critical_stage: int | None = None
    link_bytes_by_scope: dict[str, float] = Field(default_factory=dict)
    cost_per_step_usd: float | None = None
    cost_per_million_tokens_usd: float | None = None
    notes: list[str] = Field(default_factory=list)
    hbm_bytes: float | None = Field(default=None, gt=0.0)
    links: list[LinkRecord] | None = None


class PlanRecord(RunRecord):
    """One candidate of a plan search: a run record and the settings it was run with.

    Attributes
    ----------
    parallel : dict
        The parallel settings the search chose for this candidate (tp, pp, dp, zero, ...).
    """

    parallel: dict[str, Any]


class SweepRow(BaseModel):
    """One point of a sweep: the grid keys it varied, then its metrics.

    Every column not named in :data:`SWEEP_METRICS` is a grid key (kept in
    ``model_extra``, in file order). A failed point has a ``reason`` and no metrics;
    any other point needs all of ``step_time_s``, ``tokens_per_s``, ``tflops_per_gpu``,
    ``mfu``, ``memory_per_gpu_bytes`` and ``fits``. Non-finite numbers read as missing.
    Files written before rows carried their breakdowns read with empty dicts there.

    Attributes
    ----------
    point : int or None
        The point's index in the sweep (its order in the grid), when the file has it.
    gpus : int
        GPUs of the point (0 for a failed point whose cluster could not be built).
    gpu : str or None
        GPU model (catalog name), e.g. ``"H100-SXM"``.
    step_time_s, tokens_per_s, tflops_per_gpu, mfu, memory_per_gpu_bytes : float or None
        As in :class:`RunRecord`.
    throughput_unit : str or None
        What ``tokens_per_s`` counts: ``"tokens/s"``, or ``"images/s"`` for CNNs.
    hbm_bytes : float or None
        HBM capacity of one GPU, bytes.
    fits : bool or None
        Whether it fits in memory.
    cost_per_step_usd : float or None
        Cost of one step in US dollars, when the scenario has a price.
    profile : str or None
        The parameter profile the point was simulated with (``defaults``: shipped ones).
    scaling_efficiency : float or None
        Throughput per GPU over that of the smallest point of the same series, a fraction
        (:mod:`sim.studies.efficiency`); None where the series has one GPU count only.
    scaling_series : str or None
        The series the point belongs to: the values of the keys that do not set the GPU
        count, and the GPU model (``""`` when the whole sweep is one series).
    scaling_reference_point : int or None
        The ``point`` the efficiency is measured against.
    breakdown, memory_breakdown, link_bytes_by_scope : dict[str, float]
        From the ``breakdown.*``, ``memory_breakdown.*`` and ``link_bytes_by_scope.*``
        columns (seconds, bytes, bytes): as in :class:`RunRecord`.
    reason : str or None
        Why the point could not be simulated.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    point: int | None = Field(default=None, ge=0)
    gpus: int = Field(default=0, ge=0)
    gpu: str | None = None
    step_time_s: float | None = Field(default=None, gt=0.0)
    tokens_per_s: float | None = Field(default=None, ge=0.0)
    throughput_unit: str | None = None
    tflops_per_gpu: float | None = Field(default=None, ge=0.0)
    mfu: float | None = Field(default=None, ge=0.0)
    memory_per_gpu_bytes: float | None = Field(default=None, ge=0.0)
    hbm_bytes: float | None = None
    fits: bool | None = None
    cost_per_step_usd: float | None = None
    profile: str | None = None
    scaling_efficiency: float | None = None
    scaling_series: str | None = None
    scaling_reference_point: int | None = None
    breakdown: dict[str, float] = Field(default_factory=dict)
    memory_breakdown: dict[str, float] = Field(default_factory=dict)
    link_bytes_by_scope: dict[str, float] = Field(default_factory=dict)
    reason: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _nest_parts(cls, data: Any) -> Any:
        """``breakdown.compute`` -> ``breakdown["compute"]`` (flat files to nested fields)."""
        if not isinstance(data, dict):
            return data
        out: dict[str, Any] = {}
        parts: dict[str, dict[str, float]] = {f: {} for f in SWEEP_PARTS}
        for key, value in data.items():
            field, dot, name = str(key).partition(".")
            if dot and field in SWEEP_PARTS:
                if isinstance(value, (int, float)) and math.isfinite(value):
                    parts[field][name] = float(value)
            else:
                out[key] = value
        for field, values in parts.items():
            if values and not isinstance(out.get(field), dict):
                out[field] = values
        return out

    @field_validator(
        "step_time_s",
        "tokens_per_s",
        "tflops_per_gpu",
        "mfu",
        "memory_per_gpu_bytes",
        "hbm_bytes",
        "cost_per_step_usd",
        "scaling_efficiency",
        mode="before",
    )
    @classmethod
    def _nan_is_missing(cls, v: Any) -> Any:
        return None if isinstance(v, float) and not math.isfinite(v) else v

    @field_validator("gpus", mode="before")
    @classmethod
    def _unknown_gpus(cls, v: Any) -> Any:
        return 0 if v is None else v

    @field_validator("scaling_series", "gpu", "profile", "throughput_unit", mode="before")
    @classmethod
    def _text(cls, v: Any) -> Any:
        """CSV reads an empty cell as None and a number-like label as a number."""
        return None if v is None else str(v)

    @model_validator(mode="after")
    def _metrics_or_reason(self) -> SweepRow:
        if self.reason:
            return self
        if self.gpus < 1:
            raise ValueError("gpus must be >= 1 for a simulated point")
        needed = ("step_time_s", "tokens_per_s", "tflops_per_gpu", "mfu")
        missing = [k for k in (*needed, "memory_per_gpu_bytes", "fits") if getattr(self, k) is None]
        if missing:
            raise ValueError(f"missing {', '.join(missing)} (a failed point needs a 'reason')")
        return self

    @property
    def grid(self) -> dict[str, Any]:
        """The grid keys of this point and their values, in file order."""
        return dict(self.model_extra or {})

    @property
    def ok(self) -> bool:
        """True when the point was simulated (it has metrics, not a ``reason``)."""
        return not self.reason


class CollectiveRecord(_Record):
    """One message size of a simulated collective, as ``clustersim collective --json`` writes it.

    Attributes
    ----------
    op : str
        all_reduce, all_gather, ...
    size_bytes : float
        Message size, bytes (nccl-tests' "size").
    n_ranks : int
        GPUs in the group.
    time_s : float
        Time of one collective, seconds.
    algbw_GBps, busbw_GBps : float
        Algorithm and bus bandwidth, GB/s (10^9 bytes/s), nccl-tests' definitions.
    algorithm, protocol : str
        Which schedule the simulator used (``auto`` picks per size).
    topology, network : str
        Where it was simulated.
    """

    op: str
    size_bytes: float = Field(gt=0.0)
    n_ranks: int = Field(ge=1)
    time_s: float = Field(gt=0.0)
    algbw_GBps: float = Field(ge=0.0)
    busbw_GBps: float = Field(ge=0.0)
    algorithm: str
    protocol: str = ""
    topology: str = ""
    network: str = ""
