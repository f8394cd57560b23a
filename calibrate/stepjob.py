"""A short real training-step job: a small GPT, forward + backward + AdamW, timed per step.

The model is plain torch (token and position embeddings; ``layers`` pre-norm blocks of
causal scaled-dot-product attention and a GELU MLP; final layernorm; an untied LM head)
and its exact config goes into the record, so the simulator can predict the same job.
Precision ``bfloat16`` means autocast to bf16 with fp32 weights and AdamW states.

``model_flops_per_step`` counts matmul FLOPs only, the usual way: per layer forward
``2·T·(4h² + 2·h·f) + 4·b·s²·h`` (QKV + output projection, MLP, QKᵀ and PV unmasked),
plus the LM head ``2·T·h·V``; a training step is 3× forward (backward = 2× forward).
T = batch·seq tokens, h hidden, f ffn_hidden, V vocab.

>>> StepJobConfig().tokens_per_step
512
"""

from __future__ import annotations

import dataclasses
import json
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from calibrate.compute import check_clock, cpu_model, gpu_driver, resolve_device, set_threads
from calibrate.measurements import (
    Measurements,
    Meta,
    StepRecord,
    check_statistic,
    summarize_times,
    utc_now,
)
from sim.errors import CalibrationError

__all__ = ["StepJobConfig", "model_flops_per_step", "parse_config", "run_step_job"]

PRECISIONS = ("float32", "bfloat16")


@dataclass(frozen=True)
class StepJobConfig:
    """The GPT and the batch. Defaults: a CPU-quick model whose step takes milliseconds."""

    layers: int = 2
    hidden: int = 128
    heads: int = 4
    ffn_hidden: int = 512
    vocab: int = 1024
    seq: int = 128
    batch: int = 4
    dtype: str = "float32"
    lr: float = 1e-4

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "ffn_hidden", "vocab", "seq", "batch"):
            if getattr(self, name) < 1:
                raise CalibrationError(f"step job: {name} must be >= 1, got {getattr(self, name)}")
        if self.hidden % self.heads:
            raise CalibrationError(
                f"step job: hidden ({self.hidden}) must be a multiple of heads ({self.heads})"
            )
        if self.dtype not in PRECISIONS:
            raise CalibrationError(
                f"step job: dtype {self.dtype!r} is unknown; allowed: {', '.join(PRECISIONS)}"
            )

    @property
    def tokens_per_step(self) -> int:
        """Tokens per optimizer step (batch × seq)."""
        return self.batch * self.seq


#: Default configs by (device, quick).
DEFAULTS = {
    ("cpu", True): StepJobConfig(),
    ("cpu", False): StepJobConfig(layers=4, hidden=256, heads=8, ffn_hidden=1024, seq=256),
    ("cuda", True): StepJobConfig(layers=4, hidden=1024, heads=16, ffn_hidden=4096,
                                  vocab=32768, seq=1024, batch=8, dtype="bfloat16"),
    ("cuda", False): StepJobConfig(layers=12, hidden=2048, heads=16, ffn_hidden=8192,
                                   vocab=50304, seq=2048, batch=8, dtype="bfloat16"),
}  # fmt: skip


def parse_config(text: str, device: str = "cpu", quick: bool = True) -> StepJobConfig:
    """The default config of (``device``, ``quick``) with ``key=value,...`` laid over it.

    >>> parse_config("layers=3,dtype=bfloat16").layers
    3

    Raises
    ------
    CalibrationError
        An unknown key, a value of the wrong type, or a config the job refuses.
    """
    base = DEFAULTS.get((device, quick), StepJobConfig())
    fields = {f.name: f.type for f in dataclasses.fields(StepJobConfig)}
    values: dict[str, Any] = {}
    for item in (x.strip() for x in text.split(",") if x.strip()):
        key, _, raw = item.partition("=")
        key = key.strip()
        if key not in fields or not raw:
            raise CalibrationError(
                f"--config {item!r}: expected key=value with key one of {', '.join(fields)}"
            )
        kind = type(getattr(base, key))
        try:
            values[key] = kind(raw.strip())
        except ValueError:
            raise CalibrationError(f"--config {key}={raw!r}: expected a {kind.__name__}") from None
    return dataclasses.replace(base, **values)


