"""The compute model against published op-level measurements: GEMMs by shape, fused
attention by kernel family, CNN training throughput. Every row names its source.

Run: ``python benchmarks/validate_compute.py`` (GEMM rows need ../shared/data).
``--solve-conv`` also prints the factor each convolution stack's solving VGG-16 row
implies (``topologies/catalog/conv_stacks.yaml``'s value). ``--split`` prints, for the
CNNs run by one benchmark on two GPUs, the
model's time per image split into its memory-bound part (what the step gains when
``stream_eff`` and ``mem_eff`` halve) and the rest (convolutions and fully connected
layers, launches), and the weights ``a`` (rest) and ``b`` (memory-bound) under which
``a x rest + b x memory`` is the published time on both GPUs: how the published speed-up
between the two divides between compute and memory. The published rows live in
:mod:`calibrate.kernel_benchmarks`.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from calibrate.kernel_benchmarks import (
    ATTENTION_CHECKS,
    CNN_RUNS,
    CONV_KERNEL_CHECKS,
    DATA,
    GEMM_CHECKS,
    CnnRun,
    attention_leave_one_out,
    gemm_tflops,
    mamf_rows,
    predict_attention,
    predict_cnn,
    predict_conv_kernels,
    solve_stack_eff,
)
from sim.training.compute.conv_stacks import conv_stack_eff
from sim.training.compute.params import compute_params


def _gemm() -> None:
    print("== GEMM (micro-benchmark: sustained clock 1; 'sustained' = in a training step)")
    print(f"{'gpu':<15}{'dtype':<6}{'shape MxNxK':<20}{'published':>10}{'model':>8}{'error':>8}"
          f"{'sustained':>10}  source")  # fmt: skip
    rows = (mamf_rows() if DATA.exists() else []) + list(GEMM_CHECKS)
    for r in rows:
        model, sus = gemm_tflops(r), gemm_tflops(r, sustained=True)
        shape = f"{r.m}x{r.n}x{r.k}"
        print(f"{r.gpu:<15}{r.dtype:<6}{shape:<20}{r.tflops:>10.1f}{model:>8.1f}"
              f"{model / r.tflops - 1:>+8.1%}{sus:>10.1f}  {r.source}")  # fmt: skip
    if not DATA.exists():
        print(f"(mamf-finder rows skipped: {DATA} absent)")


def _attention() -> None:
    print("\n== Fused attention (TFLOP/s, FlashAttention FLOP convention, forward)")
    loo = attention_leave_one_out()
    errs = [abs(g / p - 1) for *_, p, g in loo]
    print(f"published tables, each interior column interpolated from its neighbours: "
          f"{len(loo)} points, median |error| {statistics.median(errs):.1%}, "
          f"max {max(errs):.1%}")  # fmt: skip
    print(
        f"{'gpu':<10}{'kernel':<8}{'b x h x s x d':<20}{'published':>10}{'model':>8}{'error':>8}  source"
    )
    for c in ATTENTION_CHECKS:
        model = predict_attention(c)
        shape = f"{c.batch}x{c.heads}x{c.seq}x{c.head_dim}"
        print(f"{c.gpu:<10}{c.kernel:<8}{shape:<20}{c.tflops:>10.1f}{model:>8.1f}"
              f"{model / c.tflops - 1:>+8.1%}  {c.source}")  # fmt: skip


def _conv_kernels() -> None:
    print("\n== Convolution kernels alone (ms; the GEMM model at kernel level: conv_eff, no stack)")
    print(f"{'gpu':<16}{'app':<12}{'N x C x HxW -> K, RxS/s':<32}"
          + "".join(f"{k + ' pub/model':>24}" for k in ("fwd", "dgrad", "wgrad")))  # fmt: skip
    for c in CONV_KERNEL_CHECKS:
        v = c.conv
        shape = f"{c.batch}x{v.cin}x{v.h}x{v.w} -> {v.cout}, {v.kh}x{v.kw}/{v.stride}"
        cells = "".join(
            f"{m:>9.3f}/{q:<6.3f}{q / m - 1:>+8.0%}"
            for m, q in zip(c.ms, predict_conv_kernels(c), strict=True)
        )
        print(f"{c.gpu:<16}{c.app:<12}{shape:<32}{cells}")
    print(f"source: {CONV_KERNEL_CHECKS[0].source}")


def _cnn(solve: bool) -> None:
    print(
        "\n== CNN training throughput, one GPU (images/s; 'solves' rows set their stack's factor)"
    )
    print("('fused': fused or channels-last batch norm, 'nchw': eager NCHW kernels; '+host': "
          "bound by the host's measured launches; stack: training.conv_stack)")  # fmt: skip
    print(f"{'gpu':<16}{'model':<15}{'prec':<6}{'batch':>6}{'stack':>11}{'kernels':>12}"
          f"{'published':>10}{'model':>9}{'error':>8}  hardware / source")  # fmt: skip
    errs, predicted = [], {}
    for r in CNN_RUNS:
        model = predicted[r] = predict_cnn(r)
        tag = ("solves" if r.solves else ("fused" if r.fused else "nchw")) + (
            "+host" if r.host_dispatch_s else ""
        )
        if not r.solves:
            errs.append(abs(model / r.images_per_s - 1))
        print(f"{r.gpu:<16}{r.model:<15}{r.precision:<6}{r.batch:>6}{r.stack:>11}{tag:>12}"
              f"{r.images_per_s:>10.1f}{model:>9.1f}{model / r.images_per_s - 1:>+8.1%}  "
              f"{r.hardware}: {r.source}")  # fmt: skip
    print(f"predictions: {len(errs)} rows, mean |error| {statistics.mean(errs):.1%}, "
          f"max {max(errs):.1%}")  # fmt: skip
    if solve:
        print("\nconvolution stack factors solved (conv_stacks.yaml's in brackets):")
        for r in CNN_RUNS:
            if r.solves:
                short = predicted[r] < r.images_per_s * (1 - 1e-3)
                print(f"  {r.stack}: {solve_stack_eff(r)} [{conv_stack_eff(r.stack)}] "
                      f"({r.model} on {r.gpu}, {r.images_per_s} images/s)"
                      + (": needs more than the catalog's" if short else ""))  # fmt: skip


def _per_image_split(r: CnnRun) -> tuple[float, float]:
    """(rest, memory-bound) seconds per image of the model's step for ``r``."""
    p = compute_params(r.gpu)
    t = 1.0 / predict_cnn(r)
    slow = 1.0 / predict_cnn(r, {"stream_eff": p.stream_eff / 2, "mem_eff": p.mem_eff / 2})
    return t - (slow - t), slow - t


