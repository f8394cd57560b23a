"""Chakra collective types <-> clustersim's collective ops, and what ``comm_size`` counts.

clustersim sizes a collective as nccl-tests does (:mod:`sim.collectives.schedule`):
all-reduce and broadcast the buffer, all-gather the gathered output, reduce-scatter the
input, all-to-all one rank's send buffer. ASTRA-sim's ``comm_size`` is the same except for
all-gather, where it is one rank's contribution: its ring, halving-doubling and tree
all-gathers send ``comm_size`` per step and end with ``comm_size * n`` bytes
(``final_data_size = data_size * nodes_in_ring`` in ``Ring.cc`` and ``HalvingDoubling.cc``).
So an all-gather of ``nbytes`` on ``n`` ranks is written with ``comm_size = nbytes / n``.

>>> op_bytes("ALL_GATHER", 2**20, 8), comm_size("all_gather", 8 * 2**20, 8)
(8388608, 1048576)
>>> op_bytes("ALL_REDUCE", 2**26, 16)
67108864
"""

from __future__ import annotations

from sim.errors import ConfigError

__all__ = ["CHAKRA_TYPES", "CLUSTERSIM_OPS", "comm_size", "op_bytes"]

#: The Chakra collective types clustersim's collective algorithms run, by op name.
CLUSTERSIM_OPS: dict[str, str] = {
    "ALL_REDUCE": "all_reduce",
    "ALL_GATHER": "all_gather",
    "REDUCE_SCATTER": "reduce_scatter",
    "ALL_TO_ALL": "all_to_all",
    "BROADCAST": "broadcast",
    "REDUCE": "reduce",
}
#: clustersim's op names by Chakra collective type (the inverse of :data:`CLUSTERSIM_OPS`).
CHAKRA_TYPES: dict[str, str] = {op: chakra for chakra, op in CLUSTERSIM_OPS.items()}


def _check(comm_type: str, n: int) -> str:
    if comm_type not in CLUSTERSIM_OPS:
        raise ConfigError(
            f"comm_type {comm_type} has no clustersim collective; supported: "
            f"{', '.join(CLUSTERSIM_OPS)}"
        )
    if n < 1:
        raise ConfigError(f"a collective needs at least one rank, got {n}")
    return CLUSTERSIM_OPS[comm_type]


def op_bytes(comm_type: str, comm_bytes: int, n: int) -> int:
    """clustersim's message size (bytes) of a Chakra collective of ``comm_bytes`` on ``n`` ranks.

    Raises
    ------
    ConfigError
        A type clustersim has no collective for (GATHER, SCATTER, REDUCE_SCATTER_BLOCK,
        BARRIER) or ``n < 1``.
    """
    op = _check(comm_type, n)
    return comm_bytes * n if op == "all_gather" else comm_bytes


def comm_size(op: str, nbytes: int, n: int) -> int:
    """The ``comm_size`` (bytes) to write for clustersim's ``op`` of ``nbytes`` on ``n`` ranks.

    Raises
    ------
    ConfigError
        An op with no Chakra type (``send_recv`` is a send/recv pair), ``n < 1``, or an
        all-gather whose size is not a whole number of bytes per rank.
    """
    if op not in CHAKRA_TYPES:
        raise ConfigError(
            f"op {op!r} has no Chakra collective type; supported: {', '.join(CHAKRA_TYPES)}"
        )
    _check(CHAKRA_TYPES[op], n)
    if op != "all_gather":
        return nbytes
    if nbytes % n:
        raise ConfigError(f"all_gather of {nbytes} B on {n} ranks: not a whole number per rank")
    return nbytes // n
