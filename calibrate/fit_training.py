"""Fit a GPU type's compute parameters to published training runs, and show the residuals.

One parameter set per GPU type, never per row: the parameters named in :data:`FITS` are
fitted by :func:`calibrate.solver.solve` (robust soft-L1 on log(predicted / published),
a weak prior toward the documented defaults, a deterministic Sobol screen) to every row
of the GPU type's published tables at once; everything else keeps its catalog value.
Rows count equally, except for the GPU types in :data:`BALANCED`, where each table counts
equally (:func:`table_weights`; recorded as ``weights`` in the validation record).
Hold-out errors refit with one group of rows left out (one MPT size: all its rows of
every llm-foundry table of the GPU type; or one row of the Megatron table) and predict
the rows left out. ``--jobs N`` spreads the rows over N processes (same numbers).

Run::

    python -m calibrate.fit_training --gpu H100-SXM            # residuals of the catalog
    python -m calibrate.fit_training --gpu H100-SXM --fit      # refit, print, compare
    python -m calibrate.fit_training --gpu H100-SXM --fit --holdout --write

``--write`` puts the fitted values and their validation into
``topologies/catalog/compute.yaml``. ``--memory`` prints the largest allocator
fragmentation under which every published run still fits.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from calibrate.catalog_write import CATALOG, write_catalog
from calibrate.llm_foundry import foundry_scenario, read_foundry_table
from calibrate.prediction_cache import PredictionCache, row_key
from calibrate.published import (
    mcore_scenario,
    megatron_scenario,
    read_mcore_table,
    read_megatron_table,
    read_selective_table,
    selective_scenario,
)
from calibrate.solver import solve
from sim.errors import CalibrationError
from sim.result import StepResult
from sim.scenario.load import Scenario
from sim.training.compute.params import compute_params
from sim.training.step import simulate_step

__all__ = [
    "BALANCED",
    "FITS",
    "FitResult",
    "ParamSpec",
    "TrainingRow",
    "fit_rows",
    "fragmentation_bound",
    "holdout_errors",
    "predict",
    "rows_for",
    "table_rows",
    "table_weights",
    "use_cache",
    "use_workers",
    "validation",
    "write_catalog",
]

#: The published tables: ``$CLUSTERSIM_DATA/published`` when set (a checkout whose
#: ``../shared`` is elsewhere), else ``../shared/data/published`` beside the checkout.
DATA = (
    Path(os.environ["CLUSTERSIM_DATA"]) / "published"
    if os.environ.get("CLUSTERSIM_DATA")
    else Path(__file__).resolve().parents[2] / "shared" / "data" / "published"
)


@dataclass(frozen=True)
class ParamSpec:
    """A fitted parameter: catalog key, bounds, and whether it is searched in log10."""

    key: str
    low: float
    high: float
    log: bool = False

    def value(self, u: float) -> float:
        """Parameter value at unit coordinate ``u`` in [0, 1]."""
        if self.log:
            return float(
                10 ** (np.log10(self.low) + u * (np.log10(self.high) - np.log10(self.low)))
            )
        return float(self.low + u * (self.high - self.low))

    def unit(self, value: float) -> float:
        """Unit coordinate of ``value`` (clipped to the bounds)."""
        v = min(max(value, self.low), self.high)
        if self.log:
            return float(
                (np.log10(v) - np.log10(self.low)) / (np.log10(self.high) - np.log10(self.low))
            )
        return float((v - self.low) / (self.high - self.low))


@dataclass(frozen=True)
class TrainingRow:
    """One published run: its scenario, what was measured, and how to read the prediction.

    ``metric``: ``tokens_per_gpu`` (tokens/s per GPU), ``hw_tflops`` (hardware TFLOP/s
    per GPU, recompute included) or ``model_tflops`` (model TFLOP/s per GPU). ``group``:
    rows held out together.
    """

    table: str
    label: str
    group: str
    scenario: Scenario
    measured: float
    metric: str

    def read(self, r: StepResult) -> float:
        """The prediction in the row's metric."""
        if self.metric == "tokens_per_gpu":
            return r.tokens_per_s / r.gpus
        if self.metric == "model_tflops":
            return r.tflops_per_gpu
        return r.hw_tflops_per_gpu


