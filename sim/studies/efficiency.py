"""Scaling efficiency of sweep rows: throughput per GPU relative to the smallest GPU count.

A row's reference is the row with the fewest GPUs among those that agree with it on
every swept key except the keys that set the GPU count. A key sets the GPU count when
each of its values goes with one count only (``cluster.nodes``, or a global batch that
grows with the cluster in a weak-scaling study). Only simulated rows that fit in memory
serve as references; ties on GPU count go to the first row in sweep order.

>>> rows = [{"cluster.nodes": n, "net": f, "gpus": 8 * n, "tokens_per_s": t, "fits": True}
...         for n, f, t in ((1, "ib", 800.0), (2, "ib", 1520.0), (1, "eth", 800.0), (2, "eth", 1200.0))]
>>> [round(e, 3) for e in scaling_efficiency(rows, ["cluster.nodes", "net"])]
[1.0, 0.95, 1.0, 0.75]
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["gpu_count_keys", "scaling_efficiency"]


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _ok(row: Mapping[str, Any]) -> bool:
    return not row.get("reason") and bool(row.get("gpus")) and row.get("tokens_per_s") is not None


def gpu_count_keys(rows: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> list[str]:
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


def scaling_efficiency(
    rows: Sequence[Mapping[str, Any]], keys: Sequence[str], moving: Sequence[str] = ()
) -> list[float | None]:
    """Per row: ``(tokens_per_s / gpus) / (reference tokens_per_s / reference gpus)``.

    ``moving``: keys that move together (a study's ``cases``); when their combined values
    set the GPU count (each case has its own), they are treated like the keys that set it.
    None for rows that were not simulated or have no fitting reference.
    """
    scale = set(gpu_count_keys(rows, keys))
    if moving:
        joined = [{**r, "\0cases": [r.get(k) for k in moving]} for r in rows]
        if gpu_count_keys(joined, ["\0cases"]):
            scale |= set(moving)
    others = [k for k in keys if k not in scale]
    refs: dict[str, Mapping[str, Any]] = {}
    for r in rows:
        if not (_ok(r) and r.get("fits")):
            continue
        group = _key([r.get(k) for k in others])
        best = refs.get(group)
        if best is None or int(r["gpus"]) < int(best["gpus"]):
            refs[group] = r
    out: list[float | None] = []
    for r in rows:
        ref = refs.get(_key([r.get(k) for k in others]))
        if not _ok(r) or ref is None:
            out.append(None)
            continue
        per_gpu = float(r["tokens_per_s"]) / int(r["gpus"])
        out.append(per_gpu / (float(ref["tokens_per_s"]) / int(ref["gpus"])))
    return out
