"""Results as one pandas DataFrame (the ``[data]`` extra): a flat row per result.

>>> from sim import load_scenario, simulate_step
>>> r = simulate_step(load_scenario("gpt2-1gpu"), network="analytical")
>>> flat_record(r)["plan.tp"], "breakdown.compute" in flat_record(r)
(1, True)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sim.errors import MissingExtraError

__all__ = ["flat_record", "results_frame"]


def flat_record(result: Any) -> dict[str, Any]:
    """One flat dict of a result.

    A :class:`~sim.StepResult` gives :meth:`~sim.StepResult.to_record`; a
    :class:`~sim.CollectiveResult` its ``record()`` with per-scope wire bytes as
    ``wire_bytes_by_scope.SCOPE`` columns; a mapping (a sweep row, a record read from a
    file) has its nested mappings flattened the same way (``plan.tp``).
    """
    if hasattr(result, "to_record"):
        return dict(result.to_record())
    if hasattr(result, "record"):
        result = result.record()
    if not isinstance(result, Mapping):
        raise TypeError(f"cannot make a record of {type(result).__name__}")
    out: dict[str, Any] = {}
    for key, value in result.items():
        if isinstance(value, Mapping):
            out.update({f"{key}.{k}": v for k, v in value.items()})
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            out[key] = "; ".join(value)
        else:
            out[key] = value
    return out


def results_frame(results: Iterable[Any]) -> Any:
    """A :class:`pandas.DataFrame` with one row per result, columns in first-seen order.

    Parameters
    ----------
    results : iterable
        StepResults, CollectiveResults, or dicts (sweep rows, plan entries, run records).

    Raises
    ------
    MissingExtraError
        pandas is not installed (``pip install 'clustersim[data]'``).

    Examples
    --------
    >>> from sim import load_scenario, simulate_step
    >>> s = load_scenario("gpt2-1gpu")
    >>> df = results_frame([simulate_step(s, network="analytical")])
    >>> len(df), int(df.loc[0, "gpus"])
    (1, 1)
    """
    try:
        import pandas as pd
    except ImportError:
        raise MissingExtraError(
            "results_frame needs pandas: pip install 'clustersim[data]'"
        ) from None
    rows = [flat_record(r) for r in results]
    columns: dict[str, None] = {}
    for r in rows:
        columns.update(dict.fromkeys(r))
    return pd.DataFrame(rows, columns=list(columns))