#: GPU type -> (catalog entries written, tables, fitted parameters)
FITS: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[ParamSpec, ...]]] = {
    "H100-SXM": (
        ("H100-SXM",),
        ("llm-foundry-mpt-h100-bf16.csv", "llm-foundry-mpt-h100-fp8.csv"),
        (
            ParamSpec("matmul_training_factor", 0.3, 1.0),
            ParamSpec("attn_eff_max", 0.1, 1.0),
            # H100's mem_eff is the kernel-level value (measured on the same die): the fit
            # sets what a training step keeps of it, as matmul_training_factor for GEMMs
            ParamSpec("mem_training_factor", 0.1, 1.0),
            ParamSpec("comm_interference", 0.0, 1.0),
            ParamSpec("attn_odd_head_dim_eff", 0.1, 1.0),
        ),
    ),
    "A100-SXM": (
        ("A100-SXM-80GB", "A100-SXM-40GB"),
        (
            "megatron-lm-a100-weak-scaling.csv",
            "llm-foundry-mpt-a100-80gb.csv",
            "llm-foundry-mpt-a100-40gb.csv",
        ),
        (
            ParamSpec("matmul_training_factor", 0.3, 1.0),
            ParamSpec("attn_eff_max", 0.1, 1.0),
            ParamSpec("mem_eff", 0.1, 1.0),
            ParamSpec("comm_interference", 0.0, 1.0),
            ParamSpec("attn_odd_head_dim_eff", 0.1, 1.0),
            ParamSpec("matmul_k_half", 8.0, 1024.0, log=True),
            # Megatron-LM's fused kernels (LayerNorm, bias-GeLU, bias-dropout-add, masked
            # softmax) run at stream_eff; A100 has no STREAM figure to fix it (see the
            # catalog), and only the Megatron rows (and every row's optimizer step) see it
            ParamSpec("stream_eff", 0.1, 1.0),
        ),
    ),
}


#: GPU types whose fit weighs each published table equally (see :func:`table_weights`).
#: A100: the 10 Megatron-LM rows would otherwise count 1:14 against the 139 llm-foundry
#: rows (issue 8). H100 is not listed: its fit and numbers stay as they are.
BALANCED: frozenset[str] = frozenset({"A100-SXM"})


def table_weights(rows: Sequence[TrainingRow]) -> np.ndarray:
    """Weight of each row so that every table counts equally in the objective.

    ``w = n / (T * n_t)`` for a row of a table with ``n_t`` of the ``n`` rows and ``T``
    tables: the weights sum to ``n`` (the prior keeps its strength against the data) and
    each table's sum to ``n / T``. :func:`fit_rows` multiplies each residual by
    ``sqrt(w)``, so a row's share of the cost is ``w`` where soft-L1 is quadratic
    (residuals well inside ``f_scale``) and only about ``sqrt(w)`` for an outlier far
    beyond it (the linear part): the balance is exact for the well-fitted rows only.

    >>> import numpy as np
    >>> class R:  # a stand-in with a table name
    ...     def __init__(self, t): self.table = t
    >>> table_weights([R("a"), R("b"), R("b"), R("b")]).tolist()
    [2.0, 0.6666666666666666, 0.6666666666666666, 0.6666666666666666]
    """
    tables = [r.table for r in rows]
    counts = {t: tables.count(t) for t in dict.fromkeys(tables)}
    return np.array([len(rows) / (len(counts) * counts[t]) for t in tables])


