"""Which nodes of different ranks are one operation: collectives by group and order, p2p by peers.

Chakra has no id that ties the nodes of one collective together across files. ASTRA-sim
pairs them by order: each communicator group counts the collectives a rank issues
(``CommunicatorGroup::num_streams``, one counter per group, and ``Sys::num_streams`` for
the group of every rank), so the k-th collective of a group on every member rank is the
same collective. :func:`match_collectives` applies that rule to the ranks' dependency
order (:func:`sim.chakra.trace.topological_order`) and refuses, in one line, a member
that lacks the k-th collective or disagrees on its type or size (``comm_size`` is the same
on every rank for every collective type in ASTRA-sim). Sends and receives pair by
(source, destination, tag) and order (:func:`match_p2p`), as ASTRA-sim's network
front ends match ``sim_send`` to ``sim_recv``; their sizes must agree.

It also refuses communication nodes neither ASTRA-sim nor an import can run: missing
``comm_type``/``comm_size``, a send or receive without peers or tag, one issued on the
wrong rank, peers outside the ranks, and ``is_cpu_op`` on a communication node.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from sim.chakra.groups import group_key
from sim.chakra.ranks import TraceSet
from sim.chakra.trace import Node, node_label, topological_order
from sim.errors import ConfigError

__all__ = ["Collective", "PointToPoint", "match_collectives", "match_p2p"]


@dataclass(frozen=True, slots=True)
class Collective:
    """One collective across its group: the ``index``-th of group ``group``.

    Attributes
    ----------
    group : str
        The ``pg_name`` (``""`` for the group of every rank).
    ranks : tuple of int
        Member ranks, ascending.
    index : int
        Position among the group's collectives (0 first).
    comm_type : str
        Chakra collective type, e.g. ``"ALL_REDUCE"``.
    comm_bytes : int
        ``comm_size`` (bytes), equal on every member.
    node_ids : tuple of int
        The node on each member rank, in ``ranks`` order.
    """

    group: str
    ranks: tuple[int, ...]
    index: int
    comm_type: str
    comm_bytes: int
    node_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class PointToPoint:
    """One message: the ``index``-th send from ``src`` to ``dst`` with ``tag`` and its receive."""

    src: int
    dst: int
    tag: int
    index: int
    comm_bytes: int
    send_id: int
    recv_id: int


def _ordered_nodes(traces: TraceSet, rank: int) -> list[Node]:
    trace = traces.traces[rank]
    return [trace.nodes[i] for i in topological_order(trace, traces.path(rank))]


def _comm_check(traces: TraceSet, rank: int, node: Node, need: Sequence[str]) -> str:
    where = f"{traces.path(rank)}: {node_label(node)}"
    if node.is_cpu_op:
        raise ConfigError(f"{where}: is_cpu_op is true on a {node.type} (ASTRA-sim refuses it)")
    for field in need:
        if getattr(node, field) is None:
            attr = "comm_size" if field == "comm_bytes" else field
            raise ConfigError(f"{where}: {node.type} without the attribute {attr}")
    return where


def _members(
    traces: TraceSet, used: Mapping[str, set[int]], groups: Mapping[str, Sequence[int]] | None
) -> dict[str, tuple[int, ...]]:
    n = traces.num_ranks
    members: dict[str, tuple[int, ...]] = {}
    for key in sorted(used, key=lambda k: (k != "", len(k), k)):
        if key == "":
            members[key] = tuple(range(n))
        elif groups is None:
            members[key] = tuple(sorted(used[key]))
        elif key not in groups:
            known = ", ".join(sorted(groups, key=lambda k: (len(k), k))[:8]) or "none"
            raise ConfigError(
                f"pg_name {key!r}: not a group of the communicator-group file (groups: {known})"
            )
        else:
            members[key] = tuple(sorted(groups[key]))
        outside = [r for r in members[key] if r >= n]
        if outside:
            raise ConfigError(f"group {key!r}: member rank {outside[0]} but only {n} rank files")
        strangers = sorted(used[key] - set(members[key]))
        if strangers:
            raise ConfigError(
                f"{traces.path(strangers[0])}: uses group {key!r} but is not one of its "
                f"members {list(members[key])[:16]}"
            )
    return members


def match_collectives(
    traces: TraceSet,
    groups: Mapping[str, Sequence[int]] | None = None,
    ranks: Collection[int] | None = None,
) -> tuple[Collective, ...]:
    """Pair the COMM_COLL_NODEs of every rank into collectives.

    Parameters
    ----------
    traces : TraceSet
    groups : mapping of str to ranks, optional
        Communicator groups by ``pg_name`` (:func:`sim.chakra.groups.read_comm_groups`).
        Without it a named group's members are the ranks whose collectives name it.
    ranks : collection of int, optional
        Match the nodes of these ranks only (default every rank): the others are replicas
        whose traces mirror theirs (a folded trace set, :mod:`sim.chakra.fold`). A
        collective is then one that has a member among ``ranks``; its ``node_ids`` hold
        -1 for the other members.

    Returns
    -------
    tuple of Collective
        The group of every rank first, then named groups; each in order.

    Raises
    ------
    ConfigError
        One line naming the file, node and field: a collective without ``comm_type`` or
        ``comm_size``, ``is_cpu_op`` set, a ``pg_name`` the groups do not have, a rank in a
        group it is not a member of, a member with fewer collectives than another, or a
        k-th collective whose type or size differs between members.

    Examples
    --------
    >>> from sim.chakra.trace import Metadata, Trace
    >>> ar = Node(0, "ar", "COMM_COLL_NODE", comm_type="ALL_REDUCE", comm_bytes=2**20)
    >>> ts = TraceSet("ar", (Trace(Metadata(), (ar,)),) * 4)
    >>> c, = match_collectives(ts); c.ranks, c.comm_type, c.comm_bytes
    ((0, 1, 2, 3), 'ALL_REDUCE', 1048576)
    """
    sequences: dict[str, dict[int, list[Node]]] = defaultdict(lambda: defaultdict(list))
    used: dict[str, set[int]] = defaultdict(set)
    mine = range(traces.num_ranks) if ranks is None else sorted(ranks)
    for rank in mine:
        for node in _ordered_nodes(traces, rank):
            if node.type != "COMM_COLL_NODE":
                continue
            _comm_check(traces, rank, node, ("comm_type", "comm_bytes"))
            key = group_key(node.pg_name)
            sequences[key][rank].append(node)
            used[key].add(rank)
    out: list[Collective] = []
    matched = set(mine)
    for key, members in _members(traces, used, groups).items():
        out.extend(_match_group(traces, key, members, sequences[key], matched))
    return tuple(out)


def _match_group(
    traces: TraceSet,
    key: str,
    ranks: tuple[int, ...],
    seqs: Mapping[int, list[Node]],
    matched: Collection[int],
) -> list[Collective]:
    name = "the group of every rank" if key == "" else f"group {key!r}"
    own = [r for r in ranks if r in matched]
    if not own:
        return []
    longest = max(own, key=lambda r: (len(seqs.get(r, ())), -r))
    count = len(seqs.get(longest, ()))
    out = []
    for k in range(count):
        first = seqs[longest][k]
        for r in own:
            seq = seqs.get(r, [])
            if len(seq) <= k:
                raise ConfigError(
                    f"{traces.path(r)}: {len(seq)} collectives of {name} but "
                    f"{traces.path(longest)} has {count} (collective #{k} there: "
                    f"{node_label(first)}, {first.comm_type} of {first.comm_bytes} B)"
                )
            node = seq[k]
            if (node.comm_type, node.comm_bytes) != (first.comm_type, first.comm_bytes):
                raise ConfigError(
                    f"{traces.path(r)}: {node_label(node)}: collective #{k} of {name} is "
                    f"{node.comm_type} of {node.comm_bytes} B but on {traces.path(longest)} "
                    f"({node_label(first)}) {first.comm_type} of {first.comm_bytes} B"
                )
        ids = tuple(seqs[r][k].id if r in matched else -1 for r in ranks)
        assert first.comm_type is not None and first.comm_bytes is not None
        out.append(Collective(key, ranks, k, first.comm_type, first.comm_bytes, ids))
    return out


def _p2p_peer(traces: TraceSet, rank: int, node: Node) -> tuple[int, int, int]:
    """(src, dst, tag) of a send or receive on ``rank``, checked."""
    send = node.type == "COMM_SEND_NODE"
    need = ("comm_dst" if send else "comm_src", "comm_tag", "comm_bytes")
    where = _comm_check(traces, rank, node, need)
    src = rank if node.comm_src is None else node.comm_src
    dst = rank if node.comm_dst is None else node.comm_dst
    assert node.comm_tag is not None
    own, peer, own_field = (src, dst, "comm_src") if send else (dst, src, "comm_dst")
    if own != rank:
        raise ConfigError(
            f"{where}: {own_field} {own} but the file is rank {rank}'s "
            f"({'a send is issued by its sender' if send else 'a receive by its receiver'})"
        )
    if peer == rank or not 0 <= peer < traces.num_ranks:
        field = "comm_dst" if send else "comm_src"
        raise ConfigError(
            f"{where}: {field} {peer} is not another rank (ranks 0..{traces.num_ranks - 1})"
        )
    return src, dst, node.comm_tag


def match_p2p(traces: TraceSet, ranks: Collection[int] | None = None) -> tuple[PointToPoint, ...]:
    """Pair every COMM_SEND_NODE with its COMM_RECV_NODE.

    The k-th send from ``src`` to ``dst`` with tag ``t`` (in ``src``'s dependency order)
    is received by the k-th receive on ``dst`` from ``src`` with tag ``t``. With ``ranks``,
    only the nodes of those ranks are paired (a folded trace set: both ends must be among
    them).

    Returns
    -------
    tuple of PointToPoint
        By (src, dst, tag), then order.

    Raises
    ------
    ConfigError
        One line naming the file and node: a send without ``comm_dst``, a receive without
        ``comm_src``, either without ``comm_tag`` or ``comm_size``, issued on a rank other
        than its own end, a peer that is not another rank, a send or receive left
        unpaired, or a pair whose sizes differ.
    """
    sends: dict[tuple[int, int, int], list[Node]] = defaultdict(list)
    recvs: dict[tuple[int, int, int], list[Node]] = defaultdict(list)
    for rank in range(traces.num_ranks) if ranks is None else sorted(ranks):
        for node in _ordered_nodes(traces, rank):
            if node.type in ("COMM_SEND_NODE", "COMM_RECV_NODE"):
                side = sends if node.type == "COMM_SEND_NODE" else recvs
                side[_p2p_peer(traces, rank, node)].append(node)
    out: list[PointToPoint] = []
    for key in sorted(set(sends) | set(recvs)):
        src, dst, tag = key
        s, r = sends.get(key, []), recvs.get(key, [])
        if len(s) != len(r):
            rank, nodes = (src, s) if len(s) > len(r) else (dst, r)
            extra = nodes[min(len(s), len(r))]
            raise ConfigError(
                f"{traces.path(rank)}: {node_label(extra)}: {len(s)} sends from rank {src} to "
                f"rank {dst} with tag {tag} but {len(r)} receives; this one has no partner"
            )
        for k, (a, b) in enumerate(zip(s, r, strict=True)):
            if a.comm_bytes != b.comm_bytes:
                raise ConfigError(
                    f"{traces.path(dst)}: {node_label(b)}: receives {b.comm_bytes} B but "
                    f"{traces.path(src)} {node_label(a)} sends {a.comm_bytes} B (tag {tag}, #{k})"
                )
            assert a.comm_bytes is not None
            out.append(PointToPoint(src, dst, tag, k, a.comm_bytes, a.id, b.id))
    return tuple(out)
