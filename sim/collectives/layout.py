"""Where a collective group's ranks sit, and the argument checks every algorithm shares.

A :class:`Layout` tells an algorithm which server each group rank is on and whether the
whole group shares one NVSwitch domain. Algorithms order their rings and trees by it
(ranks of one server next to each other, as NCCL's topology search does) and refuse
shapes they cannot handle with :class:`~sim.errors.UnsupportedCollectiveError`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from sim.collectives.schedule import OPS
from sim.errors import ConfigError, UnsupportedCollectiveError

__all__ = ["Layout", "check_args", "per_channel", "unsupported"]


@dataclass(frozen=True)
class Layout:
    """Placement of a collective group's ranks.

    Attributes
    ----------
    node_of : tuple[int, ...]
        Server (node) index of each group rank; ``len(node_of)`` is the group size.
    nvswitch : bool
        All ranks share one NVSwitch domain, so in-switch reduction (NVLS) is possible.
    node_nvswitch : bool
        Every server's ranks share that server's NVSwitch (NVLS inside each server, as
        NCCL's NVLS-tree uses across servers).
    sharp : bool
        The network switches reduce in-network (InfiniBand SHARP: NCCL's CollNet).

    Examples
    --------
    >>> Layout.grid(nodes=2, per_node=4).nodes
    ((0, 1, 2, 3), (4, 5, 6, 7))
    """

    node_of: tuple[int, ...]
    nvswitch: bool = False
    node_nvswitch: bool = False
    sharp: bool = False

    @classmethod
    def flat(cls, n: int, nvswitch: bool = False) -> Layout:
        """``n`` ranks on one server.

        >>> Layout.flat(3)
        Layout(node_of=(0, 0, 0), nvswitch=False, node_nvswitch=False, sharp=False)
        """
        return cls((0,) * n, nvswitch)

    @classmethod
    def grid(
        cls,
        nodes: int,
        per_node: int,
        nvswitch: bool = False,
        node_nvswitch: bool = False,
        sharp: bool = False,
    ) -> Layout:
        """``nodes`` servers of ``per_node`` ranks each, ranks numbered server by server.

        >>> Layout.grid(3, 1).node_of
        (0, 1, 2)
        """
        node_of = tuple(r // per_node for r in range(nodes * per_node))
        return cls(node_of, nvswitch, node_nvswitch, sharp)

    @property
    def n(self) -> int:
        """Ranks in the group."""
        return len(self.node_of)

    @property
    def nodes(self) -> tuple[tuple[int, ...], ...]:
        """Ranks of each server, servers by ascending index, ranks ascending within."""
        groups: dict[int, list[int]] = {}
        for rank, node in enumerate(self.node_of):
            groups.setdefault(node, []).append(rank)
        return tuple(tuple(groups[k]) for k in sorted(groups))

    @property
    def order(self) -> tuple[int, ...]:
        """Ranks sorted server by server: the base order of rings, chains and trees."""
        return tuple(sorted(range(self.n), key=lambda r: (self.node_of[r], r)))


def unsupported(algorithm: str, op: str, supports: Iterable[str]) -> UnsupportedCollectiveError:
    """The one-line error for an operation an algorithm does not implement.

    >>> str(unsupported("tree", "all_gather", ("all_reduce",)))
    "algorithm 'tree' does not implement op 'all_gather'; it supports: all_reduce"
    """
    return UnsupportedCollectiveError(
        f"algorithm {algorithm!r} does not implement op {op!r}; it supports: " + ", ".join(supports)
    )


def check_args(
    algorithm: str,
    supports: tuple[str, ...],
    op: str,
    n: int,
    nbytes: float,
    layout: Layout,
    channels: int,
    root: int,
    pipeline_chunks: int,
) -> None:
    """Raise a user-facing error for any argument an algorithm function cannot take.

    Raises
    ------
    UnsupportedCollectiveError
        ``op`` is not in ``supports``.
    ConfigError
        ``n``, ``nbytes``, ``layout``, ``channels``, ``root`` or ``pipeline_chunks``
        is out of range.

    Examples
    --------
    >>> check_args("ring", ("all_reduce",), "all_reduce", 2, 8.0, Layout.flat(2), 1, 0, 1)
    """
    if op not in supports:
        if op not in OPS:
            raise UnsupportedCollectiveError(
                f"unknown collective op {op!r} for algorithm {algorithm!r}; "
                f"{algorithm} supports: {', '.join(supports)}"
            )
        raise unsupported(algorithm, op, supports)
    if n < 1:
        raise ConfigError(f"{algorithm} {op}: group size n must be >= 1 (got {n})")
    if layout.n != n:
        raise ConfigError(
            f"{algorithm} {op}: layout.node_of has {layout.n} entries, must have n={n}"
        )
    if not (math.isfinite(nbytes) and nbytes >= 0):
        raise ConfigError(f"{algorithm} {op}: nbytes must be finite and >= 0 (got {nbytes})")
    if channels < 1:
        raise ConfigError(f"{algorithm} {op}: channels must be >= 1 (got {channels})")
    if pipeline_chunks < 1:
        raise ConfigError(f"{algorithm} {op}: pipeline_chunks must be >= 1 (got {pipeline_chunks})")
    if not 0 <= root < n:
        raise ConfigError(f"{algorithm} {op}: root must be in [0, {n}) (got {root})")


def per_channel(units: Iterable[int], channels: int, ch: int) -> tuple[int, ...]:
    """Chunk ids of channel ``ch`` for data units ``units`` (chunk id ``unit*channels + ch``).

    >>> per_channel([0, 2], 4, 1)
    (1, 9)
    """
    return tuple(u * channels + ch for u in units)
