"""Data-parallel communication techniques: what they put on the wire and what they keep.

Three opt-in changes to the synchronous all-reduce of full gradients (``parallel.*``):

- **gradient compression** (``grad_compression``):

  * ``bf16`` / ``fp8``: gradients cast before the reduction; the collective moves
    ``2 / grad_bytes`` (``1 / grad_bytes``) of the bytes.
  * ``topk`` with error feedback (Stich et al., NeurIPS 2018, arXiv:1809.07599; Lin et
    al., "Deep Gradient Compression", ICLR 2018, arXiv:1712.01887): each rank keeps the
    ``k = topk_ratio * n`` largest entries and sends them as (value, int32 index) pairs.
    Sparse sums do not reduce in place, so the pairs are all-gathered: the all-gather's
    output is ``dp * k * (value + index)`` bytes and every rank sends
    ``(dp - 1) * k * (value + index)``. A ring all-reduce of the dense gradient sends
    ``2 (dp - 1) / dp * n * value`` per rank, so top-k sends fewer bytes only while
    ``dp < 2 / (ratio * (1 + index / value))`` (:func:`topk_crossover_dp`; 1/ratio for
    fp32 values with int32 indices): the all-gather grows with dp, the all-reduce does not.
  * ``powersgd`` rank r (Vogels et al., NeurIPS 2019, arXiv:1905.13727, Algorithm 1):
    each weight matrix m x n is sent as two all-reduces, P (m x r) then Q (n x r), instead
    of m n elements; 1-D tensors (norms, biases) and matrices that would not shrink at
    least twofold (PyTorch's ``PowerSGDState.min_compression_rate = 2``) go uncompressed
    with P.

- **parameter server** (``dp_mode: ps``): workers push gradients to ``ps_servers`` server
  hosts and pull parameters back (:mod:`sim.training.graph.techniques` times it).
- **local SGD / DiLoCo** (``sync_every: H``): replicas synchronise once every H steps
  (Douillard et al., "DiLoCo", arXiv:2311.08105: the all-reduced quantity is the
  pseudo-gradient, the change of the parameters over the H inner steps; an outer
  Nesterov step applies it).

>>> topk_crossover_dp(0.01)
100.0
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.errors import ConfigError
from sim.workload.models import ModelSpec
from sim.workload.plan import ParallelPlan
from sim.workload.stages import stage_layers

__all__ = [
    "COMPRESSIONS",
    "DP_MODES",
    "INDEX_BYTES",
    "OUTER_STATE_BYTES",
    "CommTechniques",
    "Matrix",
    "check_techniques",
    "compressed_bytes",
    "powersgd_split",
    "rank_matrices",
    "techniques_of",
    "topk_crossover_dp",
    "wire_factor",
]

COMPRESSIONS = ("none", "bf16", "fp8", "topk", "powersgd")
DP_MODES = ("allreduce", "ps")
INDEX_BYTES = 4  # int32 index of a top-k entry
#: DiLoCo's outer state: the global parameters of the last synchronisation and the outer
#: Nesterov momentum, fp32 each (arXiv:2311.08105, Algorithm 1: theta^(t-1) and the
#: outer optimizer's momentum buffer).
OUTER_STATE_BYTES = 8
#: PyTorch PowerSGD compresses a matrix only if (m + n) r * 2 <= m n
#: (torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook.PowerSGDState,
#: ``min_compression_rate=2``).
MIN_COMPRESSION_RATE = 2
_CAST_BYTES = {"bf16": 2, "fp8": 1}


@dataclass(frozen=True)
class CommTechniques:
    """The ``parallel`` keys of this module, as written (see the module docstring).

    ``ps_servers`` None: one server host per node of the cluster.
    """

    grad_compression: str = "none"
    topk_ratio: float = 0.01
    powersgd_rank: int = 4
    dp_mode: str = "allreduce"
    ps_servers: int | None = None
    staleness: int = 0
    sync_every: int = 1

    @property
    def active(self) -> bool:
        """Whether anything differs from synchronous all-reduce of full gradients."""
        return self.grad_compression != "none" or self.dp_mode != "allreduce" or self.sync_every > 1


@dataclass(frozen=True)
class Matrix:
    """``count`` weight matrices of ``rows`` x ``cols`` on one rank."""

    rows: int
    cols: int
    count: int

    @property
    def elements(self) -> int:
        """``rows * cols * count``."""
        return self.rows * self.cols * self.count


def check_techniques(tech: CommTechniques, plan: ParallelPlan, model: ModelSpec) -> None:
    """Refuse combinations that are not modelled, naming the keys.

    >>> from sim.workload.models import model_preset
    >>> plan = ParallelPlan(dp=8, zero=2, global_batch=8)
    >>> check_techniques(CommTechniques("powersgd"), plan, model_preset("gpt2-124m"))
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    sim.errors.ConfigError: parallel.grad_compression: powersgd needs parallel.zero 0 or 1...
    """
    comp, zero = tech.grad_compression, plan.zero
    if comp != "none" and (zero >= 2 or plan.fsdp is not None):
        raise ConfigError(
            f"parallel.grad_compression: {comp} needs parallel.zero 0 or 1 (got {zero}, "
            f"{plan.fsdp or 'no FSDP'}): ZeRO-2/3 reduce-scatter shards every micro-batch"
        )
    if tech.dp_mode == "ps" and zero != 0:
        raise ConfigError(f"parallel.dp_mode: ps needs parallel.zero 0 (got {zero})")
    if tech.sync_every > 1 and zero != 0:
        raise ConfigError(
            f"parallel.sync_every: {tech.sync_every} needs parallel.zero 0 (got {zero})"
        )
    if tech.dp_mode == "ps" and (comp != "none" or tech.sync_every > 1):
        raise ConfigError(
            "parallel.dp_mode: ps with parallel.grad_compression or parallel.sync_every > 1 "
            "is not modelled; use one of them"
        )
    if comp == "powersgd" and tech.powersgd_rank * 2 * MIN_COMPRESSION_RATE > model.hidden:
        raise ConfigError(
            f"parallel.powersgd_rank: {tech.powersgd_rank} compresses none of the model's "
            f"hidden x hidden matrices (hidden {model.hidden}: rank at most "
            f"{model.hidden // (2 * MIN_COMPRESSION_RATE)}); PowerSGD uses ranks 1-32"
        )
    if tech.staleness > 0 and tech.dp_mode != "ps":
        raise ConfigError(f"parallel.staleness: {tech.staleness} needs parallel.dp_mode: ps")
    if model.moe and (comp in ("topk", "powersgd") or tech.dp_mode == "ps"):
        raise ConfigError(
            f"parallel.grad_compression/dp_mode: {comp}/{tech.dp_mode} is not modelled for "
            "mixture-of-experts models; use none, bf16 or fp8 with allreduce"
        )


def compressed_bytes(tech: CommTechniques, nbytes: float, grad_bytes: int) -> float:
    """Bytes one rank contributes after casting or top-k (nccl-tests input size), for
    ``nbytes`` of gradients in ``grad_bytes`` per element.

    >>> compressed_bytes(CommTechniques("bf16"), 400.0, 4), compressed_bytes(
    ...     CommTechniques("topk", topk_ratio=0.5), 400.0, 4)
    (200.0, 400.0)
    """
    comp = tech.grad_compression
    if comp in _CAST_BYTES:
        return nbytes * _CAST_BYTES[comp] / grad_bytes
    if comp == "topk":
        k = tech.topk_ratio * nbytes / grad_bytes
        return k * (grad_bytes + INDEX_BYTES)
    return nbytes


def topk_crossover_dp(ratio: float, value_bytes: int = 4, index_bytes: int = INDEX_BYTES) -> float:
    """Data-parallel size above which top-k's all-gather sends more bytes per rank than a
    ring all-reduce of the dense gradient: ``2 / (ratio * (1 + index / value))``.

    >>> topk_crossover_dp(0.01, value_bytes=2)
    66.66666666666667
    """
    return 2.0 / (ratio * (1.0 + index_bytes / value_bytes))


def wire_factor(op: str, n: int) -> float:
    """Bytes each rank sends per byte of a collective's nccl-tests size on ``n`` ranks
    (ring: nccl-tests' bus-bandwidth factors).

    >>> wire_factor("all_reduce", 4), wire_factor("all_gather", 4)
    (1.5, 0.75)
    """
    if n <= 1:
        return 0.0
    return 2.0 * (n - 1) / n if op == "all_reduce" else (n - 1) / n


def rank_matrices(model: ModelSpec, plan: ParallelPlan, stage: int) -> list[Matrix]:
    """Weight matrices of a rank of ``stage`` as Megatron-LM lays them out: fused QKV
    (``h x (h + 2 kv) / tp``), output projection, fused fc1 (gate and up), fc2, the word
    embedding and untied head (``V / tp x h``) and a learned position table. Dense
    (non-MoE) models only.

    >>> from sim.workload.models import model_preset
    >>> [m.count for m in rank_matrices(model_preset("gpt2-124m"), ParallelPlan(), 0)]
    [12, 12, 12, 12, 1, 1]
    """
    m, t = model, plan.tp
    kv_rep = max(t // m.kv_heads, 1)
    n = stage_layers(plan, model)[stage]
    h = m.hidden
    fc1 = (2 if m.gated_mlp else 1) * m.ffn_hidden // t
    out = [
        Matrix(h, (h + 2 * m.kv_dim * kv_rep) // t, n),
        Matrix(h // t, h, n),
        Matrix(h, fc1, n),
        Matrix(m.ffn_hidden // t, h, n),
    ]
    if stage == 0:
        out.append(Matrix(m.vocab // t, h, 1))
        if m.position == "learned":
            out.append(Matrix(m.max_seq, h, 1))
    if stage == plan.pp - 1 and not (m.tied_embeddings and plan.pp == 1):
        out.append(Matrix(m.vocab // t, h, 1))
    return [x for x in out if x.count > 0]


def powersgd_split(
    matrices: list[Matrix], dense_params: float, rank: int
) -> tuple[float, float, float]:
    """PowerSGD's all-reduced elements of a rank: (P elements with the uncompressed
    tensors, Q elements, elements of the compressed matrices).

    A matrix is compressed when ``(m + n) r * 2 <= m n``; everything else (1-D tensors:
    ``dense_params`` minus the matrices) travels with P.

    >>> powersgd_split([Matrix(100, 50, 2)], 10_000 + 30, 4)
    (830.0, 400.0, 10000.0)
    """
    p = q = compressed = 0.0
    for x in matrices:
        if (x.rows + x.cols) * rank * MIN_COMPRESSION_RATE <= x.rows * x.cols:
            p += x.rows * rank * x.count
            q += x.cols * rank * x.count
            compressed += x.elements
    return p + dense_params - compressed, q, compressed


def techniques_of(parallel: object) -> CommTechniques:
    """The techniques of a scenario's ``parallel`` section (defaults where it has none).

    >>> techniques_of(object()).active
    False
    """
    defaults = CommTechniques()
    return CommTechniques(
        **{
            k: getattr(parallel, k, getattr(defaults, k))
            for k in CommTechniques.__dataclass_fields__
        }
    )
