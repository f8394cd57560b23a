"""NCCL's double binary tree: two complementary binary trees, each carrying half the data.

The trees are NCCL's own (``ncclGetBtree`` / ``ncclGetDtree`` in ``graph/trees.cc``):
tree 0 is a binary tree over tree indices ``0..m-1`` rooted at 0, in which odd indices
are leaves; tree 1 is its mirror (``m`` even, ``i -> m-1-i``) or its shift by one
(``m`` odd), so an index that is interior in one tree is mostly a leaf in the other.
For all_reduce, as NCCL does, the double tree spans *servers* and the GPUs inside a
server form a chain below the server's head GPU (:func:`nccl_tree_parents`); each
channel's trees use different head GPUs, hence different NICs (rails).

- all_reduce: each tree reduces its half up to its top, which broadcasts it back down:
  ``2·depth`` steps (the two trees run side by side), depth = chain length within a
  server plus the depth of the tree over servers.
- broadcast, reduce (not NCCL's: NCCL runs these as rings; here when asked for by name):
  the double tree is built over the ``n-1`` non-root ranks and the root sits on top of
  both trees (as in two-tree broadcast): ``depth + 1`` steps.

With ``pipeline_chunks = C`` > 1 the buffer is cut into ``C`` pieces that stream
through the levels (:func:`~sim.collectives.pipeline.pipeline`). ``channels`` splits
each tree's half into parallel flows over the same tree (chunk ``2*ch + tree``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from sim.collectives.layout import Layout, check_args
from sim.collectives.pipeline import pipeline
from sim.collectives.schedule import Phase, Schedule, Transfer

__all__ = ["SUPPORTS", "btree", "dtree_parents", "nccl_tree_parents", "tree"]

SUPPORTS = ("all_reduce", "broadcast", "reduce")

Edges = list[tuple[int, int]]  # (src rank, dst rank) of one step of one tree


def btree(nranks: int, rank: int) -> tuple[int, int, int]:
    """NCCL's ``ncclGetBtree``: ``(parent, child0, child1)`` of ``rank``, -1 for none.

    >>> [btree(14, r)[0] for r in (8, 4, 12, 13)]
    [0, 8, 8, 12]
    """
    bit = 1
    while bit < nranks and not bit & rank:
        bit <<= 1
    if rank == 0:
        return -1, -1, (bit >> 1 if nranks > 1 else -1)
    up = (rank ^ bit) | (bit << 1)
    if up >= nranks:
        up = rank ^ bit
    low = bit >> 1
    down0 = rank - low if low else -1
    while low and rank + low >= nranks:
        low >>= 1
    return up, down0, (rank + low if low else -1)


def dtree_parents(m: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Parent of each tree index in NCCL's two trees (``ncclGetDtree``); -1 at the top.

    >>> dtree_parents(4)
    ((-1, 2, 0, 2), (1, 3, 1, -1))
    """
    first = tuple(btree(m, i)[0] for i in range(m))
    if m % 2:  # shift by one
        ups = (btree(m, (i - 1) % m)[0] for i in range(m))
        second = tuple(-1 if u < 0 else (u + 1) % m for u in ups)
    else:  # mirror
        ups = (btree(m, m - 1 - i)[0] for i in range(m))
        second = tuple(-1 if u < 0 else m - 1 - u for u in ups)
    return first, second


def _levels(parent: Sequence[int], rank_of: Sequence[int]) -> tuple[list[Edges], list[Edges]]:
    """Edges grouped into synchronous steps: (reduce-up steps, broadcast-down steps).

    A rank sends up at step = its height (after every child has sent); it receives
    from its parent at step = its depth - 1.
    """
    m = len(parent)
    depth = [
        -1
    ] * m  # each rank's once, from its nearest ancestor's (a walk per rank was O(m depth))
    for i in range(m):
        walk, j = [], i
        while j >= 0 and depth[j] < 0:
            walk.append(j)
            j = parent[j]
        d = depth[j] if j >= 0 else -1
        for k in reversed(walk):
            d += 1
            depth[k] = d
    height = [0] * m
    for i in sorted(range(m), key=lambda i: -depth[i]):
        if parent[i] >= 0:
            height[parent[i]] = max(height[parent[i]], height[i] + 1)
    levels = max(depth, default=0)
    up: list[Edges] = [[] for _ in range(levels)]
    down: list[Edges] = [[] for _ in range(levels)]
    for i in range(m):
        if parent[i] >= 0:
            up[height[i]].append((rank_of[i], rank_of[parent[i]]))
            down[depth[i] - 1].append((rank_of[parent[i]], rank_of[i]))
    return up, down