def model_flops_per_step(c: StepJobConfig) -> float:
    """Matmul FLOP of one training step (forward + backward), per the module docstring.

    >>> model_flops_per_step(StepJobConfig(layers=1, hidden=2, heads=1, ffn_hidden=8,
    ...                                    vocab=4, seq=1, batch=1))
    360.0
    """
    t, h = c.tokens_per_step, c.hidden
    per_layer = 2.0 * t * (4 * h * h + 2 * h * c.ffn_hidden) + 4.0 * c.batch * c.seq**2 * h
    return 3.0 * (c.layers * per_layer + 2.0 * t * h * c.vocab)


def _build_model(c: StepJobConfig) -> Any:
    import torch  # callers have checked it is installed (resolve_device)

    nn, fn = torch.nn, torch.nn.functional

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(c.hidden), nn.LayerNorm(c.hidden)
            self.qkv, self.proj = nn.Linear(c.hidden, 3 * c.hidden), nn.Linear(c.hidden, c.hidden)
            self.up, self.down = (
                nn.Linear(c.hidden, c.ffn_hidden),
                nn.Linear(c.ffn_hidden, c.hidden),
            )

        def forward(self, x: Any) -> Any:
            b, s, h = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, c.heads, h // c.heads).unbind(2)
            a = fn.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
            )
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, h))
            return x + self.down(fn.gelu(self.up(self.ln2(x))))

    class GPT(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.pos = nn.Embedding(c.vocab, c.hidden), nn.Embedding(c.seq, c.hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(c.layers))
            self.ln, self.head = nn.LayerNorm(c.hidden), nn.Linear(c.hidden, c.vocab, bias=False)

        def forward(self, idx: Any) -> Any:
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln(x))

    return GPT()


def _time_steps(torch: ModuleType, c: StepJobConfig, device: str, steps: int, warmup: int,
                clock: Callable[[], float] = time.perf_counter, trace: str | None = None,
                trace_steps: int = 0) -> tuple[list[float], int]:  # fmt: skip
    """Seconds per step for ``steps`` timed steps after ``warmup``; and the parameter count.
    With ``trace``, ``trace_steps`` more steps run under the PyTorch profiler afterwards
    (so that its overhead stays out of the timed steps), each inside a
    :data:`~calibrate.trace_reader.STEP_ANNOTATION` span, and the Chrome trace is written
    to ``trace``."""
    torch.manual_seed(0)
    model = _build_model(c).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=c.lr)
    idx = torch.randint(0, c.vocab, (c.batch, c.seq + 1), device=device)
    inputs, targets = idx[:, :-1], idx[:, 1:]
    amp = torch.autocast(device, dtype=torch.bfloat16, enabled=c.dtype == "bfloat16")
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def step() -> None:
        with amp:
            logits = model(inputs)
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    times = []
    for i in range(warmup + steps):
        sync()
        t0 = clock()
        step()
        sync()
        if i >= warmup:
            times.append(clock() - t0)
    if trace:
        _profile(torch, device, step, sync, trace, trace_steps)
    return times, sum(p.numel() for p in model.parameters())


def _profile(torch: ModuleType, device: str, step: Callable[[], None], sync: Callable[[], None],
             path: str, steps: int) -> None:  # fmt: skip
    """Run ``steps`` steps under the Kineto profiler; write its Chrome trace to ``path``."""
    from torch.profiler import ProfilerActivity, profile, record_function

    from calibrate.trace_reader import STEP_ANNOTATION, TRACE_METADATA

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities, record_shapes=True) as prof:
        for _ in range(steps):
            with record_function(STEP_ANNOTATION):
                step()
                sync()
        prof.add_metadata_json(TRACE_METADATA, json.dumps(
            {"device": device, "cpu_threads": torch.get_num_threads(),
             "torch_version": torch.__version__}))  # fmt: skip
    prof.export_chrome_trace(path)


