"""What a training step costs beyond its kernels' work: autograd dispatch and the optimizer.

Eager PyTorch pays per operator: the Python call, the dispatcher, recording the autograd
graph, running its backward node and accumulating the gradient. On a GPU most of that
hides behind queued kernels; on a CPU it adds to every kernel. And ``torch.optim.AdamW``
(the default, non-fused one) steps a CPU model tensor by tensor, a handful of kernels each.
Micro-benchmarks of what the simulator charges per kernel and per optimizer step:

- ``dispatch``: a tiny ``Linear`` forward and backward through autograd (the simulator's
  forward GEMM, input-gradient and weight-gradient kernels: ``shape = (3,)`` kernels), and
  a tiny LayerNorm then GELU forward and backward (``shape = (4,)``); the work on 4×8
  tensors is negligible, so ``time_s / shape[0]`` is the overhead per simulated kernel;
- ``optimizer``: one ``AdamW.step`` over ``shape = (tensors, elements)`` fp32 parameters
  with gradients: many tiny tensors (mostly the per-tensor overhead) and a million
  parameters in 16 tensors (mostly the time per parameter); ``bytes`` is the least
  traffic of an fp32 AdamW step (read weight, gradient, both moments; write weight and
  moments: 28 bytes per parameter).

``calibrate.fit_compute`` turns them into ``launch_overhead_s``,
``optimizer_tensor_overhead_s`` and ``stream_eff``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["ADAMW_MIN_BYTES", "add_dispatch", "add_optimizer"]

#: fp32 AdamW's least traffic per parameter: read w, g, m, v (16), write w, m, v (12).
ADAMW_MIN_BYTES = 28


def add_dispatch(b: Any) -> None:
    """Tiny forward + backward through autograd; ``shape[0]``: kernels the simulator counts.

    ``b`` is ``calibrate.compute._Bench``.
    """
    torch = b.torch
    with torch.enable_grad():
        lin = torch.nn.Linear(8, 8).to(b.device)
        norm = torch.nn.LayerNorm(8).to(b.device)
        x = b.tensor(4, 8)
        ones = torch.ones(4, 8, device=b.device)

        def linear() -> None:
            lin(x).backward(ones)

        def norm_gelu() -> None:
            torch.nn.functional.gelu(norm(x)).backward(ones)

        cases: list[tuple[int, Callable[[], None]]] = [(3, linear), (4, norm_gelu)]
        for kernels, fn in cases:
            _add_repeated(b, "dispatch", (kernels,), fn)


def _add_repeated(b: Any, op: str, shape: tuple[int, ...], fn: Callable[[], None]) -> None:
    """``fn`` timed ``loop`` times per call (calls of a few microseconds need many)."""
    loop = 20 if b.quick else 50

    def many() -> None:
        for _ in range(loop):
            fn()

    b.add(op, shape, "float32", 0.0, 0.0, many, per_call=loop)


def add_optimizer(b: Any) -> None:
    """``AdamW.step`` over many tiny tensors and over one large one (fp32, gradients set)."""
    torch = b.torch
    # many tiny tensors; then a million parameters (2**26 on a GPU) in tensors the size of
    # a small model's (a CPU's caches hold a 256 KiB tensor's weight and moments)
    many = (16, 2**16) if b.device == "cpu" else (4, 2**24)
    for tensors, elements in ((64, 16), many):
        params = [torch.nn.Parameter(b.tensor(elements)) for _ in range(tensors)]
        for p in params:
            p.grad = b.tensor(elements)
        opt = torch.optim.AdamW(params, lr=1e-4)
        n = tensors * elements
        b.add("optimizer", (tensors, elements), "float32", 0.0,
              float(ADAMW_MIN_BYTES * n), opt.step)  # fmt: skip
