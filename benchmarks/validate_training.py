"""Published training tables against the catalog's compute parameters: the residual of
every row, per table mean and max, for each fitted GPU type.

Run: ``python benchmarks/validate_training.py [--holdout]`` (reads ../shared/data). The
same tables with a refit and hold-out errors: ``python -m calibrate.fit_training --gpu
H100-SXM --fit --holdout`` (and ``--gpu A100-SXM``).
"""

from __future__ import annotations

import argparse

from calibrate.fit_training import FITS
from calibrate.fit_training import main as fit_main


def main() -> None:
    """Print the residual tables of every fitted GPU type."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gpu", choices=sorted(FITS), action="append", help="default: all")
    args = ap.parse_args()
    for gpu in args.gpu or sorted(FITS):
        print(f"== {gpu}")
        fit_main(["--gpu", gpu])


if __name__ == "__main__":
    main()