def run_step_job(
    device: str = "cpu",
    quick: bool = True,
    config: StepJobConfig | None = None,
    steps: int | None = None,
    warmup: int | None = None,
    created: str | None = None,
    threads: int | None = None,
    clock: str = "wall",
    trace: str | None = None,
    trace_steps: int = 5,
    statistic: str = "median",
) -> Measurements:
    """Train a small GPT for a few steps and time each step.

    Parameters
    ----------
    device : {'cpu', 'cuda'}
        Where to train.
    quick : bool
        Small default model and few steps (a few seconds on CPU).
    config : StepJobConfig, optional
        The model and batch; default from :data:`DEFAULTS` by (device, quick).
    steps, warmup : int, optional
        Timed and untimed steps (defaults 5 and 2 quick, 20 and 5 otherwise).
    created : str, optional
        Fixed ``meta.created`` (UTC ISO-8601).
    threads : int, optional
        CPU threads torch may use (recorded as ``meta.details.cpu_threads``).
    clock : {'wall', 'thread'}
        CPU timer (:data:`calibrate.compute.CLOCKS`, recorded as ``meta.details.clock``):
        ``thread`` times the calling thread's CPU, leaving out what other processes of a
        shared host take (needs ``device='cpu'`` and ``threads=1``).
    trace, trace_steps : str, int, optional
        Where to write a profiler trace of ``trace_steps`` more steps.
    statistic : {'median', 'min'}
        What ``time_s`` is of the timed steps
        (:data:`~calibrate.measurements.STATISTICS`, recorded as ``meta.time_statistic``):
        ``min`` on a shared host, as for the compute file it is set beside.

    Returns
    -------
    Measurements
        Kind ``"step"`` with one :class:`~calibrate.measurements.StepRecord`; ``time_s``
        is the median (or minimum) step time (s), ``time_spread_s`` its p90−p10.

    Raises
    ------
    CalibrationError
        ``no CUDA device; use --device cpu``; bad config; steps < 1.
    """
    timer = check_clock(clock, device, threads)
    check_statistic(statistic)
    torch = resolve_device(device)
    set_threads(torch, threads)
    c = config or DEFAULTS[(device, quick)]
    steps = (5 if quick else 20) if steps is None else steps
    warmup = (2 if quick else 5) if warmup is None else warmup
    if steps < 1 or warmup < 0 or trace_steps < 1:
        raise CalibrationError(
            f"step job: need steps >= 1, warmup >= 0 and trace steps >= 1, got {steps}, "
            f"{warmup}, {trace_steps}"
        )
    try:
        times, n_params = _time_steps(torch, c, device, steps, warmup, timer, trace, trace_steps)
    except RuntimeError as e:  # torch's allocators raise RuntimeError (CUDA: its OOM subclass)
        if not _out_of_memory(e):
            raise
        raise CalibrationError(
            f"step job: the model ({c.layers} layers, hidden {c.hidden}, batch {c.batch} x "
            f"seq {c.seq}) does not fit the {device} memory; give a smaller --config"
        ) from None
    step_s, spread = summarize_times(times, statistic)
    flops = model_flops_per_step(c)
    record = StepRecord(
        model={**dataclasses.asdict(c), "precision": "autocast" if c.dtype != "float32" else
               "full", "tied_embeddings": False, "norm": "layernorm", "activation": "gelu",
               "bias": True, "optimizer_states": "fp32"},
        device=device, optimizer="AdamW", n_params=n_params, tokens_per_step=c.tokens_per_step,
        model_flops_per_step=flops, warmup_steps=warmup, time_s=step_s, time_spread_s=spread,
        step_times_s=tuple(times), tokens_per_s=c.tokens_per_step / step_s,
        achieved_flops_per_s=flops / step_s,
    )  # fmt: skip
    gpu = torch.cuda.get_device_name() if device == "cuda" else None
    meta = Meta(
        source="live run", created=utc_now(created), hosts=(platform.node(),), gpu_model=gpu,
        driver=gpu_driver() if gpu else None, torch_version=torch.__version__, world_size=1,
        nodes=1, gpus_per_node=1 if gpu else None, time_statistic=statistic, spread="p90-p10",
        details={"device": device, "cpu_model": cpu_model(), "quick": quick,
                 "cpu_threads": torch.get_num_threads(), "clock": clock,
                 **({"trace": trace, "trace_steps": trace_steps} if trace else {})},
    )  # fmt: skip
    return Measurements(kind="step", meta=meta, records=(record,))


def _out_of_memory(e: RuntimeError) -> bool:
    """Whether ``e`` is torch saying an allocation failed (CPU or CUDA)."""
    text = str(e).lower()
    return "out of memory" in text or "can't allocate memory" in text
