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

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from sim.studies.columns import (
    SWEEP_BREAKDOWN,
    SWEEP_MEMORY,
    SWEEP_METRICS,
    SWEEP_PARTS,
    SWEEP_SCOPES,
)
from sim.studies.rows import SweepRow

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
