"""Fused attention by kernel family, timed from published kernel benchmarks.

``topologies/catalog/attention.yaml`` holds, per benchmarked GPU and kernel family
(FlashAttention-2 ``fa2``, FlashAttention-3 ``fa3``, cuDNN fused attention ``cudnn`` as
Transformer Engine calls it, Triton's fused-attention tutorial kernel ``triton``,
FlashAttention's 2022 Triton kernel ``fa_triton`` that llm-foundry runs), the TFLOP/s the
FlashAttention papers measured by head dimension (64, 128, 256), sequence length (512 to
16k) and mask (none or causal), forward and/or forward + backward. A GPU's compute entry
names the table it uses (``attention_table``: H200 uses H100 SXM's, same GH100 die).

The rate of a kernel is the published TFLOP/s as a fraction of the benchmarked card's
bf16 peak, interpolated linearly in log2(sequence) and log2(head dim), clamped at the
ends (above 16k the kernels are flat; below 512 the slope of 512 -> 1k is continued, down
to a quarter of the 512 value). FLOPs follow the benchmarks' convention
(:func:`convention_flops`: the causal mask halves them). Where a table gives only one
direction, the other comes from the reference pair, FlashAttention-2 on H100 SXM, whose
forward (FlashAttention-3 paper, Fig. 5) and forward + backward (FlashAttention-2 README
benchmark) are both published: backward rate = 2.5 / (3.5 / fwd_bwd - 1 / fwd) there, and
a family's backward-to-forward rate ratio is assumed equal to FlashAttention-2's at the
same head dimension, length and mask (an assumption: the FlashAttention-3 and cuDNN
backward benchmarks are not transcribed here).

>>> round(attention_fraction("H100-SXM", "cudnn", 128, 8192, True, False), 3)  # 529 / 989.4
0.535
>>> convention_flops(1, 1, 1024, 128, True, True) == 2.5 * 4 * 1024**2 * 128 / 2
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from sim.errors import ConfigError, TopologyError
from sim.files import load_shipped_yaml
from sim.units import parse_flops
from sim.workload.primitives import ATTENTION_KERNELS

__all__ = [
    "FAMILIES",
    "KernelTable",
    "attention_fraction",
    "attention_tables",
    "convention_flops",
    "family_table",
]

#: Kernel families (``training.attention_kernel``), plus ``fitted``: the parametric model
#: of the compute entry (``attn_eff_max``) whatever the kernel. Named in the workload layer,
#: which the scenario readers check keys against.
FAMILIES = ATTENTION_KERNELS
#: The one table with both directions published: it sets the backward/forward ratios.
REFERENCE = ("H100-SXM", "fa2")
_MIN_SHORT = 0.25  # below 512 tokens, never under this fraction of the 512-token rate

Grid = dict[tuple[bool, int], tuple[float, ...]]  # (causal, head dim) -> TFLOP/s per length


@dataclass(frozen=True)
class KernelTable:
    """Forward and backward TFLOP/s of one family on one benchmarked GPU.

    Attributes
    ----------
    peak_flops : float
        Dense bf16 peak (FLOP/s) of the benchmarked card.
    fwd, bwd : dict
        (causal, head dim) -> TFLOP/s at :attr:`seq_lens` (derived where not published).
    seq_lens : tuple of int
        Sequence lengths of the columns.
    sources : tuple of str
        Where the published rows come from.
    """

    peak_flops: float
    fwd: Grid
    bwd: Grid
    seq_lens: tuple[int, ...]
    sources: tuple[str, ...]


def convention_flops(b: float, heads: float, s: float, d: float, causal: bool,
                     backward: bool) -> float:  # fmt: skip
    """FLOPs as the FlashAttention benchmarks count them: ``4 b heads s^2 d``, halved
    under a causal mask, times 2.5 for the backward pass."""
    fwd = 4.0 * b * heads * s * s * d * (0.5 if causal else 1.0)
    return fwd * (2.5 if backward else 1.0)


def _grid(raw: object, where: str, n: int) -> Grid:
    if not isinstance(raw, dict):
        raise TopologyError(f"catalog attention.yaml: {where}: expected full/causal rows")
    out: Grid = {}
    for mask in ("full", "causal"):
        for dim, row in (raw.get(mask) or {}).items():
            if not isinstance(row, list) or len(row) != n or min(row) <= 0:
                raise TopologyError(
                    f"catalog attention.yaml: {where}.{mask}.{dim}: expected {n} rates > 0"
                )
            out[(mask == "causal", int(dim))] = tuple(float(x) for x in row)
    return out


def _bwd_from(fwd: Grid, fwd_bwd: Grid) -> Grid:
    """Backward rates where both directions are published: 2.5 / (3.5/fb - 1/f)."""
    out: Grid = {}
    for key, fb in fwd_bwd.items():
        if key in fwd:
            out[key] = tuple(2.5 / (3.5 / a - 1.0 / b) for a, b in zip(fb, fwd[key], strict=True))
    return out


def _nearest(grid: Grid, causal: bool, dim: int) -> tuple[float, ...]:
    dims = sorted(d for c, d in grid if c == causal)
    return grid[(causal, min(dims, key=lambda d: abs(math.log2(d / dim))))]


def _complete(fwd: Grid, fwd_bwd: Grid, ref: tuple[Grid, Grid] | None) -> tuple[Grid, Grid]:
    """Forward and backward grids of a table, deriving what it does not publish."""
    bwd = _bwd_from(fwd, fwd_bwd)
    if ref is not None:
        rf, rb = ref
        for key, fb in fwd_bwd.items():  # forward from the reference's fwd / fwd_bwd ratio
            if key not in fwd:
                rfb = tuple(3.5 / (1 / f + 2.5 / b) for f, b in zip(rf[key], rb[key], strict=True))
                fwd[key] = tuple(x * f / g for x, f, g in zip(fb, rf[key], rfb, strict=True))
                bwd[key] = _bwd_from({key: fwd[key]}, {key: fb})[key]
        ratio = {k: tuple(b / f for f, b in zip(rf[k], rb[k], strict=True)) for k in rb}
    else:
        ratio = {k: tuple(b / f for f, b in zip(fwd[k], bwd[k], strict=True)) for k in bwd}
    for key, f in fwd.items():
        if key not in bwd:
            r = ratio.get(key) or _nearest(ratio, *key)
            bwd[key] = tuple(x * y for x, y in zip(f, r, strict=True))
    return fwd, bwd


def _family(raw: dict[str, Any], where: str, n: int, peak: float,
            ref: tuple[Grid, Grid] | None) -> KernelTable:  # fmt: skip
    fwd = _grid(raw["fwd"], f"{where}.fwd", n) if "fwd" in raw else {}
    fwd_bwd = _grid(raw["fwd_bwd"], f"{where}.fwd_bwd", n) if "fwd_bwd" in raw else {}
    if not fwd and not fwd_bwd:
        raise TopologyError(f"catalog attention.yaml: {where}: needs fwd or fwd_bwd")
    sources = tuple(str(raw[k]["source"]) for k in ("fwd", "fwd_bwd") if k in raw)
    f, b = _complete(dict(fwd), fwd_bwd, ref)
    return KernelTable(peak, f, b, (), sources)


@cache
def attention_tables() -> dict[str, dict[str, KernelTable | None]]:
    """Benchmarked GPU -> family -> :class:`KernelTable`, or None where the family is
    timed by the parametric model there (``parametric:`` in ``attention.yaml``; cached)."""
    text = resources.files("topologies.catalog").joinpath("attention.yaml").read_text("utf-8")
    raw = load_shipped_yaml(text, "catalog attention.yaml")
    seq = tuple(int(x) for x in raw.pop("seq_lens"))
    n = len(seq)
    gpu_ref, fam_ref = REFERENCE
    ref_raw = raw[gpu_ref][fam_ref]
    peak_ref = parse_flops(raw[gpu_ref]["peak"], f"attention.yaml: {gpu_ref}.peak")
    ref_table = _family(ref_raw, f"{gpu_ref}.{fam_ref}", n, peak_ref, None)
    ref = (ref_table.fwd, ref_table.bwd)
    out: dict[str, dict[str, KernelTable | None]] = {}
    for gpu, body in raw.items():
        peak = parse_flops(body["peak"], f"attention.yaml: {gpu}.peak")
        fams: dict[str, KernelTable | None] = {}
        for fam, spec in body.items():
            if fam == "peak":
                continue
            if fam not in FAMILIES:
                raise TopologyError(f"catalog attention.yaml: {gpu}.{fam}: unknown family")
            if "parametric" in spec:
                fams[fam] = None
                continue
            table = (
                ref_table
                if (gpu, fam) == REFERENCE
                else _family(spec, f"{gpu}.{fam}", n, peak, ref)
            )
            fams[fam] = KernelTable(peak, table.fwd, table.bwd, seq, table.sources)
        out[str(gpu)] = fams
    return out


def _interp_seq(row: tuple[float, ...], seq: tuple[int, ...], s: float) -> float:
    x = math.log2(max(s, 1.0))
    xs = [math.log2(v) for v in seq]
    if x >= xs[-1]:
        return row[-1]
    i = max(0, min(len(xs) - 2, next((j for j in range(len(xs) - 1) if x < xs[j + 1]), 0)))
    y = row[i] + (row[i + 1] - row[i]) * (x - xs[i]) / (xs[i + 1] - xs[i])
    return max(y, _MIN_SHORT * row[0])


def _interp(grid: Grid, seq: tuple[int, ...], causal: bool, d: float, s: float) -> float:
    dims = sorted(k for c, k in grid if c == causal)
    if d <= dims[0] or len(dims) == 1:
        return _interp_seq(grid[(causal, dims[0])], seq, s)
    if d >= dims[-1]:
        return _interp_seq(grid[(causal, dims[-1])], seq, s)
    hi = next(k for k in dims if k >= d)
    lo = max(k for k in dims if k <= d)
    a, b = _interp_seq(grid[(causal, lo)], seq, s), _interp_seq(grid[(causal, hi)], seq, s)
    if hi == lo:
        return a
    return a + (b - a) * math.log2(d / lo) / math.log2(hi / lo)


def family_table(table_gpu: str, family: str) -> KernelTable | None:
    """The table of ``family`` on benchmarked GPU ``table_gpu``; None where the parametric
    model times that family there; ConfigError where neither is declared."""
    fams = attention_tables().get(table_gpu)
    if fams is None:
        raise ConfigError(f"no attention benchmarks for {table_gpu!r} in attention.yaml")
    if family not in fams:
        raise ConfigError(
            f"training.attention_kernel: {family!r} has no published benchmark on "
            f"{table_gpu} (measured there: {', '.join(sorted(fams))}; fa3 runs on Hopper only)"
        )
    return fams[family]


def attention_fraction(table_gpu: str, family: str, d: float, s: float, causal: bool,
                       backward: bool) -> float | None:  # fmt: skip
    """Fraction of the benchmarked card's bf16 peak that ``family`` reaches on
    :func:`convention_flops` at head dim ``d`` and sequence length ``s``; None where the
    parametric model times the family on that GPU."""
    t = family_table(table_gpu, family)
    if t is None:
        return None
    tflops = _interp(t.bwd if backward else t.fwd, t.seq_lens, causal, d, s)
    return tflops * 1e12 / t.peak_flops
