"""A torchtitan-shaped Llama training step on one device, timed, for op-level validation.

``calibrate step`` times a small GPT under autocast; torchtitan's published runs train
Llama 3 with FSDP2's bf16 parameters, per-op selective activation checkpointing and an
SDPA backend it pins. This job runs that per-GPU work on one device so the simulator's
prediction of a torchtitan row can be checked below the cluster, kernel class by class:

- the model is Llama 3's block (RMSNorm, RoPE by complex multiplication, grouped-query
  attention with ``repeat_kv`` then SDPA, SwiGLU), token embedding, final norm and an
  untied output head, as ``torchtitan/models/llama/model.py`` at 9dec370a writes it;
- parameters are fp32, wrapped per block and at the root by FSDP2 (``fully_shard``) on
  a one-rank process group with ``MixedPrecisionPolicy(param_dtype=bf16,
  reduce_dtype=fp32)`` (torchtitan's defaults): the forward runs on bf16 copies, the
  gradients come back in fp32; ``--no-fsdp`` runs autocast instead;
- ``--ac op`` is torchtitan's per-op SAC (``torchtitan/distributed/activation_checkpoint.py``:
  keep the outputs of matmuls, attention and max, but recompute every second matmul);
  ``none`` and ``full`` are the other two modes; the recompute stops early (PyTorch's
  default, which torchtitan's published runs had) unless ``--no-early-stop`` (torchtitan
  since August 2025);
- SDPA's backend is pinned (``--attention flash``: FlashAttention-2, torchtitan on Hopper
  since 2025-05, and PyTorch's default from 2.5.1 on; ``cudnn``; ``efficient``; ``math``);
- the loss is cross-entropy over ``pred.float()`` (``torchtitan/components/loss.py``),
  the optimizer AdamW (foreach) after gradient clipping at norm 1.

Run (on a GPU): ``python -m calibrate.titan_step --layers 16 --out titan.json`` with
``--trace trace.json`` for a Kineto trace of two steps. On a CPU ``--quick`` runs a tiny
config (the test suite's dry run).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from calibrate.measurements import summarize_times
from calibrate.trace_reader import STEP_ANNOTATION
from sim.files import write_atomic

__all__ = ["TitanConfig", "build_model", "main", "run"]

ATTENTION = ("flash", "cudnn", "efficient", "math")
AC_MODES = ("op", "none", "full")


@dataclass(frozen=True)
class TitanConfig:
    """Llama 3 8B's shape by default (``torchtitan/models/llama/__init__.py``)."""

    layers: int = 16
    dim: int = 4096
    heads: int = 32
    kv_heads: int = 8
    ffn_dim: int = 14336
    vocab: int = 128256
    seq: int = 8192
    batch: int = 2
    rope_theta: float = 500000.0
    attention: str = "flash"
    ac: str = "op"
    fsdp: bool = True
    early_stop: bool = True

    def __post_init__(self) -> None:
        if self.attention not in ATTENTION:
            raise SystemExit(f"--attention {self.attention!r}: allowed {', '.join(ATTENTION)}")
        if self.ac not in AC_MODES:
            raise SystemExit(f"--ac {self.ac!r}: allowed {', '.join(AC_MODES)}")
        if self.dim % self.heads or self.heads % self.kv_heads:
            raise SystemExit("dim must divide by heads and heads by kv_heads")


#: ``--quick``: a tiny config for a CPU dry run (sizes only).
QUICK = TitanConfig(layers=2, dim=64, heads=4, kv_heads=2, ffn_dim=160, vocab=512, seq=64, batch=2)


