"""The columns of a sweep row: the fixed metrics after the grid keys, and the flat
``FIELD.NAME`` columns of a step's breakdown, memory and bytes per link scope.

The studies write them; the report reads them (it sits above the studies).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "SWEEP_BREAKDOWN",
    "SWEEP_MEMORY",
    "SWEEP_METRICS",
    "SWEEP_PARTS",
    "SWEEP_SCOPES",
    "throughput_unit",
]

SWEEP_BREAKDOWN = (
    "compute",
    "tp_comm_exposed",
    "cp_comm_exposed",
    "ep_comm",
    "zero3_gather_exposed",
    "pipeline_bubble",
    "pp_comm_exposed",
    "dp_comm_exposed",
    "optimizer",
    "outer_optimizer",
    "param_gather",
    "other",
)
"""Step-time components a sweep row carries (``breakdown.NAME`` columns, seconds); a
component the simulator adds later is summed into ``other``, so the parts still sum to
the step time."""

SWEEP_MEMORY = (
    "weights",
    "grads",
    "optimizer",
    "activations",
    "workspace",
    "fragmentation",
    "error_feedback",
    "powersgd_pq",
    "outer_optimizer",
    "other",
)
"""Memory components of the fullest GPU a sweep row carries (``memory_breakdown.NAME``
columns, bytes); unknown ones are summed into ``other``."""

SWEEP_SCOPES = ("nvlink", "pcie", "net")
"""Link scopes of the ``link_bytes_by_scope.SCOPE`` columns (bytes on the wire per step)."""

SWEEP_PARTS = {
    "breakdown": SWEEP_BREAKDOWN,
    "memory_breakdown": SWEEP_MEMORY,
    "link_bytes_by_scope": SWEEP_SCOPES,
}
"""Each nested field of a sweep row and its flat column names (``FIELD.NAME``)."""

SWEEP_METRICS = (
    "point",
    "gpus",
    "gpu",
    "step_time_s",
    "tokens_per_s",
    "throughput_unit",
    "tflops_per_gpu",
    "mfu",
    "memory_per_gpu_bytes",
    "hbm_bytes",
    "fits",
    "cost_per_step_usd",
    "profile",
    "scaling_efficiency",
    "scaling_series",
    "scaling_reference_point",
    *(f"{field}.{name}" for field, names in SWEEP_PARTS.items() for name in names),
    "reason",
)
"""The fixed columns of a sweep row; every other column is a grid key."""


def throughput_unit(units: Iterable[object]) -> str:
    """The throughput column's heading for rows of these ``throughput_unit`` values (None
    and empty ignored): their one unit, ``throughput`` when they mix, else ``tokens/s``.

    >>> throughput_unit(["images/s", None]), throughput_unit([]), throughput_unit(["a", "b"])
    ('images/s', 'tokens/s', 'throughput')
    """
    named = {str(u) for u in units if u}
    return named.pop() if len(named) == 1 else ("throughput" if named else "tokens/s")
