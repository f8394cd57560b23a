"""Published peak memory per GPU against the memory model, row by row.

``calibrate/published_memory.yaml`` holds every published reading found with the
configuration that produced it (torchtitan's H100 and H200 benchmark tables; the file's
header names the sources and what each reading measures). :func:`memory_rows` reads it;
:func:`predict_row` builds the row's model and plan directly (a model preset, a
:class:`~sim.workload.plan.ParallelPlan`, the framework's semantics) and returns
the memory report; the comparison is with ``MemoryReport.reserved_bytes`` (what
PyTorch's caching allocator reserves) since that is what the sources log.

>>> rows = memory_rows()
>>> rows[0].label, rows[0].measured_gib
('8B FSDP8', 82.4)
>>> r = predict_row(rows[0])
>>> 0.5 < r.reserved_bytes / 2**30 / rows[0].measured_gib < 1.5
True
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from calibrate.sourced_table import sourced_rows
from sim.training.memory.allocator import device_memory_bytes
from sim.training.memory.report import MemoryReport, memory_per_gpu
from sim.workload.framework_section import framework_semantics
from sim.workload.models import model_preset
from sim.workload.plan import ParallelPlan
from sim.workload.plan_checks import validate_plan

__all__ = ["MEMORY_TABLE", "MemoryRow", "memory_rows", "predict_row"]

MEMORY_TABLE = Path(__file__).with_name("published_memory.yaml")
GIB = 2**30


@dataclass(frozen=True)
class MemoryRow:
    """One published peak-memory reading and its run's configuration (the YAML keys)."""

    label: str
    source: str
    table: str
    model: str
    gpu: str
    capacity_gb: float
    dp: int
    tp: int
    pp: int
    cp: int
    micro_batch: int
    global_batch: int
    seq: int
    recompute: str
    compile: bool
    float8: bool
    async_tp: bool
    measured_gib: float
    metric: str
    schedule: str = "1f1b"
    virtual_stages: int = 1
    framework: str = "torchtitan"
    cross_entropy: str | None = None

    @property
    def gpus(self) -> int:
        """``dp * cp * tp * pp``."""
        return self.dp * self.cp * self.tp * self.pp

    @property
    def plan(self) -> ParallelPlan:
        """The run's plan: FSDP over ``dp * cp`` at the framework's default ZeRO stage,
        sequence parallelism with TP (torchtitan's default)."""
        sem = framework_semantics(self.framework)
        return ParallelPlan(
            tp=self.tp, pp=self.pp, dp=self.dp, cp=self.cp, sp=self.tp > 1,
            zero=sem.default_zero if self.dp * self.cp > 1 else 0,
            micro_batch=self.micro_batch, global_batch=self.global_batch,
            schedule=self.schedule, virtual_stages=self.virtual_stages,
            recompute=self.recompute,
        )  # fmt: skip


def memory_rows(path: Path = MEMORY_TABLE) -> list[MemoryRow]:
    """Read the published peak-memory table. Raises CalibrationError on a bad file."""
    return sourced_rows(path, "published-memory", lambda r: MemoryRow(**r))


def predict_row(row: MemoryRow) -> MemoryReport:
    """The memory model's report for ``row``: its framework's semantics (async TP as
    run), the row's cross-entropy kernel where it names one (the framework's otherwise),
    capacity from :func:`~sim.training.memory.allocator.device_memory_bytes`."""
    sem = framework_semantics(row.framework, {"tp_comm_overlap": row.async_tp})
    model, plan = model_preset(row.model), row.plan
    validate_plan(plan, model, plan.num_gpus)
    hbm = device_memory_bytes(row.gpu, row.capacity_gb * 1e9)
    ce = row.cross_entropy or sem.cross_entropy
    return memory_per_gpu(model, plan, row.seq, hbm, None, True, ce, semantics=sem)
