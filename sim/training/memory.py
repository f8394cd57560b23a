"""Memory per GPU: weights, gradients, optimizer states, activations, workspace.

Mixed-precision Adam: bf16 weights (2 bytes/param), bf16 gradients (2), and fp32 master
weights + momentum + variance (12) — 16 bytes per parameter (Rajbhandari et al. 2020).
ZeRO-1 shards the optimizer states over ``dp``, ZeRO-2 also the gradients, ZeRO-3 also
the weights (expert parameters shard over ``dp / ep``).

Activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models"), bytes per layer per micro-batch:

- no parallelism: ``s b h (34 + 5 a s / h)``;
- tensor parallel ``t`` without SP: ``s b h (10 + 24/t + 5 a s / (h t))``;
- with SP: ``s b h / t (34 + 5 a s / h)``;
- selective recompute drops the ``5 a s / h`` term, and so does flash attention (the
  default here: its kernel never stores the ``s x s`` scores);
- full recompute keeps only each layer's input, ``2 s b h`` (``/ t`` with SP), plus one
  layer's full activations while it is recomputed.

The ``34`` is generalised to GQA (K and V of ``kv_heads``) and SwiGLU MLPs; it is exact
for a GPT (4h GeLU MLP, multi-head attention). Each stage holds the in-flight
micro-batches of its pipeline schedule (:func:`.pipeline.in_flight`).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.training.comms import GRAD_BYTES, PARAM_BYTES, layer_rank_params, rank_params
from sim.training.models import ModelSpec
from sim.training.pipeline import in_flight, make_schedule
from sim.training.plan import ParallelPlan

__all__ = [
    "OPTIMIZER_BYTES",
    "MemoryParams",
    "MemoryReport",
    "activation_bytes_per_layer",
    "memory_per_gpu",
    "memory_per_stage",
]

OPTIMIZER_BYTES = 12  # fp32 master weights, Adam m and v


@dataclass(frozen=True)
class MemoryParams:
    """Knobs of the memory model.

    Attributes
    ----------
    workspace_bytes : float
        Fixed margin per GPU for the CUDA context (~0.5 GiB), cuBLAS and NCCL workspaces
        and allocator fragmentation. Default 2 GiB: an assumption, not a measurement.
    """

    workspace_bytes: float = 2 * 2**30


@dataclass(frozen=True)
class MemoryReport:
    """Memory of the fullest GPU (the pipeline stage with the largest total).

    Attributes
    ----------
    stage : int
        Pipeline stage the numbers are for.
    weights_bytes, grads_bytes, optimizer_bytes, activations_bytes, workspace_bytes : float
        The parts, bytes.
    hbm_bytes : float
        Device memory capacity, bytes.
    """

    stage: int
    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    workspace_bytes: float
    hbm_bytes: float

    @property
    def total_bytes(self) -> float:
        """Sum of the parts, bytes."""
        return sum(self.breakdown.values())

    @property
    def fits(self) -> bool:
        """``total_bytes <= hbm_bytes``."""
        return self.total_bytes <= self.hbm_bytes

    @property
    def breakdown(self) -> dict[str, float]:
        """Part name -> bytes."""
        return {
            "weights": self.weights_bytes,
            "grads": self.grads_bytes,
            "optimizer": self.optimizer_bytes,
            "activations": self.activations_bytes,
            "workspace": self.workspace_bytes,
        }


def _layer_terms(model: ModelSpec, tp: int) -> tuple[float, float, float]:
    """Per token, bytes: (replicated without SP, split by tp, attention s-terms per s).

    The split term is already per rank; the quadratic term is ``5 a s`` bytes per token
    per unit of ``s`` on one rank (multiply by ``s``).
    """
    m = model
    kv_rank = max(m.kv_heads // tp, 1) * m.head_dim
    # two norm inputs (4), QKV input (2), MLP input (2), two dropout masks (2)
    replicated = 10 * m.hidden
    # Q (2h), K and V (2 kv each), attention-output projection input (2h)
    attn = 4 * m.hidden / tp + 4 * kv_rank
    f = m.ffn_hidden / tp
    # GeLU: up output (2f) + activation output (2f); SwiGLU: gate and up (4f) + output (2f)
    mlp = (6 if m.gated_mlp else 4) * f * (m.top_k if m.moe else 1)
    quadratic = 5 * m.heads / tp
    return replicated, attn + mlp, quadratic


def activation_bytes_per_layer(
    model: ModelSpec,
    seq: int,
    micro_batch: int,
    tp: int = 1,
    sp: bool = False,
    recompute: str = "none",
    flash_attention: bool = True,
) -> float:
    """Activation bytes one layer keeps for one micro-batch on one rank (Korthikanti).

    >>> from sim.training.models import megatron_gpt
    >>> m = megatron_gpt(4096, 2, heads=32)
    >>> s, b, h, a = 2048, 1, 4096, 32
    >>> korthikanti = s * b * h * (34 + 5 * a * s / h)
    >>> activation_bytes_per_layer(m, s, b, flash_attention=False) == korthikanti
    True
    """
    tokens = seq * micro_batch
    if recompute == "full":
        return 2 * tokens * model.hidden / (tp if sp else 1)
    replicated, split, quadratic = _layer_terms(model, tp)
    per_token = (replicated / tp if sp else replicated) + split
    if recompute == "none" and not flash_attention:
        per_token += quadratic * seq
    return float(tokens * per_token)


def _activations(model: ModelSpec, plan: ParallelPlan, seq: int, held: float, last: bool,
                 flash_attention: bool) -> float:  # fmt: skip
    layers = model.layers // plan.pp
    args = (model, seq, plan.micro_batch, plan.tp, plan.sp)
    per_layer = activation_bytes_per_layer(*args, plan.recompute, flash_attention)
    total = layers * per_layer * held
    if plan.recompute == "full":  # one layer re-materialised at a time
        total += activation_bytes_per_layer(*args, "none", flash_attention)
    if last:  # fp32 logits kept for the cross-entropy backward
        total += 4 * plan.micro_batch * seq * model.vocab / plan.tp * held
    return total


def _states(model: ModelSpec, plan: ParallelPlan, stage: int) -> tuple[float, float, float]:
    """(weights, grads, optimizer) bytes on a rank of ``stage`` under ZeRO."""
    params = rank_params(model, plan, stage)

    def sharded(bytes_per: int, from_stage: int) -> float:
        if plan.zero < from_stage:
            return params.total * bytes_per
        return (params.dense / plan.dp + params.expert / plan.edp) * bytes_per

    weights = sharded(PARAM_BYTES, 3)
    if plan.zero == 3 and plan.dp > 1:  # the gathered current and prefetched layers
        weights += 2 * layer_rank_params(model, plan).total * PARAM_BYTES
    return weights, sharded(GRAD_BYTES, 2), sharded(OPTIMIZER_BYTES, 1)


def memory_per_stage(
    model: ModelSpec,
    plan: ParallelPlan,
    seq: int,
    hbm_bytes: float,
    params: MemoryParams | None = None,
    flash_attention: bool = True,
) -> list[MemoryReport]:
    """Memory of one GPU of each pipeline stage, in stage order."""
    params = params or MemoryParams()
    schedule = make_schedule(plan.schedule, plan.pp, plan.num_microbatches, plan.virtual_stages)
    held = in_flight(schedule)
    reports = []
    for stage in range(plan.pp):
        weights, grads, optimizer = _states(model, plan, stage)
        last = stage == plan.pp - 1
        acts = _activations(model, plan, seq, held[stage], last, flash_attention)
        reports.append(
            MemoryReport(stage, weights, grads, optimizer, acts, params.workspace_bytes, hbm_bytes)
        )
    return reports


def memory_per_gpu(
    model: ModelSpec,
    plan: ParallelPlan,
    seq: int,
    hbm_bytes: float,
    params: MemoryParams | None = None,
    flash_attention: bool = True,
) -> MemoryReport:
    """Memory of the fullest GPU under ``plan``; ``fits`` says whether it fits ``hbm_bytes``.

    Over capacity is an answer, not an error.

    >>> from sim.training.models import model_preset
    >>> plan = ParallelPlan(global_batch=8)
    >>> memory_per_gpu(model_preset("llama2-70b"), plan, 4096, 80 * 2**30).fits
    False
    """
    reports = memory_per_stage(model, plan, seq, hbm_bytes, params, flash_attention)
    return max(reports, key=lambda r: (r.total_bytes, -r.stage))
