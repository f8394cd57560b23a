"""Scaling efficiency of sweep rows: per series, throughput per GPU against its smallest point.

A *series* is the rows that differ only in GPU count: they agree on every swept key
except the keys that set the GPU count, and run on the same GPU model. A key sets the
GPU count when each of its values goes with one count only (``cluster.nodes``, or a
global batch that grows with the cluster in a weak-scaling study); a study's ``cases``
set it together when each case has its own count. A row's efficiency is its throughput
per GPU over that of its series' reference: the fitting row with the fewest GPUs (ties
to the first in sweep order). Rows that differ in anything else (the fabric, the model,
the GPU model, a layout at one size) are never compared: a series with a single GPU
count has no efficiency (None), since there is no scaling in it to measure.

Each row says so in three columns: ``scaling_efficiency``, ``scaling_series`` (the
series' key values, ``""`` when the sweep is one series) and ``scaling_reference_point``
(the ``point`` it is measured against).

>>> rows = [{"point": i, "cluster.nodes": n, "net": f, "gpus": 8 * n, "tokens_per_s": t, "fits": True}
...         for i, (n, f, t) in enumerate(((1, "ib", 800.0), (2, "ib", 1520.0), (1, "eth", 800.0), (2, "eth", 1200.0)))]
>>> [round(e, 3) for e in scaling_efficiency(rows, ["cluster.nodes", "net"])]
[1.0, 0.95, 1.0, 0.75]
>>> scaling_columns(rows, ["cluster.nodes", "net"])[3]
{'scaling_efficiency': 0.75, 'scaling_series': 'net=eth', 'scaling_reference_point': 2}
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["gpu_count_keys", "scaling_columns", "scaling_efficiency", "series_keys"]

Row = Mapping[str, Any]


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _ok(row: Row) -> bool:
    return not row.get("reason") and bool(row.get("gpus")) and row.get("tokens_per_s") is not None


def gpu_count_keys(rows: Sequence[Row], keys: Sequence[str]) -> list[str]:
    """The swept keys that set the GPU count: each value goes with its own GPU count.

    A key with a single value sets nothing (it agrees everywhere anyway), nor does one
    whose values share a GPU count (a micro-batch size swept at one cluster size).
    """
    ok = [r for r in rows if _ok(r)]
    out = []
    for key in keys:
        counts: dict[str, set[int]] = {}
        for r in ok:
            counts.setdefault(_key(r.get(key)), set()).add(int(r["gpus"]))
        sizes = [next(iter(c)) for c in counts.values() if len(c) == 1]
        if len(counts) > 1 and len(sizes) == len(counts) == len(set(sizes)):
            out.append(key)
    return out


def series_keys(rows: Sequence[Row], keys: Sequence[str], moving: Sequence[str] = ()) -> list[str]:
    """The swept keys that tell series apart: all but those that set the GPU count.

    ``moving``: keys that move together (a study's ``cases``); when their combined values
    set the GPU count (each case has its own), they are treated like the keys that set it.
    Keys with one value in the simulated rows are left out (they tell nothing apart).
    """
    scale = set(gpu_count_keys(rows, keys))
    if moving:
        joined = [{**r, "\0cases": [r.get(k) for k in moving]} for r in rows]
        if gpu_count_keys(joined, ["\0cases"]):
            scale |= set(moving)
    ok = [r for r in rows if _ok(r)]
    return [k for k in keys if k not in scale and len({_key(r.get(k)) for r in ok}) > 1]


def _label(row: Row, keys: Sequence[str], with_gpu: bool) -> str:
    parts = [f"{k}={_text(row.get(k))}" for k in keys]
    if with_gpu:
        parts.append(f"gpu={row.get('gpu')}")
    return ", ".join(parts)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else str(value)


def scaling_columns(
    rows: Sequence[Row], keys: Sequence[str], moving: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """Per row: ``scaling_efficiency``, ``scaling_series`` and ``scaling_reference_point``.

    ``scaling_efficiency`` is ``(tokens_per_s / gpus) / (reference tokens_per_s /
    reference gpus)``; None for rows that were not simulated, whose series has no
    fitting reference, or whose series has a single GPU count. A row without a
    ``point`` column is referred to by its index.
    """
    others = series_keys(rows, keys, moving)
    ok = [r for r in rows if _ok(r)]
    with_gpu = len({r.get("gpu") for r in ok}) > 1
    labels = [_label(r, others, with_gpu) for r in rows]
    counts: dict[str, set[int]] = {}
    refs: dict[str, tuple[int, Row]] = {}
    for i, (r, label) in enumerate(zip(rows, labels, strict=True)):
        if not _ok(r):
            continue
        counts.setdefault(label, set()).add(int(r["gpus"]))
        best = refs.get(label)
        if r.get("fits") and (best is None or int(r["gpus"]) < int(best[1]["gpus"])):
            refs[label] = (int(r.get("point", i)), r)
    out: list[dict[str, Any]] = []
    for r, label in zip(rows, labels, strict=True):
        ref = refs.get(label)
        scaling = _ok(r) and ref is not None and len(counts[label]) > 1
        eff, point = None, None
        if scaling and ref is not None:
            per_gpu = float(r["tokens_per_s"]) / int(r["gpus"])
            eff = per_gpu / (float(ref[1]["tokens_per_s"]) / int(ref[1]["gpus"]))
            point = ref[0]
        out.append(
            {
                "scaling_efficiency": eff,
                "scaling_series": label if _ok(r) else None,
                "scaling_reference_point": point,
            }
        )
    return out


def scaling_efficiency(
    rows: Sequence[Row], keys: Sequence[str], moving: Sequence[str] = ()
) -> list[float | None]:
    """Per row, the ``scaling_efficiency`` of :func:`scaling_columns`."""
    return [c["scaling_efficiency"] for c in scaling_columns(rows, keys, moving)]