def _split() -> None:
    print("\n== CNN time per image (ms): the model's rest and memory-bound parts, and the "
          "weights a, b that make a x rest + b x memory the published time on both GPUs")  # fmt: skip
    groups: dict[str, list[CnnRun]] = {}
    lambda_tf = [r for r in CNN_RUNS if "tf_cnn_benchmarks" in r.source and r.precision != "fp32"]
    solved = {r.gpu for r in lambda_tf if r.solves}  # V100 and A100 PCIe: VGG-16 sets a stack
    for r in lambda_tf:
        if r.gpu in solved:
            groups.setdefault(r.model, []).append(r)
    for model, pair in groups.items():
        if len(pair) != 2:
            continue
        rows = [_per_image_split(r) for r in pair]
        measured = [1.0 / r.images_per_s for r in pair]
        a, b = np.linalg.solve(np.array(rows), np.array(measured))
        for r, (rest, mem), m in zip(pair, rows, measured, strict=True):
            print(f"{'tf_cnn_benchmarks':<18}{model:<14}{r.gpu:<16}rest {rest * 1e3:6.3f}  memory "
                  f"{mem * 1e3:6.3f}  published {m * 1e3:6.3f}")  # fmt: skip
        print(f"{'':<32}a = {a:+.2f}, b = {b:+.2f}")


def main() -> None:
    """Print the three tables (and, with ``--split``, the CNN time split)."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--solve-conv", action="store_true",
                    help="print the convolution stack factors the solving rows give")  # fmt: skip
    ap.add_argument("--split", action="store_true",
                    help="only the CNNs' time split on two GPUs (see the module docstring)")  # fmt: skip
    args = ap.parse_args()
    if args.split:
        _split()
        return
    _gemm()
    _attention()
    _conv_kernels()
    _cnn(args.solve_conv)


if __name__ == "__main__":
    main()
