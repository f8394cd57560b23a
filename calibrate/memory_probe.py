"""Measure on one GPU what the memory model assumes: the capacity a process sees, the
memory outside PyTorch's allocator, a Llama-like step's activation peak under each
recomputation policy, the eager fp32-upcast cross-entropy's bytes per logit, reserved
against allocated with and without expandable segments, and how close to the capacity
each allocator setting lets a step come before it runs out of memory.

Run on a GPU: ``python -m calibrate.memory_probe --out probe.json`` (a few minutes on an
H100). Every measurement runs in a fresh process (the allocator setting is read once, at
CUDA start). The step: :data:`SHAPE`, a stack of bf16 blocks (RMSNorm, multi-head
attention through ``scaled_dot_product_attention`` with a causal mask, SwiGLU, no
rotary), its gradients preallocated so that the peak above the baseline is activations,
the loss and transients; cross-entropy over ``logits.float()`` with the logits deleted
before the backward, as torchtitan does. Recomputation policies: ``none``, ``full``
(every block checkpointed) and ``op`` (per-op selective: the outputs of every other
matmul of a block and of the flash-attention kernel are saved, the rest recomputed).

``calibrate/memory_probe_h100.yaml`` holds a run on an H100 80GB HBM3 (made with a
minified copy of this code, through the project's device tool) and
``tests/test_memory_probe.py`` holds the memory model to it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import Counter
from typing import Any

#: (layers, hidden, ffn, heads, vocab, seq, batch) of the probed step.
SHAPE = {"layers": 8, "hidden": 2048, "ffn": 5632, "heads": 16, "vocab": 32000, "seq": 4096,
         "batch": 4}  # fmt: skip
#: Batches tried against the capacity (seq 4096, ``op`` policy).
PRESSURE_BATCHES = (26, 28, 30, 31, 32, 33, 34, 36)


def _model(torch: Any, ac: str) -> Any:
    from torch.utils.checkpoint import (
        CheckpointPolicy,
        checkpoint,
        create_selective_checkpoint_contexts,
    )

    nn, fn, s = torch.nn, torch.nn.functional, SHAPE
    h, heads = s["hidden"], s["heads"]
    mm = torch.ops.aten.mm.default
    saved = (mm, torch.ops.aten._scaled_dot_product_flash_attention.default)

    def context() -> Any:
        count: Counter[bool] = Counter()

        def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
            if func == mm:
                count[ctx.is_recompute] += 1
            odd = not (func == mm and count[ctx.is_recompute] % 2 == 0)
            keep = func in saved and odd
            return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

        return create_selective_checkpoint_contexts(policy)

    def linear(i: int, o: int) -> Any:
        return nn.Linear(i, o, bias=False)

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.k, self.v, self.o = (linear(h, h) for _ in range(4))
            self.w1, self.w3, self.w2 = (
                linear(h, s["ffn"]),
                linear(h, s["ffn"]),
                linear(s["ffn"], h),
            )
            self.n1, self.n2 = nn.RMSNorm(h), nn.RMSNorm(h)

        def inner(self, x: Any) -> Any:
            b, t, _ = x.shape
            y = self.n1(x)

            def split(z: Any) -> Any:
                return z.view(b, t, heads, -1).transpose(1, 2)

            o = fn.scaled_dot_product_attention(
                split(self.q(y)), split(self.k(y)), split(self.v(y)), is_causal=True
            )
            x = x + self.o(o.transpose(1, 2).reshape(b, t, h))
            y = self.n2(x)
            return x + self.w2(fn.silu(self.w1(y)) * self.w3(y))

        def forward(self, x: Any) -> Any:
            if ac == "none":
                return self.inner(x)
            if ac == "op":
                return checkpoint(self.inner, x, use_reentrant=False, context_fn=context)
            return checkpoint(self.inner, x, use_reentrant=False)

    blocks = [Block() for _ in range(s["layers"])]
    return nn.Sequential(nn.Embedding(s["vocab"], h), *blocks, nn.RMSNorm(h), linear(h, s["vocab"]))


def _step(ac: str, batch: int) -> dict[str, float]:
    import torch

    cu = torch.cuda
    model = _model(torch, ac).to("cuda", torch.bfloat16)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    ids = torch.randint(0, SHAPE["vocab"], (batch, SHAPE["seq"]), device="cuda")
    out: dict[str, float] = {}
    for _ in range(2):  # the second step is the steady state
        cu.synchronize()
        cu.reset_peak_memory_stats()
        base, base_res = cu.memory_allocated(), cu.memory_reserved()
        logits = model(ids)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), ids.flatten())
        del logits
        loss.backward()
        del loss
        cu.synchronize()
        out = {"base": base, "base_res": base_res, "peak": cu.max_memory_allocated(),
               "peak_res": cu.max_memory_reserved()}  # fmt: skip
    return out


def _cross_entropy() -> dict[str, float]:
    import torch

    cu, n, v = torch.cuda, 16384, SHAPE["vocab"]
    logits = torch.randn(n, v, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, v, (n,), device="cuda")
    cu.synchronize()
    cu.reset_peak_memory_stats()
    base = cu.memory_allocated()
    torch.nn.functional.cross_entropy(logits.float(), labels).backward()
    cu.synchronize()
    return {"per_logit": (cu.max_memory_allocated() - base) / logits.numel()}


def _outside() -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    cu = torch.cuda
    x = torch.ones(9, device="cuda")
    free, total = cu.mem_get_info()
    out: dict[str, Any] = {"cuda": total - free - cu.memory_reserved(), "total": total,
                           "name": cu.get_device_name()}  # fmt: skip
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29517")
    dist.init_process_group("nccl", rank=0, world_size=1)
    dist.all_reduce(x)
    cu.synchronize()
    free, total = cu.mem_get_info()
    out["nccl"] = total - free - cu.memory_reserved()
    dist.destroy_process_group()
    return out


def _run(task: str, expandable: bool) -> dict[str, Any]:
    env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": f"expandable_segments:{expandable}"}
    cmd = [sys.executable, "-m", "calibrate.memory_probe", "--child", task]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        oom = "OutOfMemoryError" in p.stderr
        return {"error": "out of memory" if oom else p.stderr[-600:]}
    return dict(json.loads(p.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> None:
    """Run every probe in its own process and write one JSON document."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        kind, _, arg = args.child.partition(":")
        ac, _, batch = arg.partition(":")
        result = {"outside": _outside, "xent": _cross_entropy}.get(kind)
        print(json.dumps(result() if result else _step(ac, int(batch))))
        return
    runs: dict[str, Any] = {"shape": SHAPE, "outside": _run("outside", False),
                            "xent": _run("xent", True)}  # fmt: skip
    for ac in ("full", "op", "none"):
        runs[f"step {ac} expandable"] = _run(f"step:{ac}:{SHAPE['batch']}", True)
    runs["step op caching"] = _run(f"step:op:{SHAPE['batch']}", False)
    for expandable in (False, True):
        for b in PRESSURE_BATCHES:
            runs[f"pressure {b} expandable={expandable}"] = _run(f"step:op:{b}", expandable)
    text = json.dumps(runs, indent=1, sort_keys=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    main()
