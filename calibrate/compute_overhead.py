"""What a training step costs beyond its kernels' work: autograd dispatch and the optimizer.

Eager PyTorch pays per operator: the Python call, the dispatcher, recording the autograd
graph, running its backward node and accumulating the gradient. On a GPU most of that
hides behind queued kernels; on a CPU it adds to every kernel. And ``torch.optim.AdamW``
(the default, non-fused one) steps a CPU model tensor by tensor, a handful of kernels each.
Micro-benchmarks of what the simulator charges per kernel and per optimizer step:

- ``dispatch``: tiny forwards and backwards through autograd, each as many kernels as the
  simulator counts for it (``shape = (kernels,)``): a ``Linear`` (forward GEMM, input and
  weight gradients: 3), a LayerNorm then GELU (4), a residual add (2), causal SDPA (2)
  and a cross-entropy (2); the work on tensors of a few dozen values is negligible, so
  ``time_s / shape[0]`` is the overhead per simulated kernel (the fit takes the median
  over the five, a steadier figure than any one);
- ``optimizer``: one ``AdamW.step`` over ``shape = (tensors, elements)`` fp32 parameters
  with gradients: many tiny tensors (mostly the per-tensor overhead), mid-sized ones, and
  a million parameters in 16 tensors (mostly the time per parameter); ``bytes`` is the
  least traffic of an fp32 AdamW step (read weight, gradient, both moments; write weight
  and moments: 28 bytes per parameter).

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
    """Tiny forwards + backwards through autograd; ``shape[0]``: kernels the simulator
    counts for each.

    ``b`` is ``calibrate.compute._Bench``.
    """
    torch = b.torch
    fn = torch.nn.functional
    with torch.enable_grad():
        lin = torch.nn.Linear(8, 8).to(b.device)
        norm = torch.nn.LayerNorm(8).to(b.device)
        x = b.tensor(4, 8).requires_grad_()
        y = b.tensor(4, 8).requires_grad_()
        q = b.tensor(1, 1, 4, 8).requires_grad_()
        target = torch.zeros(4, dtype=torch.long, device=b.device)
        ones = torch.ones(4, 8, device=b.device)
        ones_q = torch.ones(1, 1, 4, 8, device=b.device)

        def linear() -> None:
            lin(x).backward(ones)

        def norm_gelu() -> None:
            fn.gelu(norm(x)).backward(ones)

        def residual() -> None:
            (x + y).backward(ones)

        def attention() -> None:
            fn.scaled_dot_product_attention(q, q, q, is_causal=True).backward(ones_q)

        def cross_entropy() -> None:
            fn.cross_entropy(x, target).backward()

        cases: list[tuple[int, Callable[[], None]]] = [
            (3, linear), (4, norm_gelu), (2, residual), (2, attention), (2, cross_entropy),
        ]  # fmt: skip
        for kernels, case in cases:
            _add_repeated(b, "dispatch", (kernels,), case)


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
    for tensors, elements in ((64, 16), (32, 2**12), many):
        params = [torch.nn.Parameter(b.tensor(elements)) for _ in range(tensors)]
        for p in params:
            p.grad = b.tensor(elements)
        opt = torch.optim.AdamW(params, lr=1e-4)
        n = tensors * elements
        b.add("optimizer", (tensors, elements), "float32", 0.0,
              float(ADAMW_MIN_BYTES * n), opt.step)  # fmt: skip
