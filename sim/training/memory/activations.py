"""Activation memory of transformer layers (Korthikanti et al. 2022).

Activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models"), bytes per layer per micro-batch:

- no parallelism: ``s b h (34 + 5 a s / h)``;
- tensor parallel ``t`` without SP: ``s b h (10 + 24/t + 5 a s / (h t))``;
- with SP: ``s b h / t (34 + 5 a s / h)``;
- selective recompute drops the ``5 a s / h`` term, and so does flash attention (the
  default here: its kernel never stores the ``s x s`` scores);
- without dropout (``model.dropout == 0``: Llama, MPT) the two dropout masks (``2 s b h``)
  and the attention-dropout mask and output (``3 a s^2 b``) are not stored: ``32`` and
  ``2 a s / h`` replace ``34`` and ``5 a s / h``;
- full recompute keeps only each layer's input, ``2 s b h`` (``/ t`` with SP), plus one
  layer's full activations while it is recomputed.

The ``34`` is generalised to GQA (K and V of ``kv_heads``) and SwiGLU MLPs; it is exact
for a GPT (4h GeLU MLP, multi-head attention).
"""

from __future__ import annotations

from sim.workload.models import ModelSpec
from sim.workload.plan import ParallelPlan

__all__ = ["LOGIT_BYTES", "activation_bytes_per_layer", "stage_activation_bytes"]


def _layer_terms(model: ModelSpec, tp: int) -> tuple[float, float, float]:
    """Per token, bytes: (replicated without SP, split by tp, attention s-terms per s).

    The split term is already per rank; the quadratic term is ``5 a s`` bytes per token
    per unit of ``s`` on one rank (multiply by ``s``).
    """
    m = model
    kv_rank = max(m.kv_heads // tp, 1) * m.head_dim
    drop = m.dropout > 0
    # two norm inputs (4), QKV input (2), MLP input (2), two dropout masks (2)
    replicated = (10 if drop else 8) * m.hidden
    # Q (2h), K and V (2 kv each), attention-output projection input (2h)
    attn = 4 * m.hidden / tp + 4 * kv_rank
    f = m.ffn_hidden / tp
    # GeLU: up output (2f) + activation output (2f); SwiGLU: gate and up (4f) + output (2f)
    mlp = (6 if m.gated_mlp else 4) * f * (m.top_k if m.moe else 1)
    # softmax output (2), and with dropout its mask (1) and output (2), per head per s^2
    quadratic = (5 if drop else 2) * m.heads / tp
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

    >>> from sim.workload.models import megatron_gpt
    >>> m = megatron_gpt(4096, 2, heads=32)  # dropout 0.1, as Korthikanti's GPT
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


#: Bytes per logit element on the last stage, by cross-entropy kernel: (kept per micro-batch
#: held, extra for the micro-batch in its loss). Eager fp32: the fp32 log-probabilities
#: are kept, the bf16 logits live beside them. Fused: bf16 logits, gradient in place.
LOGIT_BYTES = {"fp32": (4, 2), "fused": (2, 0)}


def stage_activation_bytes(
    model: ModelSpec,
    plan: ParallelPlan,
    seq: int,
    held: float,
    layers: int,
    last: bool,
    flash_attention: bool,
    cross_entropy: str = "fp32",
) -> float:
    """Activation bytes a rank of one stage holds: ``held`` micro-batches of its ``layers``.

    Adds one re-materialised layer under full recompute and, on the ``last`` stage, the
    logits of the cross-entropy (:data:`LOGIT_BYTES`). Under context parallelism a rank
    holds ``seq / cp`` tokens of each sequence, so everything here divides by ``cp``
    (with fused attention no term is quadratic in ``seq``; the K/V chunks in flight
    around the ring, two per layer at a time, are not counted).
    """
    seq = seq // plan.cp
    args = (model, seq, plan.micro_batch, plan.tp, plan.sp)
    per_layer = activation_bytes_per_layer(*args, plan.recompute, flash_attention)
    total = layers * per_layer * held
    if plan.recompute == "full" and layers:  # one layer re-materialised at a time
        total += activation_bytes_per_layer(*args, "none", flash_attention)
    if last:
        logits = plan.micro_batch * seq * model.vocab / plan.tp
        kept, extra = LOGIT_BYTES[cross_entropy]
        total += logits * (kept * held + extra)
    return total
