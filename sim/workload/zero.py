"""ZeRO stages and FSDP strategies as the frameworks run them: what is sharded, what
moves over the data-parallel group and when.

=====================  ==========================  =======================  =============
plan                   gradients                   parameters               sharded
=====================  ==========================  =======================  =============
ZeRO-0 (DDP)           all-reduce once per step    --                       nothing
ZeRO-1 (Megatron's     reduce-scatter once per     all-gather once per      optimizer
distributed optimizer) step (after the last        step (after the
                       micro-batch)                optimizer)
ZeRO-2 (DeepSpeed)     reduce-scatter in every     all-gather once per      + gradients
                       micro-batch's backward      step
FSDP SHARD_GRAD_OP     reduce-scatter in every     all-gather in every      + gradients
                       micro-batch's backward      micro-batch's forward
ZeRO-3 / FULL_SHARD    reduce-scatter in every     all-gather per layer in  + parameters
                       micro-batch's backward      every forward and
                                                   backward (prefetched)
=====================  ==========================  =======================  =============

HYBRID_SHARD (and ``_HYBRID_SHARD_ZERO2``) shard within groups of ``shard_size``
consecutive data-parallel ranks: gathers and reduce-scatters run in the shard group, and
the reduce-scattered gradient shard is then all-reduced across the replica groups.
Gradients move in ``grad_bytes`` per element (fp32 main grads by default), parameters in
bf16 (2 bytes). Sources: Rajbhandari et al., "ZeRO" (SC20) and DeepSpeed's ZeRO-2
(gradients reduced as the backward produces them); PyTorch FSDP's ShardingStrategy
documentation; Megatron-LM's distributed optimizer (docs/distrib_optimizer.md).

>>> plan = ParallelPlan(dp=8, zero=2, global_batch=32)  # 4 micro-batches
>>> dp_bytes_per_step(1e9, plan)["reduce_scatter"] == 4 * 1e9 * 4
True
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from sim.errors import ConfigError
from sim.workload.plan import ParallelPlan

if TYPE_CHECKING:
    from sim.workload.frameworks import Semantics

__all__ = [
    "FSDP_STRATEGIES",
    "PARAM_BYTES",
    "ZeroSemantics",
    "dp_bytes_per_step",
    "gathers_once",
    "parse_zero",
    "zero_semantics",
]

PARAM_BYTES = 2  # bf16 parameters as gathered

#: FSDP ShardingStrategy name -> (ZeRO stage, hybrid)
FSDP_STRATEGIES: dict[str, tuple[int, bool]] = {
    "NO_SHARD": (0, False),
    "SHARD_GRAD_OP": (2, False),
    "FULL_SHARD": (3, False),
    "HYBRID_SHARD": (3, True),
    "_HYBRID_SHARD_ZERO2": (2, True),
}


@dataclass(frozen=True)
class ZeroSemantics:
    """When the data-parallel collectives of a plan run.

    Attributes
    ----------
    reduce_op : str
        ``all_reduce`` (ZeRO-0) or ``reduce_scatter``.
    reduce_every_microbatch : bool
        Gradients are reduced in every micro-batch's backward (ZeRO-2/3), not once.
    gather_after_step : bool
        Updated parameters are all-gathered after the optimizer (ZeRO-1/2 of
        Megatron/DeepSpeed).
    gather_forward, gather_backward : bool
        Parameters are all-gathered layer by layer before each forward (backward).
    hybrid : bool
        The shard group is smaller than the data-parallel group (an all-reduce across
        replica groups follows each reduce-scatter).
    """

    reduce_op: str
    reduce_every_microbatch: bool
    gather_after_step: bool
    gather_forward: bool
    gather_backward: bool
    hybrid: bool


def parse_zero(value: object, where: str = "parallel.zero") -> tuple[int, str | None]:
    """Read ``parallel.zero``: a stage 0-3 or an FSDP strategy name -> (stage, fsdp name).

    >>> parse_zero("FULL_SHARD"), parse_zero(1)
    ((3, 'FULL_SHARD'), (1, None))
    """
    if isinstance(value, str) and value.upper() in FSDP_STRATEGIES:
        name = value.upper()
        return FSDP_STRATEGIES[name][0], name
    if not isinstance(value, bool) and value in (0, 1, 2, 3):
        return int(value), None
    raise ConfigError(
        f"{where}: {value!r} is not one of 0, 1, 2, 3 or an FSDP strategy "
        f"({', '.join(FSDP_STRATEGIES)})"
    )


@lru_cache(maxsize=256)
def zero_semantics(plan: ParallelPlan) -> ZeroSemantics:
    """The collectives' schedule of ``plan`` (see the module table).

    >>> s = zero_semantics(ParallelPlan(dp=8, zero=2, fsdp="SHARD_GRAD_OP", global_batch=8))
    >>> s.reduce_every_microbatch, s.gather_after_step, s.gather_forward
    (True, False, True)
    """
    z, fsdp = plan.zero, plan.fsdp
    hybrid = plan.shard < plan.dp_cp
    if fsdp is not None and fsdp not in FSDP_STRATEGIES:
        raise ConfigError(f"parallel.zero: unknown FSDP strategy {fsdp!r}")
    return ZeroSemantics(
        reduce_op="all_reduce" if z == 0 else "reduce_scatter",
        reduce_every_microbatch=z >= 2,
        gather_after_step=z in (1, 2) and fsdp is None,
        gather_forward=z == 3 or (z == 2 and fsdp is not None),
        gather_backward=z == 3,
        hybrid=hybrid,
    )


def gathers_once(plan: ParallelPlan, framework: Semantics | None) -> bool:
    """FSDP2 under pipeline parallelism (``pp_gather_once``, torchtitan): each chunk's
    parameters are gathered once per step and its gradients kept unsharded until one
    reduce-scatter after its last backward, not per micro-batch.

    >>> from sim.workload.frameworks import PRESETS
    >>> plan = ParallelPlan(pp=2, dp=4, zero=3, global_batch=8)
    >>> gathers_once(plan, PRESETS["torchtitan"]), gathers_once(plan, PRESETS["fsdp"])
    (True, False)
    """
    return (framework is not None and framework.pp_gather_once and plan.pp > 1
            and zero_semantics(plan).gather_forward)  # fmt: skip


def dp_bytes_per_step(params: float, plan: ParallelPlan) -> dict[str, float]:
    """Collective bytes (nccl-tests sizes) one rank issues per step for ``params``
    parameters it holds before sharding, by collective.

    ``reduce_scatter``/``all_reduce`` in ``plan.grad_bytes`` per gradient,
    ``all_gather`` in bf16; a hybrid plan adds the replica all-reduce of the shard.

    >>> plan = ParallelPlan(dp=8, zero=3, global_batch=16)  # 2 micro-batches
    >>> dp_bytes_per_step(1.0, plan)
    {'reduce_scatter': 8.0, 'all_gather': 8.0}
    """
    if plan.dp_cp == 1:
        return {}
    sem, m, g = zero_semantics(plan), plan.num_microbatches, plan.grad_bytes
    reduces = m if sem.reduce_every_microbatch else 1
    out = {sem.reduce_op: reduces * params * g}
    gathers = (
        (1 if sem.gather_after_step else 0)
        + (m if sem.gather_forward else 0)
        + (m if sem.gather_backward else 0)
    )
    if gathers:
        out["all_gather"] = gathers * params * PARAM_BYTES
    if sem.hybrid and plan.dp_cp > plan.shard:
        out["all_reduce"] = out.get("all_reduce", 0.0) + reduces * params * g / plan.shard
    return out
