"""What a GPU offers a training process, and what the allocator and libraries keep.

Measured on an H100 80GB HBM3 by ``calibrate/memory_probe.py``
(``calibrate/memory_probe_h100.yaml``) unless said otherwise:

- **Capacity.** A process sees ``cudaMemGetInfo``'s total: 85,017,493,504 bytes
  (79.18 GiB) on the H100 80 GB, 480 MiB under NVML's 81,559 MiB. NVML totals of other
  parts (Modal's nvidia-smi table, thundergolfer.com/blog/nvidia-gpu-memory-capacity:
  A100 80 GB 81,920 MiB, A100 40 GB 40,960 MiB, H200 143,771 MiB) less the same 480 MiB
  (assumed). :func:`device_memory_bytes`.
- **Outside the allocator.** The CUDA context (0.65 GB) and NCCL's buffers are not
  PyTorch's caching allocator's, so a framework's "reserved" reading leaves them out:
  1.24 GB after NCCL ran one all-reduce (NVIDIA/nccl issue 1685 reports 1.06 GB on an
  8 x H100 node with an older NCCL). :data:`OUTSIDE_ALLOCATOR_BYTES`.
- **cuBLAS workspaces** come from the caching allocator: 32 MiB per handle
  (``CUBLAS_WORKSPACE_CONFIG=:4096:8``), two assumed: :data:`CUBLAS_BYTES`.
- **Fragmentation at the capacity** (what ``fits`` needs): with expandable segments a
  step ran with 97.9% of the usable memory allocated and the next batch size did not
  fit (:data:`LIMIT_FRAGMENTATION`, 0.02 of the allocator's memory). Without them the
  step's largest transient allocation had to find free space a second time: the probe
  ran with 62.9 GiB allocated and a 12.7 GiB fp32 logits tensor in 78.6 GiB, and ran
  out with 67.6 GiB and a 13.7 GiB tensor, so ``fits`` adds that largest allocation.
- **Reserved on a roomy device** (what ``torch.cuda.max_memory_reserved`` reads when
  nothing presses): the allocator keeps freed blocks cached. :data:`ROOMY_UNUSED`: 8.75%
  of reserved memory unused with expandable segments (the probe's three recomputation
  policies: 11.4%, 8.9%, 5.9%), 16.8% without (GMLake measured 15% on average over eight
  LLM jobs on A100 80 GB, up to 33%: Guo et al., ASPLOS 2024, arXiv:2401.08156).
"""

from __future__ import annotations

from sim.workload.frameworks import Semantics

__all__ = [
    "CUBLAS_BYTES",
    "DEVICE_MIB",
    "LIMIT_FRAGMENTATION",
    "OUTSIDE_ALLOCATOR_BYTES",
    "ROOMY_UNUSED",
    "device_memory_bytes",
    "limit_fragmentation_bytes",
    "reserved_when_roomy",
]

MIB = 2**20

#: cudaMemGetInfo total of the H100 80GB HBM3, bytes (the probe).
H100_TOTAL_BYTES = 85017493504
#: NVML total minus cudaMemGetInfo total on that H100, bytes (480 MiB).
DRIVER_RESERVED_BYTES = 81559 * MIB - H100_TOTAL_BYTES

#: NVML capacity (nvidia-smi "Total") of catalog GPUs, MiB (Modal's table, module doc).
DEVICE_MIB: dict[str, int] = {
    "H100-SXM": 81559,
    "A100-SXM-80GB": 81920,
    "A100-SXM-40GB": 40960,
    "H200": 143771,
}

#: CUDA context and NCCL buffers per process, bytes (the probe, after NCCL's first
#: all-reduce).
OUTSIDE_ALLOCATOR_BYTES = 1.24e9

#: cuBLAS workspaces inside the caching allocator, bytes (2 handles x 32 MiB; assumed).
CUBLAS_BYTES = 2 * 32 * MIB

#: With expandable segments: fraction of the allocator's memory lost at the capacity.
LIMIT_FRAGMENTATION = 0.02

#: Fraction of reserved memory unused at the peak on a device with room to spare, by
#: ``expandable_segments`` (module doc).
ROOMY_UNUSED: dict[bool, float] = {True: 0.0875, False: 0.168}


def device_memory_bytes(gpu_name: str, datasheet_bytes: float) -> float:
    """Memory a process can use on ``gpu_name``, bytes: cudaMemGetInfo's total (measured
    on the H100; NVML's total less the H100's driver reservation for the other catalog
    parts); the datasheet value for parts without a published reading.

    >>> device_memory_bytes("H100-SXM", 80e9) / 2**30
    79.1787109375
    >>> device_memory_bytes("L40S", 48e9)
    48000000000.0
    """
    mib = DEVICE_MIB.get(gpu_name)
    if mib is None:
        return float(datasheet_bytes)
    return float(mib * MIB - DRIVER_RESERVED_BYTES)


def limit_fragmentation_bytes(sem: Semantics, allocated: float, largest: float) -> float:
    """What the allocator loses at the capacity, bytes: ``LIMIT_FRAGMENTATION`` of its
    ``allocated`` memory with expandable segments, else room for the ``largest``
    transient allocation a second time."""
    return LIMIT_FRAGMENTATION * allocated if sem.expandable_segments else largest


def reserved_when_roomy(sem: Semantics, allocated: float) -> float:
    """What ``torch.cuda.max_memory_reserved`` reads at ``allocated`` bytes allocated on a
    device with room to spare, bytes."""
    return allocated / (1 - ROOMY_UNUSED[sem.expandable_segments])