def _rooted(m: int, parent: Sequence[int]) -> list[int]:
    """Tree over ``m+1`` virtual indices: index 0 on top of tree ``parent`` (shifted by 1)."""
    return [-1] + [0 if p < 0 else p + 1 for p in parent]


def nccl_tree_parents(layout: Layout, tree: int, head: int = 0) -> list[int]:
    """Parent rank of every rank (-1 at the top) in NCCL's all-reduce tree ``tree`` (0, 1).

    NCCL's trees span servers, not ranks: the GPUs of a server form a chain whose first
    GPU (the *head*, local position ``head``) joins the double binary tree over servers
    (``ncclGetDtree`` over server indices; tree 1 mirrors or shifts tree 0). Inside a
    server tree 0 chains the GPUs onward from the head and tree 1 backward, so the two
    trees of one channel use different NVLink paths (and, across servers, the heads of
    different channels sit behind different NICs).

    >>> nccl_tree_parents(Layout.flat(4), 0)
    [-1, 0, 1, 2]
    >>> nccl_tree_parents(Layout.grid(2, 2), 0)  # servers (0, 1) and (2, 3)
    [-1, 0, 0, 2]
    """
    servers = layout.nodes
    top = dtree_parents(len(servers))[tree]
    parent = [-1] * layout.n
    heads = []
    for ranks in servers:
        h = head % len(ranks)
        rest = ranks[h + 1 :] + ranks[:h]
        chain = (ranks[h], *(rest if tree == 0 else rest[::-1]))
        for child, par in zip(chain[1:], chain[:-1], strict=True):
            parent[child] = par
        heads.append(ranks[h])
    for s, up in enumerate(top):
        if up >= 0:
            parent[heads[s]] = heads[up]
    return parent


@functools.lru_cache(maxsize=64)
def _trees(op: str, layout: Layout, root: int, ch: int) -> list[list[tuple[Edges, bool]]]:
    """Each tree's steps of channel ``ch`` as (edges, reduce) lists, in the order they run
    (cached: the sizes of a sweep build the same trees; callers do not modify them)."""
    order = layout.order
    n = len(order)
    parents: Sequence[Sequence[int]]
    if op == "all_reduce":
        parents = [nccl_tree_parents(layout, t, 2 * ch + t) for t in (0, 1)]
        rank_of: Sequence[int] = range(n)
    else:
        pos = order.index(root)
        rank_of = order[pos:] + order[:pos]
        parents = [_rooted(n - 1, p) for p in dtree_parents(n - 1)]
    steps = []
    for parent in parents:
        up, down = _levels(parent, rank_of)
        ups = [(e, True) for e in up if op != "broadcast"]
        downs = [(e, False) for e in down if op != "reduce"]
        steps.append(ups + downs)
    return steps


def tree(
    op: str,
    n: int,
    nbytes: float,
    *,
    layout: Layout,
    channels: int = 1,
    root: int = 0,
    pipeline_chunks: int = 1,
) -> Schedule:
    """NCCL double-binary-tree schedule for ``op`` on ``n`` ranks moving ``nbytes`` bytes.

    Parameters
    ----------
    op : str
        all_reduce, broadcast or reduce.
    n : int
        Ranks in the group.
    nbytes : float
        nccl-tests size of the buffer (bytes); each tree carries half.
    layout : Layout
        Rank placement; tree index ``i`` is rank ``layout.order[i]``.
    channels : int
        Parallel flows per tree edge, each ``1/channels`` of the tree's half.
    root : int
        Root rank of broadcast and reduce.
    pipeline_chunks : int
        Pieces the buffer streams through the tree levels in.

    Raises
    ------
    UnsupportedCollectiveError
        For all_gather, reduce_scatter, all_to_all and send_recv.

    Examples
    --------
    >>> s = tree("all_reduce", 8, 8e6, layout=Layout.flat(8))  # a chain of 8: 7 up, 7 down
    >>> s.num_steps, s.nchunks, s.chunk_bytes
    (14, 2, 4000000.0)
    """
    check_args("tree", SUPPORTS, op, n, nbytes, layout, channels, root, pipeline_chunks)
    per_channel = [_trees(op, layout, root, ch) for ch in range(channels)] if n > 1 else []
    total = max((len(t) for trees in per_channel for t in trees), default=0)

    def step(k: int) -> list[Transfer]:
        out: list[Transfer] = []
        for ch, trees in enumerate(per_channel):
            for t, steps in enumerate(trees):
                if k < len(steps):
                    edges, reduce = steps[k]
                    out += [Transfer(a, b, (2 * ch + t,), reduce) for a, b in edges]
        return out

    phases = (Phase(total, step, False, f"double tree {op}"),) if total else ()
    base = Schedule(op, "tree", n, 2 * channels, nbytes / (2 * channels), phases, root=root)
    return pipeline(base, pipeline_chunks)
