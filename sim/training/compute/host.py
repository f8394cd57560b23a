"""The host's side of an eager training step: a GPU cannot run a kernel before the host
has launched it.

An eager framework (PyTorch without CUDA graphs or a compiler) launches every kernel from
the host: the Python call, the dispatcher, recording (forward) or walking (backward) the
autograd graph, then the CUDA launch. The host runs ahead of the GPU, queuing kernels, as
long as it launches them faster than they run; a network of many small kernels
(Inception V3's ~100 convolutions, each with its batch norm and ReLU, at 8x8 and 17x17)
is the other case, and the GPU waits for the host. With ``d`` host seconds per kernel
(``host_dispatch_s``), ops in launch order, op ``i`` taking ``g_i`` seconds on the GPU
and launching ``k_i`` kernels, op ``i`` finishes at

    ``G_i = max(G_{i-1} + g_i, d * (k_1 + ... + k_i))``

(the GPU's own time, or when the host has launched the op's last kernel, whose run time is
neglected beside the launches). ``d = 0`` gives the GPU's times back. The launch queue is
taken as deep enough never to stop the host (CUDA's holds about a thousand launches).

>>> host_bound_s([1.0, 1.0], [1, 1], 0.0)
[1.0, 1.0]
>>> [round(t, 3) for t in host_bound_s([1.0, 0.1, 0.1], [1, 30, 10], 0.05)]
[1.0, 0.55, 0.5]
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["host_bound_s"]


def host_bound_s(gpu_s: Sequence[float], kernels: Sequence[int], dispatch_s: float) -> list[float]:
    """Seconds each op takes when the host launches ``kernels[i]`` kernels for op ``i`` at
    ``dispatch_s`` seconds each and the GPU runs it in ``gpu_s[i]`` (see the module
    docstring); the ops run back to back in the order given."""
    if dispatch_s <= 0:
        return [float(g) for g in gpu_s]
    out = []
    done = launched = 0.0
    for g, k in zip(gpu_s, kernels, strict=True):
        launched += k * dispatch_s
        if done + g >= launched:  # the GPU binds: its time exactly (no rounding of end - done)
            out.append(float(g))
            done += g
        else:
            out.append(launched - done)
            done = launched
    return out
