"""Published one-node collective bandwidths against the simulator: the 8 x H200 table.

Per row of ``h200-1node-collectives-16GiB.csv`` (nccl-tests at 16 GiB on one 8 x H200
node; source and assumptions in :mod:`calibrate.published_collectives`): the published
bus bandwidth and the simulated one on both networks (the ``hgx-h200`` preset), with the
error. Its selected profile has no collective fit: the shipped NVLink defaults answer, so
every row is out of sample. Nothing is fitted here.

Run: ``python benchmarks/validate_collectives.py`` (reads ../shared/data, or
``$CLUSTERSIM_DATA``).
"""

from __future__ import annotations

from calibrate.fit_training import DATA
from calibrate.published_collectives import H200_TABLE, predict_busbw, read_h200_table


def main() -> None:
    """Print the table (see the module docstring)."""
    rows = read_h200_table(DATA / H200_TABLE)
    print(f"{'op':<16}{'algorithm':<11}{'size':>8}{'published':>11}{'analytical':>12}"
          f"{'error':>8}{'flow':>9}{'error':>8}   (bus bandwidth, GB/s)")  # fmt: skip
    errors = []
    for r in rows:
        a, f = predict_busbw(r, "analytical"), predict_busbw(r, "flow")
        errors.append(abs(a / r.busbw_Bps - 1))
        print(f"{r.op:<16}{r.algorithm:<11}{r.size_bytes / 2**30:>6.0f}Gi{r.busbw_Bps / 1e9:>11.1f}"
              f"{a / 1e9:>12.1f}{a / r.busbw_Bps - 1:>+8.1%}{f / 1e9:>9.1f}"
              f"{f / r.busbw_Bps - 1:>+8.1%}")  # fmt: skip
    print(f"mean |error| {sum(errors) / len(errors):.1%}, max {max(errors):.1%} (analytical)")


if __name__ == "__main__":
    main()
