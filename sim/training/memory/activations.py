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

Selective recomputation as torchtitan runs it (``selective="op"``, per-op SAC,
``torchtitan/distributed/activation_checkpoint.py`` ``SelectiveAC``) keeps, per block,
its input and the outputs of the ops in the save list except every second matmul:
counting a block's matmuls in order (Q, K, V, output projection, then the MLP's up
(w1), gate (w3) and down (w2)), the 1st, 3rd, 5th and 7th are kept (Q, V, w1, w2; a
GeLU MLP has only up and down: Q, V, up), and so are the attention kernel's output with
its fp32 log-sum-exp and, under TP with SP, the two reduce-scatter outputs. A row-
parallel matmul's output is a full-width partial sum before its reduce-scatter.
Everything else is recomputed from those in the backward, one block at a time.
"""

from __future__ import annotations

from sim.workload.comms import layer_rank_params
from sim.workload.frameworks import DTYPE_BYTES, Semantics
from sim.workload.models import ModelSpec
from sim.workload.plan import ParallelPlan
from sim.workload.primitives import ACT_BYTES

__all__ = [
    "LOGIT_BYTES",
    "activation_bytes_per_layer",
    "framework_activation_bytes",
    "largest_transient_bytes",
    "op_sac_bytes_per_token",
    "stage_activation_bytes",
]


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


def op_sac_bytes_per_token(model: ModelSpec, tp: int = 1, sp: bool = False) -> float:
    """Bytes one block keeps per token on one rank under torchtitan's per-op SAC.

    >>> from sim.workload.models import model_preset
    >>> m = model_preset("llama3-8b")  # h 4096, 8 KV heads of 128, f 14336, 32 heads
    >>> op_sac_bytes_per_token(m) == 2 * (4096 + 4096 + 1024 + 4096 + 14336 + 4096) + 4 * 32
    True
    """
    m = model
    h_rank = m.hidden / tp
    kv_rank = max(m.kv_heads // tp, 1) * m.head_dim
    f_rank = m.ffn_hidden / tp * (m.top_k if m.moe else 1)
    block_input = h_rank if sp else m.hidden
    kept = block_input + h_rank + kv_rank + h_rank + f_rank  # input, Q, V, attention, w1
    if m.gated_mlp:  # w2 is the 7th matmul: its output, a partial sum before any RS
        kept += m.hidden
    if tp > 1 and sp:  # the reduce-scatter outputs of attention and MLP
        kept += 2 * h_rank
    return float(ACT_BYTES * kept + 4 * m.heads / tp)


def activation_bytes_per_layer(
    model: ModelSpec,
    seq: int,
    micro_batch: int,
    tp: int = 1,
    sp: bool = False,
    recompute: str = "none",
    flash_attention: bool = True,
    selective: str = "attention",
    gathered: bool = False,
) -> float:
    """Activation bytes one layer keeps for one micro-batch on one rank (Korthikanti).

    ``selective``: what ``recompute="selective"`` keeps (``attention``: Korthikanti's
    selective recompute; ``op``: torchtitan's per-op SAC). ``gathered``: under TP with
    SP the QKV and MLP matmuls keep their all-gathered input (PyTorch DTensor) instead of
    the sharded one.

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
    if recompute == "selective" and selective == "op":
        return tokens * op_sac_bytes_per_token(model, tp, sp)
    replicated, split, quadratic = _layer_terms(model, tp)
    per_token = (replicated / tp if sp else replicated) + split
    if gathered and sp and tp > 1:  # QKV and MLP inputs saved all-gathered (DTensor)
        per_token += 2 * ACT_BYTES * model.hidden * (1 - 1 / tp)
    if recompute == "none" and not flash_attention:
        per_token += quadratic * seq
    return float(tokens * per_token)


#: Bytes per logit element on the last stage, by cross-entropy kernel: (kept per micro-batch
#: held, extra for the micro-batch in its loss). Eager fp32: the fp32 log-probabilities
#: are kept, the bf16 logits live beside them. Fused: bf16 logits, gradient in place.
#: ``upcast`` (torchtitan: ``cross_entropy(pred.float())`` in eager mode): the fp32
#: log-probabilities are kept (4); the peak is the start of the backward, where the
#: gradient of the log-probabilities (4) and of the fp32 logits (4) live beside them.
#: ``upcast_parallel``: the same with the logits sharded over TP (torchtitan's loss
#: parallel: ``torch/distributed/tensor/parallel/loss.py`` decomposes ``log_softmax`` into
#: shifted logits, their exponential and the result, and its fused backward builds
#: ``(zeros_like(x) + exp(x)) * grad``: up to four fp32 copies beside the kept one).
LOGIT_BYTES = {"fp32": (4, 2), "fused": (2, 0), "upcast": (4, 8), "upcast_parallel": (4, 16)}


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


def framework_activation_bytes(
    model: ModelSpec,
    plan: ParallelPlan,
    seq: int,
    stage: int,
    held: tuple[float, float],
    layers: int,
    flash_attention: bool,
    cross_entropy: str,
    sem: Semantics,
) -> float:
    """Activation bytes a rank of ``stage`` holds under framework ``sem``.

    ``held``: the stage's most micro-batches in flight (whole-stage units) and those of
    its last model chunk (the logits of the last stage live only there). On top of
    :func:`stage_activation_bytes`' terms: what ``selective`` recompute keeps
    (``sem.selective_recompute``), matmul inputs kept all-gathered
    (``sem.tp_saves_gathered_input``), the output projection's input, the sent outputs a
    stage keeps when it does not free them (one per chunk in flight), and the receive
    buffers a pipeline runtime allocates for every micro-batch of the step. The loss's
    temporaries and the block re-materialised in the backward do not coexist (the loss
    backward ends before the last block is redone): the larger of the two counts.
    """
    seq = seq // plan.cp
    stage_held, last_chunk_held = held
    args = (model, seq, plan.micro_batch, plan.tp, plan.sp)
    rec, sac = plan.recompute, sem.selective_recompute
    gathered = sem.tp_saves_gathered_input
    per_layer = activation_bytes_per_layer(*args, rec, flash_attention, sac, gathered)
    on_host = rec == "full" and sem.cpu_checkpointing  # checkpoints copied to the host
    total = 0.0 if on_host else layers * per_layer * stage_held
    redo = 0.0  # one block re-materialised in its backward
    if (rec == "full" or (rec, sac) == ("selective", "op")) and layers:
        redo = activation_bytes_per_layer(*args, "none", flash_attention, sac, gathered)
    last, v, m = stage == plan.pp - 1, plan.virtual_stages, plan.num_microbatches
    tokens = plan.micro_batch * seq
    loss = 0.0  # the loss's temporaries, gone before the first block is redone
    if last:  # the output projection's input (gathered under DTensor), and the logits
        split = plan.tp if plan.sp and not gathered else 1
        total += ACT_BYTES * tokens * model.hidden / split * last_chunk_held
        kind = "upcast_parallel" if cross_entropy == "upcast" and plan.tp > 1 else cross_entropy
        kept, extra = LOGIT_BYTES[kind]
        logits = tokens * model.vocab / plan.tp
        total += logits * kept * last_chunk_held
        loss = logits * extra
    total += max(redo, loss)
    if plan.pp == 1:
        return total
    boundary = ACT_BYTES * tokens * model.hidden / (plan.tp if plan.sp else 1)
    if not sem.deallocate_pipeline_outputs:  # outputs of the chunks that send onwards
        total += boundary * stage_held * (v - 1 if last else v)
    if sem.recv_buffers_per_microbatch:  # activations in, gradients in
        total += boundary * m * ((v - (stage == 0)) + (v - last))
    return total


def largest_transient_bytes(
    model: ModelSpec,
    plan: ParallelPlan,
    seq: int,
    stage: int,
    flash_attention: bool,
    cross_entropy: str,
    sem: Semantics,
) -> float:
    """The largest tensor a step of ``stage`` allocates and frees, bytes: the logits in
    their widest dtype (fp32 under an fp32 or upcast cross-entropy), one MLP
    intermediate, the attention scores without a fused kernel, and under ZeRO-2/3 the
    gradients reduced at once: one unit's in the reduction dtype (FSDP flattens a unit's
    gradients into one reduce-scatter input), or, where gradients are copied into
    staging buckets (DeepSpeed), the largest weight's gradient or one bucket.
    """
    m, t = model, plan.tp
    tokens = plan.micro_batch * seq // plan.cp
    sizes = [ACT_BYTES * tokens * m.ffn_hidden / t * (m.top_k if m.moe else 1)]
    if stage == plan.pp - 1:
        sizes.append(tokens * m.vocab / t * (2 if cross_entropy == "fused" else 4))
    if not flash_attention:
        sizes.append(ACT_BYTES * plan.micro_batch * m.heads / t * (seq // plan.cp) ** 2)
    if plan.zero >= 2 and plan.dp_cp > 1:
        layer = layer_rank_params(model, plan).total
        if sem.grad_bucket_copy == "bucket" and sem.grad_bucket_elements is not None:
            weight = m.hidden * max(m.ffn_hidden, m.hidden) / t
            main = DTYPE_BYTES[sem.main_grad_dtype]
            sizes.append(main * max(weight, min(sem.grad_bucket_elements, layer)))
        else:
            sizes.append(DTYPE_BYTES[sem.grad_reduce_dtype] * layer)
    return float(max(sizes))
