"""Leave-one-table-out (LOTO) validation of the training fit: is a fit right on a published
table it never saw?

For every GPU type of :data:`TABLES` (each shared published table belongs to one) and each
of its tables, three errors of every row (predicted / published - 1):

- **shipped**: the catalog's values (``topologies/catalog/compute.yaml``), what ``run``
  uses today;
- **fitted**: the GPU type's fitted parameters (:data:`calibrate.fit_training.FITS`)
  refitted to all of its tables at once;
- **LOTO**: the same parameters refitted without that table, then the table predicted.
  When a GPU type has a single table there is nothing to refit on; :data:`RULES` says
  what the table is then predicted with, and the output names the rule on its line:
  ``transfer`` (the default): each fitted parameter as the other GPU types fitted it on
  all their tables (their mean in the search coordinates where several did; a parameter
  no other type fits takes its unfitted default), or ``op-level``: every fitted
  parameter at its unfitted default (:class:`~sim.training.compute.params.ComputeParams`'
  dataclass values: no end-to-end factor, only what op-level data and datasheets give).

Every fit minimises the objective of :func:`calibrate.fit_training.fit_rows` (soft-L1 on
log(predicted / published) with ``f_scale`` 0.05, a weak prior of width 1 in the unit
box, each table weighed equally for the GPU types in
:data:`~calibrate.fit_training.BALANCED`), with two differences (:func:`fit_local`):

- the prior is centred on the unfitted defaults, not on the catalog (whose values were
  fitted with every table), so that a left-out table cannot leak into its own
  prediction through the prior;
- the search is local and of Gauss-Newton type (scipy's trust-region reflective
  ``least_squares`` with a forward-difference Jacobian), starting from the catalog's
  values for the all-tables fit and from the all-tables fit for each LOTO refit: about
  a quarter of the simulations of ``fit_rows``' screened L-BFGS-B search, which makes
  the protocol affordable on two cores. A start that saw the table only picks the local
  optimum the search ends in; the prior and the data decide the optimum.

Predictions go through :func:`calibrate.fit_training.predict`, so ``--jobs`` spreads rows
over processes and a :class:`~calibrate.prediction_cache.PredictionCache` makes a rerun
with unchanged code read every prediction from disk (same bytes out).

Run: ``python benchmarks/validate_training.py [--jobs 2] [--table T] [--rows] [--json]``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from calibrate.fit_training import (
    BALANCED,
    DATA,
    FITS,
    ParamSpec,
    TrainingRow,
    predict,
    table_rows,
    table_weights,
    use_workers,
)
from sim.errors import CalibrationError
from sim.training.compute.params import ComputeParams, compute_params

__all__ = [
    "F_SCALE",
    "PRIOR_WIDTH",
    "RULES",
    "TABLES",
    "VALIDATION_ONLY",
    "GpuFits",
    "TableResult",
    "command_for",
    "fit_local",
    "format_results",
    "gpu_of",
    "run_protocol",
]

#: Soft-L1 scale (log residuals) and prior width (unit box): ``fit_rows``' values.
F_SCALE = 0.05
PRIOR_WIDTH = 1.0

#: Tables that validate the fit but are not what the shipped catalog was fitted to.
VALIDATION_ONLY: tuple[str, ...] = (
    "megatron-core-h100-weak-scaling.csv",
    "megatron-mfu-hfu-a100.csv",
)

#: GPU type (a key of FITS) -> every shared published table of it, in print order.
TABLES: dict[str, tuple[str, ...]] = {
    "H100-SXM": (*FITS["H100-SXM"][1], "megatron-core-h100-weak-scaling.csv"),
    "A100-SXM": (*FITS["A100-SXM"][1], "megatron-mfu-hfu-a100.csv"),
}

#: What a table is predicted with when its GPU type has no other table (module doc).
RULES: dict[str, str] = {
    "transfer": "the other GPU types' all-tables fits of each parameter (their mean; "
    "unfitted default where none fits it)",
    "op-level": "every fitted parameter at its unfitted default (no end-to-end factor)",
}


def gpu_of(table: str) -> str:
    """The GPU type whose tables include ``table``.

    Raises
    ------
    CalibrationError
        An unknown table (the message lists the known ones).
    """
    for gpu, tables in TABLES.items():
        if table in tables:
            return gpu
    known = ", ".join(t for ts in TABLES.values() for t in ts)
    raise CalibrationError(f"--table {table!r}: not a shared table; known: {known}")


def command_for(table: str, jobs: int = 2) -> str:
    """The command that prints ``table``'s line (and its rows) on its own."""
    return f"python benchmarks/validate_training.py --table {table} --rows --jobs {jobs}"


