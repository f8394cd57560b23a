"""What the scenario sections allow: caps, choices, nullable keys, and the parsers of values
with their own syntax (read by the models of :mod:`sim.scenario.models`).

>>> SPECIAL["zero"]("FULL_SHARD", "parallel.zero")
(3, 'FULL_SHARD')
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from sim.collectives.algorithms import ALGORITHMS
from sim.collectives.params import PROTOCOLS
from sim.collectives.selection import parse_list
from sim.errors import ConfigError
from sim.scenario.sections import NETWORKS
from sim.topology.spec import MAX_GPUS
from sim.units import parse_bandwidth, parse_size
from sim.workload.frameworks import FRAMEWORKS
from sim.workload.plan import parse_order
from sim.workload.primitives import ATTENTION_KERNELS, CONV_STACKS
from sim.workload.techniques import COMPRESSIONS, DP_MODES
from sim.workload.trainable import FINETUNES, OFFLOADS, OPTIMIZERS, parse_targets
from sim.workload.zero import parse_zero

__all__ = [
    "CAPS",
    "CHOICES",
    "GRAD_DTYPES",
    "NULLABLE",
    "PRECISIONS",
    "SPECIAL",
    "check_seq_len",
    "read_str",
    "read_tokens",
    "short",
]

PRECISIONS = ("bf16", "fp16", "fp8")
GRAD_DTYPES = {"fp32": 4, "bf16": 2, "fp16": 2}


#: Largest value of each count key: far above any real model or job (Llama-3-405B: 126
#: layers, hidden 16,384, 128 heads, vocab 128,256, 128K context), low enough that a typo
#: (``layers: 1000000000``) is refused instead of allocating for hours.
CAPS: dict[str, int] = {
    "layers": 10_000, "first_stage_layers": 10_000, "last_stage_layers": 10_000,
    "hidden": 2**20, "ffn_hidden": 2**22, "heads": 2**16, "kv_heads": 2**16,
    "vocab": 2**24, "experts": 2**16, "top_k": 2**16, "max_seq": 2**24, "seq_len": 2**24,
    "global_batch": 2**20, "micro_batch": 2**20, "virtual_stages": 1024,
    "microbatch_group_size": 2**20,
    "tp": MAX_GPUS, "pp": MAX_GPUS, "dp": MAX_GPUS, "ep": MAX_GPUS, "shard_size": MAX_GPUS,
    "nodes": MAX_GPUS,
    # local SGD / DiLoCo sync every H steps (DiLoCo: 500); 10^6 steps is longer than any
    # training run (Llama 3 405B: ~930k steps): more is no synchronisation at all
    "sync_every": 10**6,
    # PowerSGD ranks are 1-32 in practice (Vogels et al.); a matrix is compressed only up
    # to rank hidden/4 (sim.workload.techniques.check_techniques)
    "powersgd_rank": 2**16,
}  # fmt: skip


def check_seq_len(max_seq: int, seq_len: int, model_raw: object) -> None:
    """Refuse ``training.seq_len`` above the model's context when the model states one.

    A preset's ``max_seq`` (or one written in ``model``) is the trained context (Llama-3-8B:
    8,192); a custom model without ``max_seq`` keeps the old behaviour (no limit).
    """
    stated = isinstance(model_raw, dict) and ("preset" in model_raw or "max_seq" in model_raw)
    if stated and seq_len > max_seq:
        raise ConfigError(
            f"training.seq_len: {seq_len:,} is longer than the model's context, "
            f"model.max_seq = {max_seq:,} (raise model.max_seq for a longer-context variant)"
        )


def short(value: object) -> str:
    """``repr(value)``, cut to about 40 characters for messages."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"


def read_str(value: object, where: str) -> str:
    """A non-empty string; ConfigError naming ``where`` otherwise."""
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: expected a non-empty string, got {value!r}")
    return value


def _placement(value: object, where: str) -> str | list[str]:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise ConfigError(f"{where}: expected an order like 'tp,pp,dp', got {value!r}")