def _rope(dim: int, seq: int, theta: float, device: torch.device) -> torch.Tensor:
    freqs = 1.0 / theta ** (torch.arange(0, dim, 2, device=device)[: dim // 2].float() / dim)
    t = torch.arange(seq, device=device, dtype=torch.float32)
    return torch.polar(torch.ones(seq, dim // 2, device=device), torch.outer(t, freqs))


def _apply_rope(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    out = torch.view_as_real(xc * freqs.view(1, xc.shape[1], 1, xc.shape[-1])).flatten(3)
    return out.type_as(x)


class Block(nn.Module):
    """One Llama 3 transformer block as torchtitan writes it."""

    def __init__(self, c: TitanConfig) -> None:
        super().__init__()
        hd = c.dim // c.heads
        self.c, self.hd = c, hd
        self.wq = nn.Linear(c.dim, c.heads * hd, bias=False)
        self.wk = nn.Linear(c.dim, c.kv_heads * hd, bias=False)
        self.wv = nn.Linear(c.dim, c.kv_heads * hd, bias=False)
        self.wo = nn.Linear(c.heads * hd, c.dim, bias=False)
        self.w1 = nn.Linear(c.dim, c.ffn_dim, bias=False)
        self.w2 = nn.Linear(c.ffn_dim, c.dim, bias=False)
        self.w3 = nn.Linear(c.dim, c.ffn_dim, bias=False)
        self.attention_norm = nn.RMSNorm(c.dim, eps=1e-5)
        self.ffn_norm = nn.RMSNorm(c.dim, eps=1e-5)

    def _attention(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        c, hd = self.c, self.hd
        q = self.wq(x).view(b, s, c.heads, hd)
        k = self.wk(x).view(b, s, c.kv_heads, hd)
        v = self.wv(x).view(b, s, c.kv_heads, hd)
        q, k = _apply_rope(q, freqs), _apply_rope(k, freqs)
        rep = c.heads // c.kv_heads  # repeat_kv: expand, then a copy by reshape
        k = k[:, :, :, None, :].expand(b, s, c.kv_heads, rep, hd).reshape(b, s, c.heads, hd)
        v = v[:, :, :, None, :].expand(b, s, c.kv_heads, rep, hd).reshape(b, s, c.heads, hd)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        with _sdpa_backend(c.attention):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).contiguous().view(b, s, -1))

    def forward(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        h = x + self._attention(self.attention_norm(x), freqs)
        y = self.ffn_norm(h)
        return h + self.w2(F.silu(self.w1(y)) * self.w3(y))


def _sdpa_backend(name: str) -> contextlib.AbstractContextManager[Any]:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
               "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[name]  # fmt: skip
    return sdpa_kernel([backend])


def _sac_context() -> Any:
    """torchtitan's per-op SAC policy (save list and every-second-matmul rule)."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    ops = torch.ops.aten
    save = {ops.mm.default, ops._scaled_dot_product_flash_attention.default,
            ops._scaled_dot_product_efficient_attention.default, ops.max.default}  # fmt: skip
    cudnn = getattr(ops, "_scaled_dot_product_cudnn_attention", None)
    if cudnn is not None:
        save.add(cudnn.default)
    counts: dict[str, int] = defaultdict(int)

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
        mode = "recompute" if ctx.is_recompute else "forward"
        if func == ops.mm.default:
            counts[mode] += 1
        keep = func in save and not (func == ops.mm.default and counts[mode] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


class Checkpointed(nn.Module):
    """A block under activation checkpointing (``op``: SAC; ``full``: everything)."""

    def __init__(self, block: Block, mode: str, early_stop: bool = True) -> None:
        super().__init__()
        self.block, self.mode, self.early_stop = block, mode, early_stop

    def forward(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

        kw: dict[str, Any] = {"use_reentrant": False, "preserve_rng_state": False}
        if self.mode == "op":
            kw["context_fn"] = _sac_context
        with set_checkpoint_early_stop(self.early_stop):
            return checkpoint(self.block, x, freqs, **kw)


class Llama(nn.Module):
    """Embedding, blocks, final norm, untied output head."""

    def __init__(self, c: TitanConfig) -> None:
        super().__init__()
        self.c = c
        self.tok_embeddings = nn.Embedding(c.vocab, c.dim)
        blocks = [Block(c) for _ in range(c.layers)]
        self.layers = nn.ModuleList(
            b if c.ac == "none" else Checkpointed(b, c.ac, c.early_stop) for b in blocks
        )
        self.norm = nn.RMSNorm(c.dim, eps=1e-5)
        self.output = nn.Linear(c.dim, c.vocab, bias=False)
        self.freqs: torch.Tensor | None = None

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        c = self.c
        if self.freqs is None:
            self.freqs = _rope(c.dim // c.heads, c.seq, c.rope_theta, tokens.device)
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, self.freqs)
        return self.output(self.norm(h))


def build_model(c: TitanConfig, device: torch.device) -> nn.Module:
    """The model on ``device`` in fp32, under FSDP2 (one rank) when ``c.fsdp``."""
    with torch.device(device):
        model = Llama(c)
    if not c.fsdp:
        return model
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for i, layer in enumerate(model.layers):  # torchtitan: reshard all but the last block
        fully_shard(layer, mp_policy=mp, reshard_after_forward=i < len(model.layers) - 1)
    fully_shard(model, mp_policy=mp)
    return model


@contextlib.contextmanager
def _process_group(c: TitanConfig, device: torch.device) -> Iterator[None]:
    import torch.distributed as dist

    if not c.fsdp or dist.is_initialized():
        yield
        return
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _step_fn(model: nn.Module, c: TitanConfig, device: torch.device) -> Callable[[], float]:
    opt = torch.optim.AdamW(model.parameters(), lr=8e-4, weight_decay=0.1, foreach=True)
    gen = torch.Generator(device="cpu").manual_seed(0)
    tokens = torch.randint(0, c.vocab, (c.batch, c.seq + 1), generator=gen).to(device)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    cast = (contextlib.nullcontext() if c.fsdp or device.type != "cuda"
            else torch.autocast("cuda", dtype=torch.bfloat16))  # fmt: skip

    def step() -> float:
        with cast:
            pred = model(x)
        loss = F.cross_entropy(pred.flatten(0, 1).float(), y.flatten(0, 1))
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss.detach())

    return step


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def run(c: TitanConfig, steps: int, warmup: int, device: torch.device,
        trace: str | None = None) -> dict[str, Any]:  # fmt: skip
    """Time ``steps`` steps after ``warmup``; a Kineto trace of two more when ``trace``."""
    with _process_group(c, device):
        model = build_model(c, device)
        step = _step_fn(model, c, device)
        for _ in range(warmup):
            loss = step()
        _sync(device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            loss = step()  # float() synchronizes
            _sync(device)
            times.append(time.perf_counter() - t0)
        out = _record(c, times, loss, device)
        if trace:
            _trace(step, trace, device)
    return out


def _record(c: TitanConfig, times: Sequence[float], loss: float,
            device: torch.device) -> dict[str, Any]:  # fmt: skip
    median, spread = summarize_times(times)
    rec: dict[str, Any] = {
        "config": asdict(c), "device": str(device), "torch": torch.__version__,
        "step_s": times, "median_s": median, "min_s": min(times), "spread_s": spread,
        "tokens_per_s": c.batch * c.seq / median, "loss": loss,
    }  # fmt: skip
    if device.type == "cuda":
        rec["gpu"] = torch.cuda.get_device_name(device)
        rec["peak_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
        rec["peak_reserved_bytes"] = torch.cuda.max_memory_reserved(device)
    if not math.isfinite(loss):
        raise SystemExit(f"titan step: loss is {loss}")
    return rec


def _trace(step: Callable[[], float], path: str, device: torch.device) -> None:
    from torch.profiler import ProfilerActivity, profile, record_function

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts, record_shapes=True) as prof:
        for _ in range(2):
            with record_function(STEP_ANNOTATION):
                step()
            _sync(device)
    prof.export_chrome_trace(path)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m calibrate.titan_step")
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--quick", action="store_true")
    d = QUICK if pre.parse_known_args(argv)[0].quick else TitanConfig()  # sizes' defaults
    for key in ("layers", "dim", "heads", "kv_heads", "ffn_dim", "vocab", "seq", "batch"):
        ap.add_argument(f"--{key.replace('_', '-')}", type=int, default=getattr(d, key))
    ap.add_argument("--attention", default=d.attention, choices=ATTENTION)
    ap.add_argument("--ac", default=d.ac, choices=AC_MODES)
    ap.add_argument("--no-fsdp", action="store_true", help="autocast instead of FSDP2")
    ap.add_argument("--no-early-stop", action="store_true",
                    help="recompute the whole block (torchtitan since August 2025)")  # fmt: skip
    ap.add_argument("--quick", action="store_true", help="tiny sizes by default (CPU dry run)")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--trace", help="write a Kineto trace of two steps here")
    ap.add_argument("--out", help="write the record (JSON) here")
    a = ap.parse_args(argv)
    # torchtitan's launcher (run_llama_train.sh at 9dec370a, run_train.sh at e7c0cae)
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    sizes = ("layers", "dim", "heads", "kv_heads", "ffn_dim", "vocab", "seq", "batch")
    c = TitanConfig(**{k: getattr(a, k) for k in sizes}, attention=a.attention, ac=a.ac,
                    fsdp=not a.no_fsdp, early_stop=not a.no_early_stop)  # fmt: skip
    rec = run(c, a.steps, a.warmup, torch.device(a.device), a.trace)
    if a.out:
        write_atomic(a.out, json.dumps(rec, indent=1) + "\n", "--out")
    print(f"{c.layers} layers, attention {c.attention}, ac {c.ac}, fsdp {c.fsdp}: "
          f"{rec['median_s'] * 1e3:.1f} ms/step, {rec['tokens_per_s']:.0f} tokens/s, "
          f"peak {rec.get('peak_allocated_bytes', 0) / 2**30:.2f} GiB", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