def table_rows(table: str, data: Path = DATA) -> list[TrainingRow]:
    """The rows of one published table (a file name under ``data``).

    Raises
    ------
    CalibrationError
        The file is absent or not a table this module reads.
    """
    path = data / table
    if not path.exists():
        raise CalibrationError(f"published table absent: {path}")
    if table.startswith("megatron-core"):
        return [TrainingRow(table, f"GPT {r.name} {r.gpus}gpu", r.name, mcore_scenario(r),
                            r.tflops_per_gpu, "model_tflops")
                for r in read_mcore_table(path)]  # fmt: skip
    if table.startswith("megatron-mfu-hfu"):
        return [TrainingRow(table, f"GPT {r.name} {r.gpus}gpu selective", r.name,
                            selective_scenario(r), r.model_tflops_per_gpu, "model_tflops")
                for r in read_selective_table(path)]  # fmt: skip
    if table.startswith("megatron"):
        return [TrainingRow(table, f"GPT {r.name} {r.gpus}gpu", r.name, megatron_scenario(r),
                            r.tflops_per_gpu, "hw_tflops")
                for r in read_megatron_table(path)]  # fmt: skip
    return [TrainingRow(table, f.label, f"mpt-{f.model}", foundry_scenario(f),
                        f.tokens_per_s_per_gpu, "tokens_per_gpu")
            for f in read_foundry_table(path)]  # fmt: skip


def rows_for(gpu: str, data: Path = DATA) -> list[TrainingRow]:
    """Every published row of GPU type ``gpu`` (a key of :data:`FITS`) found under ``data``."""
    if gpu not in FITS:
        raise CalibrationError(f"--gpu {gpu!r}: no published tables; known: {', '.join(FITS)}")
    return [row for table in FITS[gpu][1] for row in table_rows(table, data)]


_POOL: list[Any] = []  # [multiprocessing pool, its rows] when --jobs > 1


def _predict_one(args: tuple[int, Mapping[str, float] | None]) -> float:
    i, compute = args
    row = _POOL[1][i]
    return float(row.read(simulate_step(row.scenario, compute=compute)))


def use_workers(rows: Sequence[TrainingRow], jobs: int) -> None:
    """Predict ``rows`` in ``jobs`` worker processes from now on (fork; each keeps its
    caches warm). Results do not depend on ``jobs``."""
    if jobs > 1 and not _POOL:
        _POOL[:] = [None, list(rows)]
        _POOL[0] = multiprocessing.get_context("fork").Pool(jobs)


_CACHE: list[PredictionCache] = []  # [cache] after use_cache


def use_cache(cache: PredictionCache | None) -> None:
    """Look every prediction up in ``cache`` first from now on (None: stop). Results do
    not depend on it (:mod:`calibrate.prediction_cache`)."""
    _CACHE[:] = [cache] if cache is not None else []


def _simulate(rows: Sequence[TrainingRow], compute: Mapping[str, float] | None) -> np.ndarray:
    if _POOL and all(any(r is p for p in _POOL[1]) for r in rows):
        index = [next(i for i, p in enumerate(_POOL[1]) if p is r) for r in rows]
        return np.array(_POOL[0].map(_predict_one, [(i, compute) for i in index], chunksize=1))
    return np.array([r.read(simulate_step(r.scenario, compute=compute)) for r in rows])


def predict(rows: Sequence[TrainingRow], compute: Mapping[str, float] | None = None) -> np.ndarray:
    """Predicted value of each row in its metric, with ``compute`` laid over the catalog."""
    if not _CACHE:
        return _simulate(rows, compute)
    cache = _CACHE[0]
    keys = [row_key(r.scenario, r.metric, compute) for r in rows]
    out = [cache.get(k) for k in keys]
    missing = [i for i, v in enumerate(out) if v is None]
    if missing:
        for i, v in zip(missing, _simulate([rows[i] for i in missing], compute), strict=True):
            out[i] = float(v)
            cache.put(keys[i], float(v))
    return np.array(out, dtype=float)


@dataclass(frozen=True)
class FitResult:
    """Fitted values, the predictions they give, and the solver's report."""

    params: dict[str, float]
    predicted: np.ndarray
    measured: np.ndarray
    converged: bool
    cost: float

    @property
    def errors(self) -> np.ndarray:
        """Relative error of each row, predicted / measured - 1."""
        return self.predicted / self.measured - 1


