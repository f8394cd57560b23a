"""The sections of a scenario as frozen dataclasses (what :mod:`sim.scenario.load` reads).

``ClusterSection``, ``ParallelSection``, ``TrainingSection`` and ``PriceSection`` hold the
keys as written (defaults where absent); :class:`Scenario` bundles them with the model and
the optional sections of the layers over the step.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.cost.config import EnergyConfig
from sim.cost.config import PriceConfig as _PriceConfig
from sim.cost.prices import resolve_price
from sim.network import network_names
from sim.reliability.config import ReliabilityConfig, SpotConfig
from sim.variability.config import VariabilityConfig
from sim.workload.frameworks import Semantics
from sim.workload.models import ModelSpec
from sim.workload.primitives import CONV_STACKS
from sim.workload.techniques import CommTechniques
from sim.workload.trainable import DEFAULT, Techniques

__all__ = [
    "NETWORKS",
    "ClusterSection",
    "ParallelSection",
    "PriceSection",
    "Scenario",
    "TrainingSection",
]

#: Defaults of the data-parallel techniques (one source: CommTechniques).
_COMM = CommTechniques()

#: Network backends a scenario may name (the registry of :mod:`sim.network`).
NETWORKS = network_names()


@dataclass(frozen=True)
class ClusterSection:
    """``topology``: a topology preset name or path; ``nodes``: optional node count."""

    topology: str
    nodes: int | None = None


@dataclass(frozen=True)
class ParallelSection:
    """The ``parallel`` section as written (``dp`` None = derived from the GPU count).

    ``zero`` is a ZeRO stage 0-3 or an FSDP strategy name (``FULL_SHARD``,
    ``SHARD_GRAD_OP``, ``HYBRID_SHARD``, ``_HYBRID_SHARD_ZERO2``, ``NO_SHARD``), read into
    the stage and ``fsdp``; ``shard_size`` is HYBRID_SHARD's shard group (default: the
    data-parallel ranks of one node). See :mod:`sim.workload.zero` and
    :mod:`sim.workload.stages` for the other keys. ``nccl_algo`` and
    ``nccl_proto`` restrict the collective tuner as ``NCCL_ALGO``/``NCCL_PROTO`` do
    (``ring,tree``, ``^nvls``; :mod:`sim.collectives.selection`) for every collective
    of the step. ``cp`` is context parallelism (ring attention over sequence chunks;
    :mod:`sim.workload.context`). ``microbatch_group_size`` (interleaved schedule):
    micro-batches run through one model chunk before the next, Megatron-Core's
    ``--microbatch-group-size-per-virtual-pipeline-stage`` (between ``pp`` and the
    micro-batches; default ``pp``): it lets the micro-batches be any count whose last
    group holds at least ``pp`` (:func:`sim.workload.plan_checks.group_error`).
    ``batch_split`` (``equal`` | ``proportional``) and ``stage_split``
    (``equal`` | ``speed``) share micro-batches among data-parallel replicas and layers
    among pipeline stages by GPU speed on a heterogeneous cluster
    (:mod:`sim.training.hetero`); on one GPU model they change nothing.
    ``grad_compression``, ``topk_ratio``, ``powersgd_rank``, ``dp_mode``,
    ``ps_servers``, ``staleness`` and ``sync_every`` change the data-parallel
    synchronisation (:mod:`sim.workload.techniques`; defaults: none).
    """

    tp: int = 1
    pp: int = 1
    dp: int | None = None
    cp: int = 1
    ep: int = 1
    sp: bool = False
    zero: int = 0
    micro_batch: int = 1
    schedule: str = "1f1b"
    virtual_stages: int = 1
    microbatch_group_size: int | None = None
    recompute: str = "none"
    overlap_tp: bool = False
    overlap_dp: bool = True
    bucket_bytes: float | None = None  # None: the framework's buckets, else 25 MiB
    placement: tuple[str, ...] = ("tp", "pp", "dp")
    shard_size: int | None = None
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    embedding_as_layer: bool | None = None
    loss_as_layer: bool | None = None
    fsdp: str | None = None
    nccl_algo: str = "auto"
    nccl_proto: str = "auto"
    batch_split: str = "equal"
    stage_split: str = "equal"
    # data-parallel communication techniques (defaults: CommTechniques')
    grad_compression: str = _COMM.grad_compression
    topk_ratio: float = _COMM.topk_ratio
    powersgd_rank: int = _COMM.powersgd_rank
    dp_mode: str = _COMM.dp_mode
    ps_servers: int | None = _COMM.ps_servers
    staleness: int = _COMM.staleness
    sync_every: int = _COMM.sync_every


@dataclass(frozen=True)
class TrainingSection:
    """Sequences per step, tokens per sequence, linear-layer precision, fused attention,
    the dtype gradients are accumulated and reduced in (``fp32`` main gradients by
    default, as Megatron-LM keeps them), and the cross-entropy kernel: ``fp32`` (eager
    PyTorch under autocast: logits cast to fp32, log-softmax kept) or ``fused`` (one
    kernel over bf16 logits, gradient written in place: flash-attn's xentropy,
    Megatron-Core's cross-entropy fusion), and whether norms, activations, residual adds
    (with dropout), rotary and softmax run as fused bandwidth-tuned kernels
    (``fused_kernels``: Megatron-LM, Transformer Engine) or as eager framework kernels.
    ``attention_kernel`` is the fused attention kernel family (``fa2`` FlashAttention-2,
    ``fa3`` FlashAttention-3, ``cudnn`` cuDNN fused attention as Transformer Engine and
    Megatron-Core/NeMo call it, ``triton`` Triton's fused attention, ``fa_triton``
    llm-foundry's Triton kernel), timed from its published kernel benchmarks
    (:mod:`sim.training.compute.attention`); ``fitted`` (the default, what the end-to-end
    fits assumed) times it by the compute entry's parametric model. The optimizer,
    LoRA/QLoRA and offload keys are read into :attr:`techniques`
    (:mod:`sim.workload.trainable`).
    ``tokens`` is the token budget of the whole run (time, cost and energy to train).
    ``framework`` names the training framework whose defaults the step follows
    (:mod:`sim.workload.frameworks`; its behaviours are overridden in the scenario's
    ``framework:`` section). ``grad_accum_fusion``: the weight-gradient GEMMs accumulate
    into the gradient buffer (Megatron's default, and the default without a framework);
    false adds a separate pass per micro-batch after the first
    (:func:`sim.training.graph.costs.grad_accum_bytes`); a framework sets its own.
    ``conv_stack``: the framework stack that runs a CNN's convolutions (``pytorch``,
    ``tensorflow``, ``xla``; :mod:`sim.training.compute.conv_stacks`); layer-list models
    only."""

    global_batch: int
    seq_len: int
    precision: str = "bf16"
    flash_attention: bool = True
    grad_dtype: str = "fp32"
    cross_entropy: str = "fp32"
    fused_kernels: bool = False
    attention_kernel: str = "fitted"
    # optimizer, fine-tuning and offload (defaults: Techniques')
    optimizer: str = DEFAULT.optimizer
    momentum: bool = DEFAULT.momentum
    finetune: str = DEFAULT.finetune
    lora_rank: int = DEFAULT.lora_rank
    lora_targets: tuple[str, ...] = DEFAULT.lora_targets
    offload: str = DEFAULT.offload
    offload_overlap: bool = DEFAULT.offload_overlap
    cpu_adam_rate: float = DEFAULT.cpu_adam_params_per_s
    nvme_bandwidth: float = DEFAULT.nvme_Bps
    tokens: float | None = None
    framework: str | None = None
    grad_accum_fusion: bool = True
    conv_stack: str = CONV_STACKS[0]

    @property
    def techniques(self) -> Techniques:
        """Optimizer, fine-tuning and offload settings as one value."""
        return Techniques(self.optimizer, self.momentum, self.finetune, self.lora_rank,
                          self.lora_targets, self.offload, self.offload_overlap,
                          self.cpu_adam_rate, self.nvme_bandwidth)  # fmt: skip


@dataclass(frozen=True)
class PriceSection:
    """``gpu_hour_usd``: price of one GPU-hour in USD, or ``preset``: a dated, sourced price
    (``sim/cost/prices.yaml``); at most one of the two (neither: no cost reported)."""

    gpu_hour_usd: float | None = None
    preset: str | None = None

    def usd_per_gpu_hour(self, gpu: str) -> float | None:
        """USD per GPU-hour of ``gpu`` under this section, or None when no price is set."""
        quote = resolve_price(_PriceConfig(gpu_hour_usd=self.gpu_hour_usd, preset=self.preset), gpu)
        return None if quote is None else quote.usd_per_gpu_hour


@dataclass(frozen=True)
class Scenario:
    """A validated study: model, cluster, parallel plan, training settings and knobs; the
    optional sections of the layers over the step are None when absent."""

    name: str
    model: ModelSpec
    cluster: ClusterSection
    parallel: ParallelSection
    training: TrainingSection
    price: PriceSection = PriceSection()
    network: str = "flow"
    profile: str | None = None
    force_profile: bool = False
    seed: int = 0
    framework: Semantics | None = None  # training.framework with the framework: overrides
    variability: VariabilityConfig | None = None  # opt-in: clustersim run --samples
    reliability: ReliabilityConfig | None = None
    spot: SpotConfig | None = None
    energy: EnergyConfig | None = None