#: Smallest gradient bucket (bytes): one bucket per ~1 KiB of gradients is already far
#: below any framework's (PyTorch DDP: 25 MB; Megatron: 40M elements); a bare ``25`` is
#: almost always PyTorch's ``bucket_cap_mb`` written without its unit.
MIN_BUCKET_BYTES = 1024


def _bucket_bytes(value: object, where: str) -> int:
    """A gradient bucket size in whole bytes, at least :data:`MIN_BUCKET_BYTES`."""
    size = parse_size(value, where)
    if size < MIN_BUCKET_BYTES:
        raise ConfigError(
            f"{where}: {value!r} is {size} byte(s), below the smallest bucket "
            f"({MIN_BUCKET_BYTES} bytes); give a unit, e.g. 25MB (PyTorch's bucket_cap_mb=25)"
        )
    return size


def _nccl_list(known: Sequence[str], what: str) -> Callable[[object, str], str]:
    """A reader of an NCCL_ALGO/NCCL_PROTO-style list (``auto``, ``ring,tree``, ``^nvls``)."""

    def read(value: object, where: str) -> str:
        text = read_str(value, where)
        if text.strip().lower() != "auto":
            parse_list(text, known, f"{where} ({what})")
        return text

    return read


#: Choice keys and what they allow (the error lists them).
CHOICES: dict[str, tuple[str, ...]] = {
    "schedule": ("gpipe", "1f1b", "interleaved"), "recompute": ("none", "selective", "full"),
    "batch_split": ("equal", "proportional"), "stage_split": ("equal", "speed"),
    "grad_compression": tuple(COMPRESSIONS), "dp_mode": tuple(DP_MODES),
    "precision": PRECISIONS, "grad_dtype": tuple(GRAD_DTYPES),
    "cross_entropy": ("fp32", "fused"), "optimizer": tuple(OPTIMIZERS),
    "framework": FRAMEWORKS,
    "attention_kernel": ATTENTION_KERNELS, "conv_stack": CONV_STACKS,
    "finetune": tuple(FINETUNES), "offload": tuple(OFFLOADS), "network": NETWORKS,
}  # fmt: skip

#: Parsers of the values with their own syntax: (value, key path) -> value as read.


def read_tokens(value: object, where: str) -> float:
    """A token budget > 0: a number or a string such as ``15.6e12`` (YAML 1.1 reads that as
    text, since its floats need a signed exponent).

    >>> read_tokens("15.6e12", "training.tokens")
    15600000000000.0
    """
    number: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.replace("_", ""))
        except ValueError:
            number = None
    if number is None or not (math.isfinite(number) and 0 < number <= MAX_TOKENS):
        raise ConfigError(
            f"{where}: expected a number of tokens in (0, {MAX_TOKENS:.0e}] such as 15.6e12, "
            f"got {value!r}"
        )
    return number


#: Largest token budget accepted: 1e18, ~10^4 times the largest published pre-training
#: runs (Llama 3's 15.6e12 tokens); past it, times and costs run to hundreds of digits.
MAX_TOKENS = 1e18


SPECIAL: dict[str, Callable[[object, str], Any]] = {
    "zero": parse_zero, "tokens": read_tokens, "lora_targets": parse_targets,
    "nccl_algo": _nccl_list(list(ALGORITHMS), "NCCL_ALGO"),
    "nccl_proto": _nccl_list(list(PROTOCOLS), "NCCL_PROTO"),
    "bucket_bytes": lambda v, w: _bucket_bytes(v, w),
    "placement": lambda v, w: parse_order(_placement(v, w)),
    "nvme_bandwidth": lambda v, w: parse_bandwidth(v, w),
}  # fmt: skip


#: Keys where an explicit null means "not given".
NULLABLE = (
    "dp", "nodes", "gpu_hour_usd", "shard_size", "first_stage_layers", "last_stage_layers",
    "embedding_as_layer", "loss_as_layer", "ps_servers", "tokens", "preset", "framework",
    "bucket_bytes", "microbatch_group_size",
)  # fmt: skip
