"""What each training framework does by default, as named presets of one dataclass.

A :class:`Semantics` holds every behaviour that changes the step's tasks or its memory
and differs between frameworks: precision of the model parameters and of the gradient
buffer and reduction, the ZeRO stage data parallelism defaults to, when and in what
buckets gradients are reduced and parameters gathered, tensor-parallel communication
overlap and its measured cost, FSDP with pipeline parallelism, what selective activation
recomputation keeps, whether sent pipeline outputs are freed, the cross-entropy kernel
and the allocator setting. :data:`PRESETS` names six frameworks; :data:`SOURCES` gives,
for every preset and every field, the code or document the value was read from
(repository, path and commit, or a paper). ``docs/frameworks.md`` is
:func:`semantics_table`'s rendering of both.

The presets model the configuration each framework's own published performance runs
use where that differs from a bare command line (Megatron-Core's README benchmark turns
on ``--overlap-grad-reduce``, ``--overlap-param-gather`` and ``--tp-comm-overlap``;
NeMo's ``scripts/performance`` reduces gradients in bf16); the source says which.

>>> s = PRESETS["torchtitan"]
>>> s.model_params, s.default_zero, s.selective_recompute, s.pp_gather_once
('fp32', 3, 'op', True)
>>> grad_bucket_bytes(PRESETS["megatron-core"], dp=64)  # max(40M, 1M x 64) fp32 elements
256000000.0
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from sim.workload.primitives import ATTENTION_KERNELS

__all__ = [
    "BEHAVIOURS",
    "CHOICES",
    "DTYPE_BYTES",
    "FRAMEWORKS",
    "PRESETS",
    "SOURCES",
    "TP_OVERLAP_MEASUREMENTS",
    "Semantics",
    "grad_bucket_bytes",
    "overlaps_grad_reduce",
    "semantics_table",
]

#: Bytes per element of the dtypes a behaviour can name.
DTYPE_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2, "fp16": 2}


@dataclass(frozen=True)
class Semantics:
    """Framework behaviour that shapes the step's tasks and its memory.

    Attributes
    ----------
    name : str
        Preset name (``megatron-core``, ``nemo``, ``torchtitan``, ``deepspeed``, ``fsdp``,
        ``ddp``) the behaviours start from (overrides keep it).
    model_params : str
        Dtype the model holds its parameters in: ``bf16`` (a separate fp32 master copy
        lives in the optimizer: Megatron, NeMo, DeepSpeed) or ``fp32`` (the parameters
        are the master; bf16 copies exist only while gathered or autocast: PyTorch FSDP,
        DDP with AMP).
    main_grad_dtype : str
        Dtype gradients are accumulated in across micro-batches (the gradient buffer).
    grad_reduce_dtype : str
        Dtype gradients are reduced (reduce-scattered or all-reduced) in.
    fp32_grad_copy : bool
        The optimizer casts its gradient shard to fp32 before the step (an extra 4 bytes
        per sharded parameter when ``main_grad_dtype`` is not fp32).
    default_zero : int
        ZeRO stage data parallelism uses unless the plan says otherwise: 0 replicated
        (DDP), 1 distributed optimizer (optimizer states and fp32 master weights sharded
        over DP, gradient buffer kept whole), 2, 3 fully sharded (FSDP).
    overlap_grad_reduce : tuple[int, ...]
        ZeRO stages whose gradient reduction overlaps the backward pass (bucket by
        bucket as gradients are produced); in the others it runs after the backward.
    grad_bucket_elements : float or None
        Gradient elements per reduction bucket; None: one bucket per FSDP unit (layer).
    grad_bucket_per_dp_rank : float
        Megatron's scaling: the bucket holds at least this many elements per DP rank.
    grad_bucket_first_chunk_only : bool
        Only model chunk 0 of pipeline rank 0 is cut into buckets; every other chunk
        (interleaving) and pipeline rank reduces its gradients as one bucket.
    reduce_per_model_chunk : bool
        Under interleaving, each model chunk's gradients are reduced as soon as that
        chunk's last backward finishes, not once after the whole pipeline flush.
    grad_bucket_copy : str
        Where reduction buckets live: ``none`` (views of the gradient buffer: Megatron),
        ``all`` (a second copy of every gradient: PyTorch DDP's
        ``gradient_as_bucket_view=False``) or ``bucket`` (gradients copied into one
        bucket-sized staging buffer, two when the reduction overlaps the backward:
        DeepSpeed's ``contiguous_gradients``).
    autocast_cache : bool
        bf16 casts of the fp32 weights are cached for the step (``torch.autocast``).
    overlap_param_gather : bool
        ZeRO-1/2: the all-gather of updated parameters after the optimizer step overlaps
        the next step's forward (bucket by bucket) instead of running before it.
    allgather_bucket_elements : float or None
        Parameter elements per all-gather bucket (None: the gradient buckets).
    gathered_units : int
        ZeRO-3/FSDP: units (layers) held gathered at once, the running one and those
        prefetched.
    prefetch_elements : float or None
        DeepSpeed ZeRO-3: parameter elements fetched ahead of use.
    max_live_elements, max_reuse_elements : float or None
        DeepSpeed ZeRO-3: gathered elements kept resident before release, and the reuse
        distance (in elements) under which a gathered parameter is not released.
    reshard_after_forward : str
        ZeRO-3/FSDP: ``default`` (free gathered parameters after forward unless pipeline
        parallel), ``always`` or ``never``.
    pp_gather_once : bool
        ZeRO-3 with pipeline parallelism: parameters are gathered once per step and kept
        for every micro-batch, gradients accumulated unsharded and reduce-scattered once
        (FSDP2 under ``torch.distributed.pipelining``); False: per micro-batch.
    tp_comm_overlap : bool
        Tensor-parallel all-gathers and reduce-scatters overlap the adjacent GEMMs.
    tp_overlap_hidden : float
        Fraction of the overlapped TP communication time hidden (0-1).
    tp_overlap_slowdown : float
        Relative slowdown of GEMMs that run while TP communication shares the GPU.
    tp_async_backward : bool
        Without ``tp_comm_overlap``, a column-parallel linear's backward launches its TP
        collectives asynchronously beside its own GEMMs (Megatron's
        ``LinearWithGradAccumulationAndAsyncCommunication``): the sequence-parallel
        re-gather of the input beside the input-gradient GEMM, and the input gradient's
        all-reduce (or, under sequence parallelism, reduce-scatter) beside the
        weight-gradient GEMM; each costs only what exceeds that GEMM and the compute its
        NCCL kernels take from it (:data:`sim.training.compute.passes.ASYNC_COMM_SLOWDOWN`).
    selective_recompute : str
        What ``parallel.recompute: selective`` keeps: ``attention`` (Megatron: recompute
        core attention, Korthikanti et al. 2022) or ``op`` (torchtitan per-op SAC: save
        every other matmul output, attention outputs and reduce-scatter outputs).
    recompute_early_stop : bool
        Activation recomputation stops once every tensor the backward saved is back
        (PyTorch's non-reentrant ``torch.utils.checkpoint``, early stop on by default): a
        block's trailing ops whose outputs no backward needs (its last matmul, that
        matmul's reduce-scatter, the residual add) are not re-run. False: the whole
        forward is replayed (reentrant checkpointing, Megatron's ``CheckpointFunction``).
    tp_saves_gathered_input : bool
        Under TP with sequence parallelism, a column-parallel matmul saves its all-gathered
        (full-sequence) input for the backward (PyTorch DTensor), rather than its sharded
        input gathered again in the backward (Megatron).
    cpu_checkpointing : bool
        Under full recomputation, the saved layer inputs are copied to host memory
        (DeepSpeed's ``activation_checkpointing.cpu_checkpointing``).
    deallocate_pipeline_outputs : bool
        A stage frees the data of an output once sent to the next stage (it keeps only
        the autograd node); False keeps one output per in-flight micro-batch.
    recv_buffers_per_microbatch : bool
        The pipeline runtime allocates one activation and one gradient receive buffer per
        micro-batch of the step up front (``torch.distributed.pipelining``), rather than
        per micro-batch in flight.
    cross_entropy : str
        Default cross-entropy kernel: ``fp32`` (logits cast to fp32, softmax kept),
        ``fused`` (bf16 logits, gradient in place) or ``upcast`` (bf16 logits kept
        alive while an fp32 copy feeds ``log_softmax``).
    expandable_segments : bool
        The launcher sets ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``.
    grad_accum_fusion : bool
        The weight-gradient GEMM accumulates into the gradient buffer itself (Megatron's
        gradient-accumulation fusion, Transformer Engine's ``fuse_wgrad_accumulation``);
        False: it writes a fresh gradient that a separate pass adds into the buffer on
        every micro-batch after the first (PyTorch autograd's ``AccumulateGrad``).
    attention_kernel : str
        Default ``training.attention_kernel``: the fused attention family the framework's
        published setup runs, where its code pins one (``cudnn`` for NeMo's performance
        scripts and today's torchtitan); ``fitted`` where the kernel depends on
        versions the benchmarks do not state (the parametric model the end-to-end fits
        used).
    """

    name: str
    model_params: str
    main_grad_dtype: str
    grad_reduce_dtype: str
    fp32_grad_copy: bool
    default_zero: int
    overlap_grad_reduce: tuple[int, ...]
    grad_bucket_elements: float | None
    grad_bucket_per_dp_rank: float
    grad_bucket_first_chunk_only: bool
    reduce_per_model_chunk: bool
    grad_bucket_copy: str
    autocast_cache: bool
    overlap_param_gather: bool
    allgather_bucket_elements: float | None
    gathered_units: int
    prefetch_elements: float | None
    max_live_elements: float | None
    max_reuse_elements: float | None
    reshard_after_forward: str
    pp_gather_once: bool
    tp_comm_overlap: bool
    tp_overlap_hidden: float
    tp_overlap_slowdown: float
    tp_async_backward: bool
    selective_recompute: str
    recompute_early_stop: bool
    tp_saves_gathered_input: bool
    cpu_checkpointing: bool
    deallocate_pipeline_outputs: bool
    recv_buffers_per_microbatch: bool
    cross_entropy: str
    expandable_segments: bool
    grad_accum_fusion: bool
    attention_kernel: str


#: Behaviour keys (every field but ``name``), in declaration order.
BEHAVIOURS: tuple[str, ...] = tuple(f.name for f in fields(Semantics) if f.name != "name")

#: Allowed values of the behaviour keys that take a name.
CHOICES: dict[str, tuple[str, ...]] = {
    "model_params": ("bf16", "fp32"),
    "main_grad_dtype": ("fp32", "bf16", "fp16"),
    "grad_reduce_dtype": ("fp32", "bf16", "fp16"),
    "reshard_after_forward": ("default", "always", "never"),
    "grad_bucket_copy": ("none", "all", "bucket"),
    "selective_recompute": ("attention", "op"),
    "cross_entropy": ("fp32", "fused", "upcast"),
    "attention_kernel": ATTENTION_KERNELS,
}

# Repositories and commits read (github.com/<repo> at <commit>).
_MEGATRON = "NVIDIA/Megatron-LM@d98e8a64"
_NEMO = "NVIDIA/NeMo@8cfedd72"
_TITAN = "pytorch/torchtitan@b5bcd76c"
_DEEPSPEED = "deepspeedai/DeepSpeed@edaa7221"
_COMPOSER = "mosaicml/composer@64051888"
_FOUNDRY = "mosaicml/llm-foundry@8c8dd48f"
_TORCH_STAGE = "pytorch/pytorch@88fa1e71 torch/distributed/pipelining/stage.py"
_DDP_DOC = "PyTorch docs, torch.nn.parallel.DistributedDataParallel"
_NA = "not applicable: "

#: Published measurements of tensor-parallel communication overlap (speedups are step
#: throughput with overlap over without, same layout).
TP_OVERLAP_MEASUREMENTS: tuple[tuple[str, str], ...] = (
    ("torchtitan async TP, Llama3 70B, 256 H100, FSDP32 TP8, bf16: 597.3 -> 652.4 tok/s "
     "(1.09x)", f"{_TITAN} benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md"),
    ("torchtitan async TP, Llama3 8B, 64 H100, FSDP8 TP8, bf16: 4378 -> 4809.4 tok/s "
     "(1.10x)", f"{_TITAN} benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md"),
    ("Flux: up to 96% of TP communication overlapped; up to 1.24x training over "
     "Megatron-LM on 128 GPUs", "Chang et al., arXiv:2406.06858"),
    ("Domino: up to 1.3x over Megatron-LM, GPT-3/Llama-2 on DGX-H100",
     "Wang et al., arXiv:2409.15241"),
    ("overlapped compute runs 18.9% slower on average (max 40.0%) than alone; serial "
     "execution is 10.2% slower than overlapped (A100, H100, MI250, MI210)",
     "Lee et al., arXiv:2507.03114"),
    ("TE userbuffers, NeMo Llama3-70B H100 TP4 bf16: 24 and 16 of 132 SMs reserved for "
     "the pipelined reduce-scatters (set_sm_margin), 1-24 for the others",
     f"{_NEMO} nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py"),
)  # fmt: skip

# TE userbuffers (Megatron-Core, NeMo): of the 8 TP collectives of a layer, 4 ring-exchange
# all-gathers hide (tp-1)/tp = 7/8 at TP 8, 2 reduce-scatters pipelined in num_splits=4
# hide 3/4, 2 bulk overlaps run beside an independent wgrad GEMM (1.0): mean 0.875. The
# GEMMs lose the SMs the config gives communication: 78 SMs over its 10 entries, a mean
# of 7.8 of 132 = 0.059 (userbuffers.py, userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192).
_UB_HIDDEN, _UB_SLOWDOWN = 0.875, 0.059
# torchtitan async TP: matmuls decomposed into tp chunks (micro-pipelined all-gather-matmul
# and matmul-reduce-scatter over symmetric memory): (tp-1)/tp = 0.875 hidden at TP 8. The
# slowdown applies to the whole of every GEMM fused with a TP collective (smaller chunks,
# copy engines sharing HBM). It is what makes the measured 1.09x of the 70B layout: this
# project's step for it without overlap (main at 27c999c, analytical network) is 29.90 s
# with 5.90 s of exposed TP communication and 23.56 s of compute, of which the GEMMs next
# to TP collectives are ~0.7 (Llama3-70B at seq 8192: linear layers 87% of the FLOPs, at
# about twice the attention kernels' efficiency). 0.875 x 5.90 - s x 0.7 x 23.56 =
# 29.90 - 29.90 / 1.09 gives s = 0.16 (Lee et al. measured 18.9% mean, 40% max). Since
# torchtitan's step keeps the gathered inputs (no backward re-gathers, 2026-12-02) the same
# pair gives 594.7 -> 644.1 tokens/s (1.083x against the measured 1.09x), s kept.
_ATP_HIDDEN, _ATP_SLOWDOWN = 0.875, 0.16

# Every preset is this base with its own differences (docs/frameworks.md shows them all).
_BASE: dict[str, Any] = dict(
    model_params="fp32", main_grad_dtype="fp32", grad_reduce_dtype="fp32",
    fp32_grad_copy=False, default_zero=0, overlap_grad_reduce=(0, 1, 2, 3),
    grad_bucket_elements=None, grad_bucket_per_dp_rank=0.0,
    grad_bucket_first_chunk_only=False, reduce_per_model_chunk=False,
    grad_bucket_copy="none", autocast_cache=False, overlap_param_gather=False,
    allgather_bucket_elements=None, gathered_units=2, prefetch_elements=None,
    max_live_elements=None, max_reuse_elements=None, reshard_after_forward="default",
    pp_gather_once=False, tp_comm_overlap=False, tp_overlap_hidden=0.0,
    tp_overlap_slowdown=0.0, tp_async_backward=False, selective_recompute="attention",
    recompute_early_stop=False,
    tp_saves_gathered_input=False, cpu_checkpointing=False,
    deallocate_pipeline_outputs=True, recv_buffers_per_microbatch=False,
    cross_entropy="fp32", expandable_segments=False, grad_accum_fusion=False,
    attention_kernel="fitted",
)  # fmt: skip

_MEGATRON_DIFF: dict[str, Any] = dict(
    model_params="bf16", default_zero=1, grad_bucket_elements=40e6,
    grad_bucket_per_dp_rank=1e6, grad_bucket_first_chunk_only=True,
    reduce_per_model_chunk=True, overlap_param_gather=True, tp_comm_overlap=True,
    tp_overlap_hidden=_UB_HIDDEN, tp_overlap_slowdown=_UB_SLOWDOWN, tp_async_backward=True,
    grad_accum_fusion=True,
)  # fmt: skip

_DIFFS: dict[str, dict[str, Any]] = {
    "megatron-core": _MEGATRON_DIFF,
    "nemo": {**_MEGATRON_DIFF, "main_grad_dtype": "bf16", "grad_reduce_dtype": "bf16",
             "cross_entropy": "fused", "expandable_segments": True,
             "attention_kernel": "cudnn"},
    "torchtitan": dict(
        default_zero=3, pp_gather_once=True, tp_overlap_hidden=_ATP_HIDDEN,
        tp_overlap_slowdown=_ATP_SLOWDOWN, selective_recompute="op",
        tp_saves_gathered_input=True, deallocate_pipeline_outputs=False,
        recv_buffers_per_microbatch=True, cross_entropy="upcast", expandable_segments=True,
        attention_kernel="cudnn",
    ),
    "deepspeed": dict(
        model_params="bf16", main_grad_dtype="bf16", grad_reduce_dtype="bf16",
        fp32_grad_copy=True, overlap_grad_reduce=(3,), grad_bucket_elements=5e8,
        grad_bucket_copy="bucket", allgather_bucket_elements=5e8, gathered_units=1,
        prefetch_elements=5e7, max_live_elements=1e9, max_reuse_elements=1e9,
        reshard_after_forward="always", deallocate_pipeline_outputs=False,
    ),
    "fsdp": dict(default_zero=3, cross_entropy="fused", expandable_segments=True),
    "ddp": dict(grad_bucket_elements=25 * 2**20 / 4, grad_bucket_copy="all", autocast_cache=True),
}  # fmt: skip

PRESETS: dict[str, Semantics] = {
    name: Semantics(name, **{**_BASE, **diff}) for name, diff in _DIFFS.items()
}

#: Preset names, in table order.
FRAMEWORKS: tuple[str, ...] = tuple(PRESETS)


def _megatron_sources() -> dict[str, str]:
    args = f"{_MEGATRON} megatron/training/arguments.py"
    ddp = f"{_MEGATRON} megatron/core/distributed/distributed_data_parallel.py"
    bench = f"{_MEGATRON} README.md 'Performance Benchmarking' (benchmark configuration)"
    return {
        "model_params": f"{args}: --bf16 sets params_dtype bfloat16; fp32 main params in "
        "the optimizer (docs/user-guide/features/dist_optimizer.md)",
        "main_grad_dtype": f"{args}: with --bf16, accumulate_allreduce_grads_in_fp32 is "
        "set unless --grad-reduce-in-bf16",
        "grad_reduce_dtype": f"{args}: same flag (DistributedDataParallelConfig."
        "grad_reduce_in_fp32)",
        "fp32_grad_copy": f"{_MEGATRON} docs/user-guide/features/dist_optimizer.md: bf16 "
        "params + fp32 grads = 6 + 12/d bytes (main grads already fp32)",
        "default_zero": f"{bench}: --overlap-param-gather, which {args} accepts only with "
        "--use-distributed-optimizer (the flag itself defaults off)",
        "overlap_grad_reduce": f"{bench}: --overlap-grad-reduce (default off)",
        "grad_bucket_elements": f"{ddp}: bucket_size = max(40000000, 1000000 * dp_size) parameters",
        "grad_bucket_per_dp_rank": f"{ddp}: the 1000000 * dp_size term",
        "grad_bucket_first_chunk_only": f"{_MEGATRON} megatron/training/models/"
        f"dist_utils.py: disable_bucketing for model_chunk_idx > 0; {ddp}: and pp_rank > 0",
        "reduce_per_model_chunk": f"{_MEGATRON} megatron/training/models/dist_utils.py: one "
        "DistributedDataParallel (grad buffer) per model chunk",
        "grad_bucket_copy": f"{_MEGATRON} megatron/core/distributed/param_and_grad_buffer.py"
        ": param.main_grad is a view of the contiguous grad buffer",
        "autocast_cache": f"{args}: bf16 params, no autocast",
        "overlap_param_gather": f"{bench}: --overlap-param-gather (default off); the "
        "benchmark's code (NVIDIA/Megatron-LM@f2e5db40, 2024-07-15) dispatches the first "
        "bucket's all-gather in DistributedOptimizer.zero_grad(), the next in the forward "
        "pre-hook of the bucket before (megatron/core/optimizer/distrib_optimizer.py)",
        "allgather_bucket_elements": f"{ddp}: the param all-gather uses the grad buckets "
        "(one bucket for pp_rank > 0 and model chunks > 0)",
        "gathered_units": _NA + "Megatron-Core's distributed optimizer never shards weights",
        "prefetch_elements": _NA + "DeepSpeed ZeRO-3 only",
        "max_live_elements": _NA + "DeepSpeed ZeRO-3 only",
        "max_reuse_elements": _NA + "DeepSpeed ZeRO-3 only",
        "reshard_after_forward": _NA + "no parameter sharding",
        "pp_gather_once": _NA + "no parameter sharding",
        "tp_comm_overlap": f"{bench}: --tp-comm-overlap (TE userbuffers; default off)",
        "tp_overlap_hidden": "structural, from the userbuffers methods: "
        f"{_NEMO} nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py",
        "tp_overlap_slowdown": "SM share given to communication in "
        f"{_NEMO} nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py",
        "tp_async_backward": f"{_MEGATRON} megatron/core/tensor_parallel/layers.py "
        "LinearWithGradAccumulationAndAsyncCommunication.backward: all-gather (async_op=True) "
        "before grad_output.matmul(weight); all-reduce or reduce-scatter of grad_input "
        "(async_op=True) before the weight-gradient GEMM (in Megatron-LM since "
        "NVIDIA/Megatron-LM@cf7efd4f, 2021-08, with sequence parallelism since the merge "
        "of 2022-05-20, 9aad9203)",
        "recompute_early_stop": f"{_MEGATRON} megatron/core/tensor_parallel/random.py "
        "CheckpointFunction (reentrant): its backward runs the whole forward again",
        "selective_recompute": f"{args}: --recompute-granularity selective recomputes "
        "core attention (--recompute-modules core_attn); Korthikanti et al. 2022",
        "tp_saves_gathered_input": f"{_MEGATRON} megatron/core/tensor_parallel/layers.py "
        "LinearWithGradAccumulationAndAsyncCommunication: save_for_backward(input) "
        "before the all-gather, gathered again in backward",
        "cpu_checkpointing": _NA + "Megatron keeps checkpoints on the GPU",
        "deallocate_pipeline_outputs": f"{_MEGATRON} megatron/training/argument_utils.py: "
        "deallocate_pipeline_outputs = True; megatron/core/pipeline_parallel/schedules.py",
        "recv_buffers_per_microbatch": f"{_MEGATRON} megatron/core/pipeline_parallel/schedules.py: receive tensors "
        "allocated per communication step",
        "cross_entropy": f"{_MEGATRON} megatron/core/tensor_parallel/cross_entropy.py: "
        "logits .float(), exp in place, softmax saved (--cross-entropy-loss-fusion off)",
        "expandable_segments": f"{_MEGATRON} examples/gpt3/train_gpt3_175b_distributed.sh "
        "sets only CUDA_DEVICE_MAX_CONNECTIONS",
        "grad_accum_fusion": f"{args}: --no-gradient-accumulation-fusion (dest "
        "gradient_accumulation_fusion, on by default); megatron/core/extensions/"
        "transformer_engine.py: fuse_wgrad_accumulation=config.gradient_accumulation_fusion",
        "attention_kernel": "fitted: Transformer Engine chooses the backend at run time "
        "(FlashAttention-2 where installed until mid-2024, cuDNN's fused attention on Hopper "
        "since: NVIDIA/NeMo PR #9188) and the README's benchmark names neither its version "
        "nor the backend; its H100 table is validated with the fitted model (with cudnn "
        "+13%, with fa2 +10%: docs/frameworks.md)",
    }


def _nemo_sources() -> dict[str, str]:
    perf = f"{_NEMO} scripts/performance/helpers.py set_precision_configs"
    out = {k: f"Megatron-Core underneath: {v}" for k, v in _megatron_sources().items()}
    out.update({
        "main_grad_dtype": f"{perf}: grad_reduce_in_fp32 = False (the recipes' default "
        "True, nemo/lightning/pytorch/plugins/mixed_precision.py)",
        "grad_reduce_dtype": f"{perf}: grad_reduce_in_fp32 = False",
        "fp32_grad_copy": f"{perf}: use_precision_aware_optimizer = True (bf16 main grads "
        "read by TE FusedAdam)",
        "default_zero": f"{_NEMO} nemo/collections/llm/recipes/optim/adam.py: "
        "use_distributed_optimizer=True",
        "overlap_grad_reduce": f"{_NEMO} nemo/collections/llm/recipes/llama3_70b.py: "
        "overlap_grad_reduce=True",
        "overlap_param_gather": f"{_NEMO} nemo/collections/llm/recipes/llama3_70b.py: "
        "overlap_param_gather=True",
        "tp_comm_overlap": f"{_NEMO} nemo/collections/llm/recipes/llama3_70b.py "
        "pretrain_performance_optimizations: MegatronCommOverlapCallback(tp_comm_overlap=True)",
        "deallocate_pipeline_outputs": f"{_NEMO} nemo/collections/llm/gpt/model/base.py: "
        "GPTConfig.deallocate_pipeline_outputs = True",
        "cross_entropy": f"{_NEMO} nemo/collections/llm/gpt/model/base.py: "
        "GPTConfig.cross_entropy_loss_fusion = True",
        "expandable_segments": f"{_NEMO} scripts/performance/executors.py: "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
        "attention_kernel": f"{_NEMO} scripts/performance/executors.py: NVTE_FUSED_ATTN=1 "
        "('Enable cuDNN fused attention'; NVTE_FLASH_ATTN=0 in its first version, PR #11702, "
        "January 2025), and "
        "Transformer Engine prefers FusedAttention on Hopper when both are enabled",
    })  # fmt: skip
    return out


def _titan_sources() -> dict[str, str]:
    cfg = f"{_TITAN} torchtitan/config/configs.py"
    fsdp = f"{_TITAN} torchtitan/distributed/fsdp.py"
    return {
        "model_params": f"{cfg}: training.dtype float32, mixed_precision_param bfloat16 "
        "(fully_shard MixedPrecisionPolicy: fp32 sharded params, bf16 when gathered)",
        "main_grad_dtype": f"{cfg}: sharded gradients take the fp32 sharded params' dtype",
        "grad_reduce_dtype": f"{cfg}: mixed_precision_reduce float32",
        "fp32_grad_copy": "fp32 gradients already",
        "default_zero": f"{cfg}: data_parallel_shard_degree -1 (FSDP over the leftover ranks)",
        "overlap_grad_reduce": f"{fsdp}: FSDP2 reduce-scatters each block in its post-backward",
        "grad_bucket_elements": f"{fsdp}: one fully_shard unit per transformer block",
        "grad_bucket_per_dp_rank": _NA + "FSDP units",
        "grad_bucket_first_chunk_only": _NA + "FSDP units",
        "reduce_per_model_chunk": f"{_TORCH_STAGE}: with PP the reduce-scatter runs after "
        "the last backward (see pp_gather_once)",
        "grad_bucket_copy": _NA + "FSDP",
        "autocast_cache": _NA + "FSDP casts on gather",
        "overlap_param_gather": _NA + "ZeRO-3 gathers per layer before use",
        "allgather_bucket_elements": f"{fsdp}: per fully_shard unit",
        "gathered_units": f"{fsdp}: FSDP2 implicit prefetch of the next unit",
        "prefetch_elements": _NA + "DeepSpeed ZeRO-3 only",
        "max_live_elements": _NA + "DeepSpeed ZeRO-3 only",
        "max_reuse_elements": _NA + "DeepSpeed ZeRO-3 only",
        "reshard_after_forward": f"{fsdp} get_fsdp_reshard_after_forward_policy: "
        "'default' = not pp_enabled",
        "pp_gather_once": f"{fsdp} (no reshard after forward with PP); {_TORCH_STAGE} "
        "backward_maybe_with_nosync: set_reshard_after_backward(False), "
        "set_requires_gradient_sync(False) until the last backward",
        "tp_comm_overlap": f"{cfg}: enable_async_tensor_parallel = False",
        "tp_overlap_hidden": "(tp-1)/tp of the micro-pipelined matmuls at TP 8",
        "tp_overlap_slowdown": f"fitted to {_TITAN} benchmarks/asyncTP_llama3_h100_2025-06"
        "_torchtitan.md (70B bf16 1.09x); Lee et al. arXiv:2507.03114 bound it",
        "tp_async_backward": "PyTorch DTensor's ColwiseParallel backward runs its "
        "collectives in order on the default stream (async TP is tp_comm_overlap)",
        "recompute_early_stop": f"{_TITAN} torchtitan/distributed/activation_checkpoint.py: "
        "FullAC and SelectiveAC pass early_stop=False to ptd_checkpoint_wrapper (the AC "
        "config's early_stop defaults to False since 25413d22, Aug 2025). Before that "
        "(9dec370a, 5ecb74e5, e7c0cae: the published runs) the wrapper took PyTorch's "
        "default, which stops early (tests/test_titan_step.py counts it: w2 is never "
        "re-run), and calibrate/published_throughput.yaml's rows say so",
        "selective_recompute": f"{_TITAN} torchtitan/distributed/activation_checkpoint.py "
        "SelectiveAC (the trainer's default, torchtitan/trainer.py)",
        "tp_saves_gathered_input": "PyTorch DTensor ColwiseParallel(input_layouts=Shard(1)) all-gathers the input "
        "and aten.mm saves it (torchtitan/models/llama3/parallelize.py apply_tp)",
        "cpu_checkpointing": _NA + "checkpoints stay on the GPU",
        "deallocate_pipeline_outputs": f"{_TORCH_STAGE}: forward_one_chunk keeps outputs in "
        "fwd_cache until the backward",
        "recv_buffers_per_microbatch": f"{_TORCH_STAGE} _prepare_forward_infra / _prepare_backward_infra: one receive "
        "buffer per micro-batch",
        "cross_entropy": f"{_TITAN} torchtitan/components/loss.py: cross_entropy over pred.float()",
        "expandable_segments": f"{_TITAN} run_train.sh: PYTORCH_ALLOC_CONF="
        "expandable_segments:True",
        "grad_accum_fusion": "autograd AccumulateGrad; FSDP2 accumulates the sharded "
        "gradient after each reduce-scatter, the unsharded one under pipeline parallelism "
        "(set_requires_gradient_sync(False), see pp_gather_once)",
        "attention_kernel": f"{_TITAN} torchtitan/models/common/attention.py "
        "ScaledDotProductAttention: sdpa_backends CUDNN_ATTENTION first (since 6a3a9da9, "
        "Oct 2025). The published runs ran FlashAttention-2 and their rows say so: "
        "e7c0cae and 5ecb74e5 (June 2025) pin FLASH_ATTENTION first on Hopper (cuDNN first "
        "only on sm100, 3b85aa31); 9dec370a (Dec 2024) called SDPA unpinned, and PyTorch's "
        "order has put flash first since pytorch/pytorch PR 138522 (2.5.1: cuDNN opt-in)",
    }


def _deepspeed_sources() -> dict[str, str]:
    zcfg = f"{_DEEPSPEED} deepspeed/runtime/zero/config.py"
    eng = f"{_DEEPSPEED} deepspeed/runtime/engine.py"
    return {
        "model_params": f"{eng}: bf16 module with fp32 partitions in the ZeRO optimizer",
        "main_grad_dtype": f"{eng} get_data_types: grad_accum_dtype defaults to the model dtype",
        "grad_reduce_dtype": f"{eng} communication_data_type: bf16 when bf16 is enabled",
        "fp32_grad_copy": f"{_DEEPSPEED} deepspeed/runtime/zero/stage_1_and_2.py: the "
        "gradient partition is flattened to the fp32 partition's dtype for the step",
        "default_zero": f"{zcfg}: stage = 0",
        "overlap_grad_reduce": f"{zcfg} overlap_comm_valid: overlap_comm defaults to stage == 3",
        "grad_bucket_elements": f"{zcfg}: reduce_bucket_size = 5e8",
        "grad_bucket_per_dp_rank": _NA + "fixed bucket",
        "grad_bucket_first_chunk_only": _NA + "one bucket size",
        "reduce_per_model_chunk": _NA + "no interleaved schedule",
        "grad_bucket_copy": f"{zcfg}: contiguous_gradients = True (copied into one buffer)",
        "autocast_cache": _NA + "bf16 module",
        "overlap_param_gather": f"{zcfg}: ZeRO-1/2 all-gather after the step "
        "(allgather_partitions)",
        "allgather_bucket_elements": f"{zcfg}: allgather_bucket_size = 5e8",
        "gathered_units": f"{zcfg}: the running unit; prefetch in elements below",
        "prefetch_elements": f"{zcfg}: stage3_prefetch_bucket_size = 5e7",
        "max_live_elements": f"{zcfg}: stage3_max_live_parameters = 1e9",
        "max_reuse_elements": f"{zcfg}: stage3_max_reuse_distance = 1e9",
        "reshard_after_forward": f"{zcfg}: parameters released after use unless reused "
        "within max_reuse_distance",
        "pp_gather_once": _NA + "ZeRO-3 does not combine with DeepSpeed's pipeline engine",
        "tp_comm_overlap": f"{_DEEPSPEED} docs/_pages/config-json.md: tp_overlap_comm false",
        "tp_overlap_hidden": "no TP overlap: tp_overlap_comm is false",
        "tp_overlap_slowdown": "no TP overlap: tp_overlap_comm is false",
        "tp_async_backward": "no TP overlap: tp_overlap_comm is false",
        "selective_recompute": _NA + "DeepSpeed checkpoints whole layers",
        "recompute_early_stop": f"{_DEEPSPEED} deepspeed/runtime/activation_checkpointing/"
        "checkpointing.py CheckpointFunction (reentrant): the whole forward again",
        "tp_saves_gathered_input": _NA + "no sequence parallelism",
        "cpu_checkpointing": f"{_DEEPSPEED} docs/_pages/config-json.md: "
        "activation_checkpointing.cpu_checkpointing false",
        "deallocate_pipeline_outputs": f"{_DEEPSPEED} deepspeed/runtime/pipe/engine.py: "
        "pipe_buffers['outputs'] kept until the backward",
        "recv_buffers_per_microbatch": f"{_DEEPSPEED} deepspeed/runtime/pipe/engine.py: num_pipe_buffers = in-flight "
        "micro-batches",
        "cross_entropy": "the user's model: eager fp32 assumed",
        "expandable_segments": "not set by the deepspeed launcher (deepspeed/launcher/runner.py)",
        "grad_accum_fusion": "autograd AccumulateGrad into param.grad between reductions "
        f"({_DEEPSPEED} deepspeed/runtime/engine.py is_gradient_accumulation_boundary)",
        "attention_kernel": "fitted: the user's model chooses its attention",
    }


def _fsdp_sources() -> dict[str, str]:
    par = f"{_COMPOSER} composer/utils/parallelism.py"
    mp = f"{_COMPOSER} composer/distributed/mosaic_parallelism.py get_mixed_precision"
    return {
        "model_params": f"{mp}: 'DEFAULT' param_dtype bf16 over fp32 flat parameters",
        "main_grad_dtype": "PyTorch FSDP casts the reduced shard back to the fp32 flat "
        "parameter's dtype",
        "grad_reduce_dtype": f"{mp}: 'DEFAULT' reduce_dtype float32 ('PURE': bf16)",
        "fp32_grad_copy": "fp32 gradients already",
        "default_zero": f"{par}: sharding_strategy = 'FULL_SHARD'",
        "overlap_grad_reduce": "PyTorch FSDP reduce-scatters in the post-backward hook",
        "grad_bucket_elements": f"{_FOUNDRY} llmfoundry/models/mpt/modeling_mpt.py: "
        "fsdp_wrap_fn wraps each block",
        "grad_bucket_per_dp_rank": _NA + "FSDP units",
        "grad_bucket_first_chunk_only": _NA + "FSDP units",
        "reduce_per_model_chunk": _NA + "no pipeline",
        "grad_bucket_copy": _NA + "FSDP",
        "autocast_cache": _NA + "FSDP casts on gather",
        "overlap_param_gather": _NA + "ZeRO-3 gathers per layer before use",
        "allgather_bucket_elements": "per FSDP unit",
        "gathered_units": f"{par}: limit_all_gathers = True (two all-gathers in flight)",
        "prefetch_elements": _NA + "DeepSpeed ZeRO-3 only",
        "max_live_elements": _NA + "DeepSpeed ZeRO-3 only",
        "max_reuse_elements": _NA + "DeepSpeed ZeRO-3 only",
        "reshard_after_forward": "FULL_SHARD reshards after forward, SHARD_GRAD_OP not",
        "pp_gather_once": _NA + "no pipeline",
        "tp_comm_overlap": _NA + "no tensor parallelism",
        "tp_overlap_hidden": "no TP overlap: no tensor parallelism",
        "tp_overlap_slowdown": "no TP overlap: no tensor parallelism",
        "tp_async_backward": _NA + "no tensor parallelism",
        "selective_recompute": f"{par}: activation_checkpointing wraps whole blocks",
        "recompute_early_stop": f"{par}: FSDPConfig.activation_checkpointing_reentrant = "
        "True (the whole block again). llm-foundry's benchmark launcher sets it False "
        "(scripts/train/benchmarking/submit_benchmarks.py), but PyTorch's non-reentrant "
        "checkpoint stops early only from 2.1 and the tables name no version: kept False, "
        "since those tables are the H100 and A100 fitting data (a change needs a refit)",
        "tp_saves_gathered_input": _NA + "no tensor parallelism",
        "cpu_checkpointing": f"{_COMPOSER} composer/utils/parallelism.py: activation_cpu_offload = False",
        "deallocate_pipeline_outputs": _NA + "no pipeline",
        "recv_buffers_per_microbatch": _NA + "no pipeline",
        "cross_entropy": f"{_FOUNDRY} scripts/train/yamls/pretrain: loss_fn fused_crossentropy",
        "expandable_segments": f"{_FOUNDRY} llmfoundry/utils/config_utils.py: "
        "expandable_segments = True (since 2024-04; earlier train.py set only "
        "max_split_size_mb)",
        "grad_accum_fusion": "PyTorch FSDP adds each reduce-scattered shard into the "
        "sharded gradient (_accumulate_sharded_grad): 1/d of the parameters, not counted",
        "attention_kernel": "fitted: the user's model chooses its attention (llm-foundry's MPT rows name fa_triton)",
    }


def _ddp_sources() -> dict[str, str]:
    return {
        "model_params": "torch.autocast: fp32 parameters, bf16 casts",
        "main_grad_dtype": "fp32 .grad of fp32 parameters",
        "grad_reduce_dtype": f"{_DDP_DOC}: buckets hold the gradients' dtype",
        "fp32_grad_copy": "fp32 gradients already",
        "default_zero": "DDP replicates every parameter, gradient and optimizer state",
        "overlap_grad_reduce": f"{_DDP_DOC}: buckets all-reduced from autograd hooks",
        "grad_bucket_elements": f"{_DDP_DOC}: bucket_cap_mb = 25",
        "grad_bucket_per_dp_rank": _NA + "fixed bucket",
        "grad_bucket_first_chunk_only": _NA + "fixed bucket",
        "reduce_per_model_chunk": _NA + "no pipeline",
        "grad_bucket_copy": f"{_DDP_DOC}: gradient_as_bucket_view = False (saves 'the total "
        "gradients size' when True)",
        "autocast_cache": "torch.autocast caches casts of leaf weights (cache_enabled=True)",
        "overlap_param_gather": _NA + "replicated",
        "allgather_bucket_elements": _NA + "replicated",
        "gathered_units": _NA + "replicated",
        "prefetch_elements": _NA + "DeepSpeed ZeRO-3 only",
        "max_live_elements": _NA + "DeepSpeed ZeRO-3 only",
        "max_reuse_elements": _NA + "DeepSpeed ZeRO-3 only",
        "reshard_after_forward": _NA + "replicated",
        "pp_gather_once": _NA + "replicated",
        "tp_comm_overlap": _NA + "no tensor parallelism",
        "tp_overlap_hidden": "no TP overlap: no tensor parallelism",
        "tp_overlap_slowdown": "no TP overlap: no tensor parallelism",
        "tp_async_backward": _NA + "no tensor parallelism",
        "selective_recompute": _NA + "torch.utils.checkpoint wraps what the user chooses",
        "recompute_early_stop": "torch.utils.checkpoint's use_reentrant=True, its default "
        "until PyTorch asked callers to choose (2.4): the whole function again",
        "tp_saves_gathered_input": _NA + "no tensor parallelism",
        "cpu_checkpointing": _NA + "checkpoints stay on the GPU",
        "deallocate_pipeline_outputs": _NA + "no pipeline",
        "recv_buffers_per_microbatch": _NA + "no pipeline",
        "cross_entropy": "eager fp32 under autocast",
        "expandable_segments": "not set by torchrun or DDP",
        "grad_accum_fusion": f"{_DDP_DOC}: no_sync() accumulates gradients in param.grad "
        "(autograd AccumulateGrad) until the synchronising backward",
        "attention_kernel": "fitted: the user's model chooses its attention",
    }


#: preset -> behaviour -> where its value comes from.
SOURCES: dict[str, dict[str, str]] = {
    "megatron-core": _megatron_sources(),
    "nemo": _nemo_sources(),
    "torchtitan": _titan_sources(),
    "deepspeed": _deepspeed_sources(),
    "fsdp": _fsdp_sources(),
    "ddp": _ddp_sources(),
}


def overlaps_grad_reduce(sem: Semantics, zero: int) -> bool:
    """Whether ``sem`` overlaps the gradient reduction with the backward at ZeRO ``zero``.

    >>> overlaps_grad_reduce(PRESETS["deepspeed"], 2), overlaps_grad_reduce(PRESETS["deepspeed"], 3)
    (False, True)
    """
    return zero in sem.overlap_grad_reduce


def grad_bucket_bytes(sem: Semantics, dp: int) -> float | None:
    """Bytes of one gradient reduction bucket on a DP group of ``dp`` ranks (None: one
    bucket per FSDP unit), in the reduction dtype."""
    if sem.grad_bucket_elements is None:
        return None
    elements = max(sem.grad_bucket_elements, sem.grad_bucket_per_dp_rank * dp)
    return float(elements * DTYPE_BYTES[sem.grad_reduce_dtype])


def _cell(value: object) -> str:
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value) or "none"
    if isinstance(value, float) and value >= 1e4:
        return f"{value:.3g}"
    return (
        "none" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    )


def semantics_table() -> str:
    """The behaviour x framework table of ``docs/frameworks.md``: each preset's value and,
    beneath the table, the source of every value (Markdown).

    >>> semantics_table().splitlines()[0].startswith("| behaviour | megatron-core")
    True
    """
    head = "| behaviour | " + " | ".join(FRAMEWORKS) + " |"
    rule = "|---" * (len(FRAMEWORKS) + 1) + "|"
    rows = [
        f"| `{key}` | " + " | ".join(_cell(getattr(PRESETS[f], key)) for f in FRAMEWORKS) + " |"
        for key in BEHAVIOURS
    ]
    notes = []
    for f in FRAMEWORKS:
        notes += ["", f"### {f}", ""]
        notes += [f"- `{key}`: {SOURCES[f][key]}" for key in BEHAVIOURS]
    return "\n".join([head, rule, *rows, *notes]) + "\n"