def fit_rows(rows: Sequence[TrainingRow], specs: Sequence[ParamSpec], start: Mapping[str, float],
             screen_log2: int = 2, warm: Mapping[str, float] | None = None,
             balance: bool = False) -> FitResult:  # fmt: skip
    """Fit ``specs`` to ``rows`` (robust, deterministic); ``start`` is the prior centre,
    ``warm`` an optional first start; ``balance`` weighs each table equally
    (:func:`table_weights` of ``rows``, as ``sqrt(w)`` on each log residual)."""
    meas = np.array([r.measured for r in rows])
    scale = np.sqrt(table_weights(rows)) if balance else np.ones(len(rows))

    def values(u: np.ndarray) -> dict[str, float]:
        return {s.key: s.value(float(x)) for s, x in zip(specs, u, strict=True)}

    def residuals(u: np.ndarray, tau: float) -> np.ndarray:
        return scale * np.log(predict(rows, values(u)) / meas)

    u0 = np.array([s.unit(start[s.key]) for s in specs])
    first = np.array([s.unit(warm[s.key]) for s in specs]) if warm else None
    sol = solve(residuals, u0, f_scale=0.05, prior_width=1.0, softness=(0.0,),
                screen_log2=screen_log2, refine=1, max_nfev=80 * (len(specs) + 1),
                first=first)  # fmt: skip
    params = values(sol.u)
    return FitResult(params, predict(rows, params), meas, sol.converged, sol.cost)


def holdout_errors(rows: Sequence[TrainingRow], specs: Sequence[ParamSpec],
                   start: Mapping[str, float], warm: Mapping[str, float],
                   balance: bool = False) -> np.ndarray:  # fmt: skip
    """Relative error of each row predicted by a fit on the rows of the other groups.

    Each refit keeps the prior centred on ``start`` (the catalog values before the fit)
    and begins its search at ``warm`` (the fit on all rows); ``balance`` weighs the tables
    of the rows kept equally, as :func:`fit_rows` does.
    """
    out = np.zeros(len(rows))
    for group in dict.fromkeys(r.group for r in rows):
        held = [i for i, r in enumerate(rows) if r.group == group]
        rest = [r for r in rows if r.group != group]
        fit = fit_rows(rest, specs, start, screen_log2=0, warm=warm, balance=balance)
        pred = predict([rows[i] for i in held], fit.params)
        for i, p in zip(held, pred, strict=True):
            out[i] = p / rows[i].measured - 1
    return out


def validation(rows: Sequence[TrainingRow], pred: np.ndarray, holdout: np.ndarray | None,
               balance: bool = False) -> dict[str, Any]:  # fmt: skip
    """The ``validation:`` record of a catalog entry: errors over all rows and per table,
    and, for a ``balance``d fit, how its rows were weighed."""
    err = np.abs(pred / np.array([r.measured for r in rows]) - 1)
    out: dict[str, Any] = {
        "rows": len(rows),
        "mean_abs_error": round(float(err.mean()), 4),
        "max_abs_error": round(float(err.max()), 4),
    }
    if holdout is not None:
        out["holdout_mean_abs_error"] = round(float(np.abs(holdout).mean()), 4)
        out["holdout_max_abs_error"] = round(float(np.abs(holdout).max()), 4)
        out["holdout"] = (
            "one MPT size (all its llm-foundry rows) or one Megatron row left out per refit"
        )
    out["tables"] = {
        table: round(float(err[[i for i, r in enumerate(rows) if r.table == table]].mean()), 4)
        for table in dict.fromkeys(r.table for r in rows)
    }
    if balance:
        out["weights"] = "each table equally: row weight rows / (tables x rows of its table)"
    out["command"] = "python -m calibrate.fit_training --gpu GPU --fit --holdout --write"
    return out


