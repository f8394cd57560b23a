"""Predicted against published peak memory per GPU, and whether every published run fits.

Three tables:

1. Every published peak-memory reading (``calibrate/published_memory.yaml``: torchtitan's
   H100 and H200 benchmark tables) beside the framework-neutral model ("before": its
   total, what the simulator reported before framework semantics) and the model under
   the row's framework ("after": what PyTorch's caching allocator reserves, the quantity
   the sources log), with the errors and their mean and max.
2. Every run of the shared published tables (``../shared/data/published``): how many fit
   before (framework-neutral, datasheet capacity) and after (their framework, the
   capacity a process sees), and the fullest run of each table.
3. The headroom of the shared runs that use the caching allocator without expandable
   segments: the largest fraction of the allocator's memory that could be lost at the
   capacity with every one of them still fitting (their modelled loss is the room for
   the step's largest transient allocation, ``sim.training.memory.allocator``).
4. CNN training (``calibrate/cnn_memory.py``): every published single-GPU CNN run and
   NVIDIA DLE's ResNet-50 batch sizes per card, the memory the layer-list model gives and
   whether it fits as the run did (or, for the one configuration DLE avoids, does not).

Run: ``python benchmarks/validate_memory.py [--data ../shared/data/published]``.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

from calibrate.cnn_memory import cnn_fit_rows
from calibrate.memory_fits import DATA, FitRow, fit_rows
from calibrate.published_memory import memory_rows, predict_row
from sim.training.memory.report import memory_per_gpu
from sim.workload.models import model_preset

GIB = 2**30


def published_table() -> tuple[list[float], list[float]]:
    """Print table 1; return the before and after relative errors."""
    print("== Published peak memory per GPU, GiB (torch reserved; * = torch.compile/float8 run)")
    print(f"{'run':<32} {'measured':>8} {'before':>7} {'err':>6} {'after':>7} {'err':>6}  source")
    before, after = [], []
    for row in memory_rows():
        old = memory_per_gpu(model_preset(row.model), row.plan, row.seq, row.capacity_gb * 1e9)
        new = predict_row(row)
        b, a = old.total_bytes / GIB, new.reserved_bytes / GIB
        before.append(b / row.measured_gib - 1)
        after.append(a / row.measured_gib - 1)
        star = "*" if row.compile or row.float8 else " "
        print(
            f"{row.label:<31}{star} {row.measured_gib:>8.1f} {b:>7.1f} {before[-1]:>+6.1%} "
            f"{a:>7.1f} {after[-1]:>+6.1%}  {row.source}: {row.table}"
        )
    for name, errs in (("before", before), ("after", after)):
        mean = sum(abs(e) for e in errs) / len(errs)
        print(f"{name}: mean |error| {mean:.1%}, max {max(abs(e) for e in errs):.1%}")
    return before, after


def _headroom(row: FitRow) -> float:
    """Largest fraction of the allocator's memory that could be lost with ``row`` still
    fitting (``row``'s framework, the capacity a process sees)."""
    r = row.framework_report()
    inside = r.total_bytes - r.fragmentation_bytes - r.outside_allocator_bytes
    x = (row.capacity_bytes - r.outside_allocator_bytes) / inside - 1
    return x / (1 + x)


def fits_table(rows: list[FitRow]) -> None:
    """Print tables 2 and 3."""
    print("\n== Shared published runs that fit: before (neutral, datasheet) / after (framework)")
    print(f"{'table':<40} {'runs':>5} {'before':>7} {'after':>6}  fullest run after (GiB)")
    by_table: dict[str, list[FitRow]] = defaultdict(list)
    for row in rows:
        by_table[row.table].append(row)
    for table, group in by_table.items():
        old = sum(r.neutral_report().fits for r in group)
        reports = [(r.framework_report(), r) for r in group]
        new = sum(rep.fits for rep, _ in reports)
        rep, top = max(reports, key=lambda p: p[0].total_bytes / p[1].capacity_bytes)
        print(
            f"{table:<40} {len(group):>5} {old:>7} {new:>6}  {top.label}: "
            f"{rep.total_bytes / GIB:.1f} of {top.capacity_bytes / GIB:.1f}"
        )
        for rep, r in reports:
            if not rep.fits:
                print(f"    does not fit: {r.label} {rep.total_bytes / GIB:.1f} GiB")
    caching = [r for r in rows if not r.semantics.expandable_segments]
    if caching:
        bound = min(((_headroom(r), r) for r in caching), key=lambda p: p[0])
        tight = bound[1]
        print(
            f"\n== Headroom of the caching-allocator runs: {bound[0]:.3f} of the allocator's "
            f"memory could be lost with all still fitting ({tight.table}: {tight.label})"
        )


def cnn_table() -> None:
    """Print table 4, and how many rows' fit disagrees with their source."""
    print("\n== CNN runs: memory per GPU (GB, 10^9 bytes) against the card, and the fit expected")
    print(
        f"{'run':<34} {'model':<14} {'prec':<5} {'batch':>5} {'model GB':>8} {'card':>5}  fits  expected"
    )
    wrong = 0
    for row, used in cnn_fit_rows():
        fits = used <= row.card_gb * 1e9
        wrong += fits != row.fits
        print(f"{row.label[:34]:<34} {row.model:<14} {row.precision:<5} {row.batch:>5} "
              f"{used / 1e9:>8.1f} {row.card_gb:>5.0f}  {'yes' if fits else 'no':<4}  "
              f"{'yes' if row.fits else 'no'}{'' if fits == row.fits else '  MISMATCH'}")  # fmt: skip
    print(f"{wrong} of the rows disagree with their source")


def main() -> None:
    """Print the four tables."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", type=Path, default=DATA, help="shared published tables")
    args = ap.parse_args()
    published_table()
    rows = fit_rows(args.data)
    if rows:
        fits_table(rows)
    else:
        print(f"\n(no shared published tables under {args.data}: fit checks skipped)")
    cnn_table()


if __name__ == "__main__":
    main()
