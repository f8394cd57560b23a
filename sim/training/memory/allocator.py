"""What a GPU offers a training process, and what the allocator and libraries keep.

- **Capacity.** NVIDIA sells "80 GB" parts whose NVML capacity is 80 GiB or more: an
  H100 80 GB reports 81,559 MiB, an A100 80 GB 81,920 MiB, an A100 40 GB 40,960 MiB, an
  H200 143,771 MiB (nvidia-smi on each, tabulated by Modal: "Why does an NVIDIA H100 80GB
  card offer 85.52 GB?", thundergolfer.com/blog/nvidia-gpu-memory-capacity).
  :func:`device_memory_bytes` gives that capacity for the catalog's parts and the
  datasheet figure for the others.
- **Outside the allocator.** The CUDA context and NCCL's communicator buffers are
  allocated by CUDA and NCCL, not by PyTorch's caching allocator, so a framework's
  "reserved" reading does not include them: 1.06 GB per process on an 8 x H100 node
  with NCCL initialised, measured excluding PyTorch (NVIDIA/nccl issue 1685, before its
  first all-to-all; all-to-all's 32 channels per peer raise it to 4.34 GB).
  :data:`OUTSIDE_ALLOCATOR_BYTES`.
- **cuBLAS workspaces** come from the caching allocator: 32 MiB per handle
  (``CUBLAS_WORKSPACE_CONFIG=:4096:8``, PyTorch's default on Hopper), one for the compute
  stream and one for a communication-overlap stream: :data:`CUBLAS_BYTES` (assumed two).
- **Fragmentation.** The caching allocator reserves more than the live tensors need:
  GMLake measured 15% of reserved memory unused on average (up to 33%) over eight LLM
  training jobs on A100 80 GB (Guo et al., ASPLOS 2024, arXiv:2401.08156); STWeaver
  reports up to 43% (arXiv:2507.16274). ``expandable_segments`` maps memory in 2 MiB
  pages into growing segments instead of splitting fixed blocks, which is what both
  papers' remedies do: :data:`FRAGMENTATION` gives the reserved-but-unused fraction per
  allocator setting (see there for which number is bounded by runs that fit and which
  is assumed).
"""

from __future__ import annotations

from sim.training.workload.frameworks import Semantics

__all__ = [
    "CUBLAS_BYTES",
    "DEVICE_MIB",
    "FRAGMENTATION",
    "OUTSIDE_ALLOCATOR_BYTES",
    "device_memory_bytes",
    "fragmentation",
]

MIB = 2**20

#: NVML capacity (nvidia-smi "Total") of catalog GPUs, MiB (Modal's table, module doc).
DEVICE_MIB: dict[str, int] = {
    "H100-SXM": 81559,
    "A100-SXM-80GB": 81920,
    "A100-SXM-40GB": 40960,
    "H200": 143771,
}

#: CUDA context and NCCL buffers per process, bytes (NVIDIA/nccl issue 1685, H100).
OUTSIDE_ALLOCATOR_BYTES = 1.06e9

#: cuBLAS workspaces inside the caching allocator, bytes (2 handles x 32 MiB; assumed).
CUBLAS_BYTES = 2 * 32 * MIB

#: Reserved-but-unused fraction of the allocator's memory at the peak, by
#: ``expandable_segments``. False: 0.10, just under 0.105, the largest fraction under which
#: every llm-foundry MPT run of the shared H100 and A100 tables still fits (the tightest:
#: MPT-30B, seq 8192, 8 H100, 70.4 GiB allocated; ``benchmarks/validate_memory.py``): an
#: upper bound fitted to runs that did fit. GMLake's 15% mean (module doc) is read on
#: devices with room to spare, where the allocator keeps freed blocks cached; near the
#: capacity it releases them and retries (``num_alloc_retries``) before failing.
#: True: 0.05, an assumption (no published measurement found): expandable segments remove
#: the block splitting GMLake measures, keeping 2 MiB page rounding and the caching of
#: transient peaks; with it torchtitan's 20 published readings (which use them) come out
#: 3.6% low on average, 5.2% mean |error| (``benchmarks/validate_memory.py``).
FRAGMENTATION: dict[bool, float] = {False: 0.10, True: 0.05}


def device_memory_bytes(gpu_name: str, datasheet_bytes: float) -> float:
    """Capacity a process sees on ``gpu_name`` (NVML), bytes; the datasheet value for
    parts without a published NVML reading.

    >>> device_memory_bytes("H100-SXM", 80e9) / 2**30
    79.6474609375
    >>> device_memory_bytes("L40S", 48e9)
    48000000000.0
    """
    mib = DEVICE_MIB.get(gpu_name)
    return float(mib * MIB) if mib is not None else float(datasheet_bytes)


def fragmentation(sem: Semantics) -> float:
    """Reserved-but-unused fraction of the allocator's memory under ``sem``."""
    return FRAGMENTATION[sem.expandable_segments]