def fragmentation_bound(rows: Sequence[TrainingRow]) -> tuple[float, list[tuple[str, float]]]:
    """The largest allocator fragmentation under which every run (that ran) fits, and the
    runs the memory model puts over the HBM even without fragmentation (label, GiB over)."""
    from sim.training.memory.report import MemoryParams, memory_per_gpu
    from sim.training.setup import prepare_step

    bound, over = np.inf, []
    for r in rows:
        sc = r.scenario
        setup = prepare_step(sc)
        mem = memory_per_gpu(sc.model, setup.plan, sc.training.seq_len, setup.topology.gpu.hbm_bytes,
                             MemoryParams(fragmentation=0.0), sc.training.flash_attention,
                             sc.training.cross_entropy)  # fmt: skip
        base = mem.total_bytes - mem.workspace_bytes
        room = mem.hbm_bytes - mem.workspace_bytes - base
        if room < 0:
            over.append((f"{r.table}: {r.label}", -room / 2**30))
        else:
            bound = min(bound, room / base)
    return float(bound), over


def _table(rows: Sequence[TrainingRow], pred: np.ndarray, holdout: np.ndarray | None,
           emit: Callable[[str], None]) -> None:  # fmt: skip
    emit(f"{'table':<30} {'row':<30} {'published':>10} {'predicted':>10} {'error':>7}"
         + (f" {'hold-out':>8}" if holdout is not None else ""))  # fmt: skip
    for i, r in enumerate(rows):
        e = pred[i] / r.measured - 1
        ho = f" {holdout[i]:>+8.1%}" if holdout is not None else ""
        emit(
            f"{r.table[:30]:<30} {r.label:<30} {r.measured:>10.1f} {pred[i]:>10.1f} {e:>+7.1%}{ho}"
        )
    for table in dict.fromkeys(r.table for r in rows):
        idx = [i for i, r in enumerate(rows) if r.table == table]
        err = np.abs(pred[idx] / np.array([rows[i].measured for i in idx]) - 1)
        line = f"{table}: {len(idx)} rows, mean |error| {err.mean():.1%}, max {err.max():.1%}"
        if holdout is not None:
            ho = np.abs(holdout[idx])
            line += f"; hold-out mean {ho.mean():.1%}, max {ho.max():.1%}"
        emit(line)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: residual table of the catalog values, or a refit (see module doc)."""
    ap = argparse.ArgumentParser(prog="python -m calibrate.fit_training", description=__doc__)
    ap.add_argument("--gpu", required=True, help=f"GPU type: {', '.join(FITS)}")
    ap.add_argument("--fit", action="store_true", help="refit the parameters")
    ap.add_argument("--holdout", action="store_true", help="also hold-out errors (slow)")
    ap.add_argument("--data", type=Path, default=DATA, help="folder of the published tables")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (same results)")
    ap.add_argument("--write", action="store_true", help="write the fit into compute.yaml")
    ap.add_argument("--memory", action="store_true", help="fragmentation bound of the runs")
    args = ap.parse_args(argv)
    try:
        rows = rows_for(args.gpu, args.data)
    except CalibrationError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    use_workers(rows, args.jobs)
    entries, _, specs = FITS[args.gpu]
    base = compute_params(entries[0])
    start = {s.key: float(getattr(base, s.key)) for s in specs}
    params = start
    balance = args.gpu in BALANCED
    pred = predict(rows)
    if args.fit:
        # the first start is the prior centre, the catalog's values: a refit starts warm
        fit = fit_rows(rows, specs, start, balance=balance)
        params, pred = fit.params, fit.predicted
        print(f"fitted ({'converged' if fit.converged else 'NOT converged'}): "
              + ", ".join(f"{k}={v:.4g}" for k, v in params.items()))  # fmt: skip
    if args.memory:
        bound, over = fragmentation_bound([r for r in rows if r.metric == "tokens_per_gpu"])
        print(f"largest fragmentation under which every llm-foundry run fits: {bound:.4f}")
        for label, gib in over:
            print(f"  over the HBM even without fragmentation: {label} (+{gib:.1f} GiB)")
        return 0
    holdout = holdout_errors(rows, specs, start, params, balance) if args.holdout else None
    _table(rows, pred, holdout, print)
    if args.write:
        if not args.fit:
            print("error: --write needs --fit", file=sys.stderr)
            return 2
        write_catalog(entries[0], params, validation(rows, pred, holdout, balance))
        print(f"wrote {', '.join(params)} and validation into {CATALOG} ({entries[0]})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
