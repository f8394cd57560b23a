"""FLOPs of a whole training step, and the published formulas they reproduce.

Model FLOPs (for MFU) leave recomputation out; hardware FLOPs (for HFU) count it. Both
sum matmuls only, with the full ``s x s`` attention square (see :mod:`.ops`).

>>> from sim.workload.models import megatron_gpt
>>> m = megatron_gpt(2304, 24)
>>> step_flops(m, 2048, 512, "full").hardware_flops == megatron_flops(m, 2048, 512)
True
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from sim.workload.models import ModelSpec, param_count
from sim.workload.ops import OpContext, chunk_ops

__all__ = ["StepFlops", "megatron_flops", "six_n_flops", "step_flops"]


@dataclass(frozen=True)
class StepFlops:
    """FLOPs of one optimizer step over the whole job.

    Attributes
    ----------
    model_flops : float
        Matmul FLOPs of forward + backward, no recomputation (MFU numerator).
    hardware_flops : float
        ``model_flops`` plus recomputed forward work (HFU numerator).
    tokens : int
        Tokens per step, ``global_batch * seq``.
    """

    model_flops: float
    hardware_flops: float
    tokens: int


def step_flops(model: ModelSpec, seq: int, global_batch: int, recompute: str = "none") -> StepFlops:
    """FLOPs of one step of ``global_batch`` sequences of ``seq`` tokens.

    Parallelism does not change the total, so this counts one unsplit sequence and
    multiplies.

    >>> from sim.workload.models import model_preset
    >>> f = step_flops(model_preset("gpt3-175b"), 2048, 1536)
    >>> round(f.model_flops / (6 * 175e9 * f.tokens), 2)
    1.03
    """
    ctx = OpContext(model, micro_batch=1, seq=seq, recompute=recompute)
    ops = chunk_ops(ctx, model.layers, first=True, last=True)
    return StepFlops(
        model_flops=ops.model_flops * global_batch,
        hardware_flops=ops.hardware_flops * global_batch,
        tokens=seq * global_batch,
    )


def megatron_flops(model: ModelSpec, seq: int, global_batch: int) -> int:
    """Narayanan et al. (SC21) eq. 3: ``96 B s l h^2 (1 + s/6h + V/16lh)``.

    FLOPs per step of a GPT with a 4h MLP under full recomputation (exact integer).
    """
    b, s, n, h, v = global_batch, seq, model.layers, model.hidden, model.vocab
    value = 96 * b * s * n * h**2 * (1 + Fraction(s, 6 * h) + Fraction(v, 16 * n * h))
    assert value.denominator == 1
    return int(value)


def six_n_flops(model: ModelSpec, tokens: int) -> float:
    """The ``6 N D`` approximation of training FLOPs (N = all parameters)."""
    return 6.0 * param_count(model) * tokens
