"""The training fit against every shared published table: per table, the mean and max
error with the shipped catalog, with every fitted parameter refitted to all the GPU type's
tables, and leave-one-table-out (refitted without the table, then the table predicted).

Run: ``python benchmarks/validate_training.py [--jobs 2] [--table T] [--rows] [--json]``
(reads ../shared/data, or ``$CLUSTERSIM_DATA``). The protocol, its choices and what
leave-one-table-out means for a GPU type with a single table: :mod:`calibrate.loto`.
Predictions are cached under ``$XDG_CACHE_HOME/clustersim`` (``--cache DIR``,
``--no-cache``): a rerun with unchanged code prints the same bytes in seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from calibrate.fit_training import DATA, use_cache
from calibrate.loto import RULES, TABLES, format_results, gpu_of, run_protocol
from calibrate.prediction_cache import PredictionCache, default_folder
from sim.errors import CalibrationError
from sim.files import dumps_json


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--table", action="append", help="only this table (repeatable)")
    ap.add_argument("--rows", action="store_true", help="also every row's three errors")
    ap.add_argument("--json", action="store_true", help="the per-table summary as JSON")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (same numbers)")
    ap.add_argument("--rule", default="transfer", choices=sorted(RULES),
                    help="LOTO of a GPU type with one table (see calibrate/loto.py)")  # fmt: skip
    ap.add_argument("--single-table", action="store_true",
                    help="use only the first table of each GPU type (shows the --rule)")  # fmt: skip
    ap.add_argument("--data", type=Path, default=DATA, help="folder of the published tables")
    ap.add_argument("--cache", type=Path, default=default_folder(), help="prediction cache")
    ap.add_argument("--no-cache", action="store_true", help="predict everything afresh")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Print the protocol's table (see the module docstring)."""
    args = _args(argv)
    t0 = time.perf_counter()
    try:
        for t in args.table or ():
            gpu_of(t)
        tables = {g: ts[:1] for g, ts in TABLES.items()} if args.single_table else TABLES
        cache = None if args.no_cache else PredictionCache(args.cache)
        use_cache(cache)
        try:
            fits, results = run_protocol(tables, args.data, args.rule, args.table,
                                         emit=lambda s: print(s, file=sys.stderr, flush=True),
                                         jobs=args.jobs)  # fmt: skip
        finally:
            if cache is not None:
                cache.save()
    except CalibrationError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(dumps_json([r.summary() for r in results], indent=1, sort_keys=True))
    else:
        print(format_results(fits, results, rows=args.rows, jobs=max(args.jobs, 2)))
    hits = f", cache {cache.hits} hits / {cache.misses} misses" if cache else ""
    print(f"({time.perf_counter() - t0:.0f} s{hits})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
