"""NVLink SHARP (NVLS): reduction and multicast inside the NVSwitch.

Needs ``layout.nvswitch``. The switch is one reducer participant, id ``n``; it starts
holding nothing. Shard ``r`` (chunks ``r*channels + ch``) belongs to rank ``r``, as in
NCCL, where rank ``r`` issues the ``multimem`` loads and stores for its shard.

- all_reduce (4 steps): every rank pushes its whole buffer into the switch, which sums
  it (``reduce=True`` rank→switch); the switch returns shard ``r`` to rank ``r`` (the
  ``multimem.ld_reduce``); rank ``r`` stores shard ``r`` back into the switch, which
  multicasts every shard to every rank (``multimem.st``). Per rank:
  ``nbytes·(1 + 1/n)`` out and the same in.
- reduce_scatter (2 steps): ranks→switch (reduce), switch→owner of each shard.
- all_gather (2 steps): owner→switch, switch→every rank (multicast includes the owner).

``pipeline_chunks = C`` streams ``C`` pieces through these steps (``steps + C - 1``
slots), as NCCL's NVLS kernels do chunk by chunk. ``channels`` splits every transfer
into parallel flows.
"""

from __future__ import annotations

from sim.collectives.layout import Layout, check_args, per_channel
from sim.collectives.pipeline import pipeline
from sim.collectives.schedule import Phase, Schedule, Transfer
from sim.errors import UnsupportedCollectiveError

__all__ = ["SUPPORTS", "nvls"]

SUPPORTS = ("all_reduce", "reduce_scatter", "all_gather")

# One step as (src, dst, shards, reduce); "switch" stands for participant n.
_PUSH_ALL, _RETURN_OWN, _STORE_OWN, _MULTICAST = range(4)
_STEPS = {
    "all_reduce": (_PUSH_ALL, _RETURN_OWN, _STORE_OWN, _MULTICAST),
    "reduce_scatter": (_PUSH_ALL, _RETURN_OWN),
    "all_gather": (_STORE_OWN, _MULTICAST),
}
_LABELS = ("ranks -> switch (reduce)", "switch -> owner", "owner -> switch", "switch multicast")


def _step(kind: int, n: int, channels: int) -> list[Transfer]:
    switch = n
    everything = range(n)
    out: list[Transfer] = []
    for r in range(n):
        for ch in range(channels):
            if kind == _PUSH_ALL:
                out.append(Transfer(r, switch, per_channel(everything, channels, ch), True))
            elif kind == _RETURN_OWN:
                out.append(Transfer(switch, r, (r * channels + ch,)))
            elif kind == _STORE_OWN:
                out.append(Transfer(r, switch, (r * channels + ch,)))
            else:
                out.append(Transfer(switch, r, per_channel(everything, channels, ch)))
    return out


def nvls(
    op: str,
    n: int,
    nbytes: float,
    *,
    layout: Layout,
    channels: int = 1,
    root: int = 0,
    pipeline_chunks: int = 1,
) -> Schedule:
    """NVLS (in-switch reduction) schedule for ``op`` on ``n`` ranks moving ``nbytes`` bytes.

    Parameters
    ----------
    op : str
        all_reduce, reduce_scatter or all_gather.
    n : int
        Ranks in the group.
    nbytes : float
        nccl-tests size of the buffer (bytes).
    layout : Layout
        Must have ``nvswitch=True``.
    channels : int
        Parallel flows per transfer, each ``1/channels`` of it.
    root : int
        Unused (no rooted ops).
    pipeline_chunks : int
        Pieces streamed through the steps.

    Raises
    ------
    UnsupportedCollectiveError
        For other ops, or a layout without a shared NVSwitch.

    Examples
    --------
    >>> s = nvls("all_reduce", 8, 8e6, layout=Layout.flat(8, nvswitch=True))
    >>> s.num_steps, s.reducers, s.chunk_bytes
    (4, 1, 1000000.0)
    """
    check_args("nvls", SUPPORTS, op, n, nbytes, layout, channels, root, pipeline_chunks)
    if not layout.nvswitch:
        raise UnsupportedCollectiveError(
            f"algorithm 'nvls' for op {op!r} needs layout.nvswitch=True "
            "(all ranks in one NVSwitch domain)"
        )
    kinds = _STEPS[op] if n > 1 else ()
    phase = Phase(
        len(kinds),
        lambda k: _step(kinds[k], n, channels),
        False,
        " / ".join(_LABELS[kind] for kind in kinds),
    )
    phases = (phase,) if kinds else ()
    base = Schedule(op, "nvls", n, n * channels, nbytes / (n * channels), phases, 1, root)
    return pipeline(base, pipeline_chunks)