@dataclass(frozen=True)
class TableResult:
    """One table's rows and their three errors (see the module docstring)."""

    table: str
    gpu: str
    rows: tuple[TrainingRow, ...]
    shipped: np.ndarray
    fitted: np.ndarray
    loto: np.ndarray
    loto_basis: str

    def summary(self) -> dict[str, Any]:
        """Mean and max |error| of each kind, rounded to 0.1 point, and how LOTO was made."""

        def pct(e: np.ndarray) -> dict[str, float]:
            a = np.abs(e)
            return {"mean_pct": round(float(a.mean()) * 100, 1),
                    "max_pct": round(float(a.max()) * 100, 1)}  # fmt: skip

        return {"table": self.table, "gpu": self.gpu, "rows": len(self.rows),
                "shipped": pct(self.shipped), "fitted": pct(self.fitted),
                "loto": pct(self.loto), "loto_basis": self.loto_basis,
                "command": command_for(self.table)}  # fmt: skip


@dataclass(frozen=True)
class GpuFits:
    """A GPU type's all-tables fit and its LOTO refits (parameter values by key)."""

    gpu: str
    specs: tuple[ParamSpec, ...]
    prior: dict[str, float]
    catalog: dict[str, float]
    all_tables: dict[str, float]
    converged: bool
    loto: dict[str, dict[str, float]] = field(default_factory=dict)


def _unfitted(specs: Sequence[ParamSpec]) -> dict[str, float]:
    """Each parameter's dataclass default, clipped into its search bounds."""
    base = ComputeParams()
    return {s.key: min(max(float(getattr(base, s.key)), s.low), s.high) for s in specs}


def _transfer(gpu: str, fits: Mapping[str, GpuFits]) -> tuple[dict[str, float], str]:
    """``gpu``'s fitted parameters as the other GPU types fitted them (see :data:`RULES`)."""
    specs = FITS[gpu][2]
    values = _unfitted(specs)
    used: list[str] = []
    for s in specs:
        others = [
            f.all_tables[s.key] for g, f in fits.items() if g != gpu and s.key in f.all_tables
        ]
        if others:
            values[s.key] = s.value(float(np.mean([s.unit(v) for v in others])))
            used.append(s.key)
    donors = sorted(g for g in fits if g != gpu)
    if not used:
        return values, "op-level: no other GPU type fits these parameters"
    return values, (f"transfer from {', '.join(donors)} ({', '.join(used)}); "
                    "unfitted defaults for the rest")  # fmt: skip


def fit_local(rows: Sequence[TrainingRow], specs: Sequence[ParamSpec], prior: Mapping[str, float],
              start: Mapping[str, float], balance: bool = False) -> tuple[dict[str, float], bool]:  # fmt: skip
    """Parameter values minimising ``fit_rows``' objective with the prior at ``prior``,
    searched locally from ``start`` (see the module docstring), and whether the search met
    its tolerances (``xtol`` 1e-6 in the unit box, ``ftol`` 1e-9) before 40 Jacobians."""
    meas = np.array([r.measured for r in rows])
    scale = np.sqrt(table_weights(rows)) if balance else np.ones(len(rows))
    u0 = np.array([s.unit(prior[s.key]) for s in specs])

    def values(u: np.ndarray) -> dict[str, float]:
        return {s.key: s.value(float(x)) for s, x in zip(specs, u, strict=True)}

    def residuals(u: np.ndarray) -> np.ndarray:
        data = scale * np.log(predict(rows, values(np.clip(u, 0.0, 1.0))) / meas)
        return np.concatenate([data, F_SCALE * (u - u0) / PRIOR_WIDTH])

    x0 = np.array([s.unit(start[s.key]) for s in specs])
    sol = least_squares(residuals, x0, bounds=(0.0, 1.0), method="trf", loss="soft_l1",
                        f_scale=F_SCALE, diff_step=1e-3, xtol=1e-6, ftol=1e-9, gtol=1e-9,
                        max_nfev=40 * (len(specs) + 1))  # fmt: skip
    return values(np.clip(sol.x, 0.0, 1.0)), bool(sol.status > 0)


def _fit_gpu(gpu: str, rows: Sequence[TrainingRow], emit: Callable[[str], None]) -> GpuFits:
    entries, _, specs = FITS[gpu]
    catalog = {s.key: float(getattr(compute_params(entries[0]), s.key)) for s in specs}
    prior = _unfitted(specs)
    emit(f"{gpu}: fitting {len(specs)} parameters to {len(rows)} rows")
    params, ok = fit_local(rows, specs, prior, catalog, gpu in BALANCED)
    return GpuFits(gpu, tuple(specs), prior, catalog, params, ok)


def _errors(rows: Sequence[TrainingRow], compute: Mapping[str, float] | None) -> np.ndarray:
    return predict(rows, compute) / np.array([r.measured for r in rows]) - 1


