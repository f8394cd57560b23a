"""Integer splits by speed: micro-batches among data-parallel replicas, layers among stages.

Both are largest-share roundings of a proportional split, stated exactly so that a test
can check them:

- :func:`split_microbatches`: replica ``r`` of throughput ``w_r`` gets
  ``floor(M w_r / W)`` micro-batches (``W = sum w``); the ``M - sum floor`` left over go one
  each to the fastest replicas (ties: lower index first); a replica left with none takes
  one from the replica holding the most (each replica must run at least one).
- :func:`split_layers`: stage ``s`` of speed ``v_s`` gets its share of ``L`` layers by
  the largest-remainder method (Hamilton), at least one each.

>>> split_microbatches(8, [2.0, 1.0])
[6, 2]
>>> split_layers(12, [2.0, 1.0])
[8, 4]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from sim.errors import ConfigError

__all__ = ["split_layers", "split_microbatches"]


def split_microbatches(total: int, throughput: Sequence[float]) -> list[int]:
    """Micro-batches per replica in proportion to ``throughput`` (any positive unit).

    Parameters
    ----------
    total : int
        Micro-batches of the step over all replicas (``global_batch / micro_batch``).
    throughput : sequence of float
        Each replica's speed, e.g. micro-batches per second (> 0).

    Returns
    -------
    list of int
        Summing to ``total``, each >= 1 (rounding in the module docstring).

    Raises
    ------
    ConfigError
        Fewer micro-batches than replicas.

    Examples
    --------
    >>> split_microbatches(10, [3.0, 1.0, 1.0])
    [6, 2, 2]
    """
    n = len(throughput)
    if total < n:
        raise ConfigError(
            f"parallel.batch_split: proportional needs at least one micro-batch per replica: "
            f"training.global_batch / parallel.micro_batch = {total} < parallel.dp = {n}"
        )
    assert all(w > 0 for w in throughput), throughput
    whole = sum(throughput)
    out = [math.floor(total * w / whole) for w in throughput]
    fastest = sorted(range(n), key=lambda r: (-throughput[r], r))
    for r in fastest[: total - sum(out)]:
        out[r] += 1
    for r in range(n):
        if out[r] == 0:
            donor = max(range(n), key=lambda q: (out[q], -q))
            out[donor] -= 1
            out[r] = 1
    assert sum(out) == total and min(out) >= 1, (out, total)
    return out


def split_layers(layers: int, speed: Sequence[float]) -> list[int]:
    """Layers per pipeline stage in proportion to ``speed`` (largest remainder, >= 1 each).

    Parameters
    ----------
    layers : int
        The model's layers.
    speed : sequence of float
        Each stage's speed, e.g. layers per second (> 0).

    Returns
    -------
    list of int
        Summing to ``layers``.

    Raises
    ------
    ConfigError
        Fewer layers than stages.

    Examples
    --------
    >>> split_layers(80, [1.0, 1.0, 0.4, 0.4])
    [29, 29, 11, 11]
    """
    n = len(speed)
    if layers < n:
        raise ConfigError(
            f"parallel.stage_split: speed needs a layer per stage: model.layers={layers} "
            f"< parallel.pp={n}"
        )
    whole = sum(speed)
    exact = [layers * v / whole for v in speed]
    out = [max(1, math.floor(x)) for x in exact]
    while sum(out) > layers:  # the max(1, .) floors took layers from others
        r = max((q for q in range(n) if out[q] > 1), key=lambda q: (out[q] - exact[q], -q))
        out[r] -= 1
    order = sorted(range(n), key=lambda q: (-(exact[q] - out[q]), q))
    for r in order[: layers - sum(out)]:
        out[r] += 1
    assert sum(out) == layers and min(out) >= 1, (out, layers)
    return out