def run_protocol(
    tables: Mapping[str, Sequence[str]] | None = None,
    data: Path = DATA,
    rule: str = "transfer",
    only: Sequence[str] | None = None,
    emit: Callable[[str], None] = lambda _: None,
    jobs: int = 1,
) -> tuple[list[GpuFits], list[TableResult]]:
    """Shipped, all-tables and leave-one-table-out errors of every table.

    Parameters
    ----------
    tables : mapping, optional
        GPU type -> its tables (default :data:`TABLES`); a type with one table is
        predicted by ``rule`` in the LOTO column.
    data : Path
        Folder of the published tables.
    rule : {'transfer', 'op-level'}
        See :data:`RULES`.
    only : sequence of str, optional
        Tables whose LOTO refits to run and whose results to return (default: all);
        the all-tables fits always use every table of the GPU type.
    emit : callable
        Receives one progress line per fit.
    jobs : int
        Worker processes for the predictions (:func:`calibrate.fit_training.use_workers`;
        the numbers do not depend on it).

    Returns
    -------
    (list of GpuFits, list of TableResult)

    Raises
    ------
    CalibrationError
        An absent table, an unknown rule, or a fit that did not converge.
    """
    if rule not in RULES:
        raise CalibrationError(f"--rule {rule!r} is unknown; allowed: {', '.join(RULES)}")
    tables = dict(tables if tables is not None else TABLES)
    rows = {gpu: [r for t in ts for r in table_rows(t, data)] for gpu, ts in tables.items()}
    wanted = set(only) if only is not None else {t for ts in tables.values() for t in ts}
    use_workers([r for gpu in tables for r in rows[gpu]], jobs)
    fits = {gpu: _fit_gpu(gpu, rows[gpu], emit) for gpu in tables if wanted & set(tables[gpu])}
    results: list[TableResult] = []
    for gpu, fitted in fits.items():
        for table in tables[gpu]:
            if table not in wanted:
                continue
            mine = [r for r in rows[gpu] if r.table == table]
            rest = [r for r in rows[gpu] if r.table != table]
            if rest:
                emit(f"{gpu}: refitting without {table} ({len(rest)} rows)")
                params, ok = fit_local(rest, fitted.specs, fitted.prior, fitted.all_tables,
                                       gpu in BALANCED)  # fmt: skip
                if not ok:
                    raise CalibrationError(f"{gpu}: the refit without {table} did not converge")
                basis = "refit on " + ", ".join(t for t in tables[gpu] if t != table)
            elif rule == "transfer":
                params, basis = _transfer(gpu, fits)
            else:
                params, basis = _unfitted(fitted.specs), "op-level: unfitted defaults"
            fitted.loto[table] = params
            results.append(TableResult(table, gpu, tuple(mine), _errors(mine, None),
                                       _errors(mine, fitted.all_tables),
                                       _errors(mine, params), basis))  # fmt: skip
    return list(fits.values()), results


def _pair(e: np.ndarray) -> str:
    a = np.abs(e)
    return f"{a.mean():>5.1%} / {a.max():>5.1%}"


def format_results(fits: Sequence[GpuFits], results: Sequence[TableResult],
                   rows: bool = False, jobs: int = 2) -> str:  # fmt: skip
    """The protocol's text report: the fits, one line per table, the commands."""
    out: list[str] = []
    for f in fits:
        vals = ", ".join(f"{k}={v:.4g}" for k, v in f.all_tables.items())
        conv = "converged" if f.converged else "NOT converged"
        out.append(f"{f.gpu} all-tables fit ({conv}): {vals}")
    out.append("")
    out.append(f"{'table':<36} {'GPU type':<9} {'rows':>4}  {'shipped mean/max':>16}  "
               f"{'fitted mean/max':>16}  {'LOTO mean/max':>16}  LOTO predicted with")  # fmt: skip
    for r in results:
        out.append(f"{r.table:<36} {r.gpu:<9} {len(r.rows):>4}  {_pair(r.shipped):>16}  "
                   f"{_pair(r.fitted):>16}  {_pair(r.loto):>16}  {r.loto_basis}")  # fmt: skip
    out.append("")
    out.append("commands (each table's line and its rows):")
    out += [f"  {r.table}: {command_for(r.table, jobs)}" for r in results]
    if rows:
        for r in results:
            out.append("")
            out.append(f"{r.table}: {'row':<34} {'published':>10} {'shipped':>8} "
                       f"{'fitted':>8} {'LOTO':>8}")  # fmt: skip
            for i, row in enumerate(r.rows):
                out.append(f"  {row.label:<34} {row.measured:>10.1f} {r.shipped[i]:>+8.1%} "
                           f"{r.fitted[i]:>+8.1%} {r.loto[i]:>+8.1%}")  # fmt: skip
    return "\n".join(out)
