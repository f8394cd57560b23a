"""One invariant checker run against every collective schedule, and byte accounting.

:func:`check_schedule` executes a :class:`~sim.collectives.schedule.Schedule` on
symbolic data: ``state[participant][chunk]`` is the frozenset of ranks whose
contribution the participant's copy of the chunk holds (for reductions) or of the rank
it came from (for gathers and copies); ``None`` where the participant does not hold the
chunk. Start and end states per op are exactly those of the schedule module's
docstring. It is meant for small groups (n up to a few dozen): it expands every step.

:func:`traffic` counts bytes sent and received per participant; for ``uniform`` phases
it times one repetition by the repeat count, so it also runs on very large rings.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from sim.collectives.schedule import OPS, Schedule, Transfer

__all__ = ["check_schedule", "traffic"]

State = list[list[frozenset[int] | None]]
REDUCING = ("all_reduce", "reduce_scatter", "reduce")


def check_schedule(s: Schedule, nbytes: float | None = None) -> None:
    """Verify that ``s`` performs its collective, or raise AssertionError saying why.

    Checks: the header is sane; bytes are conserved (``nchunks * chunk_bytes == nbytes``
    to 1e-12 relative when ``nbytes`` is given, ``nchunks / n`` chunks for all_to_all,
    whose ``nbytes`` is one rank's send buffer; and every transfer moves
    ``len(chunks) * chunk_bytes``); every ``uniform`` phase moves the same multiset of
    (src, dst, chunk count) in every repetition; every transfer sends chunks its source
    holds; reductions never count a rank twice; concurrent copies into one chunk agree;
    and at the end every rank holds what the op requires.

    Parameters
    ----------
    s : Schedule
        The schedule to verify.
    nbytes : float, optional
        The buffer size (bytes) the schedule was built for.

    Examples
    --------
    >>> from sim.collectives.schedule import Phase
    >>> step = [Transfer(0, 1, (0,))]
    >>> s = Schedule("send_recv", "direct", 2, 1, 8.0, (Phase(1, lambda k: step),))
    >>> check_schedule(s, nbytes=8.0)
    """
    _check_header(s, nbytes)
    state = _initial_state(s)
    for p_index, phase in enumerate(s.phases):
        first: Counter[tuple[int, int, int]] | None = None
        for k in range(phase.repeat):
            where = f"phase {p_index} ({phase.label or 'unlabelled'}) step {k}"
            transfers = phase.steps(k)
            if phase.uniform:
                shape = _shape(transfers)
                first = shape if first is None else first
                assert shape == first, (
                    f"{where}: phase claims uniform=True but moves {sorted(shape.items())} "
                    f"instead of step 0's {sorted(first.items())}"
                )
            _apply_step(s, state, transfers, where)
    _check_final(s, state)


def traffic(s: Schedule) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Bytes sent and bytes received by each participant over the whole schedule.

    Returns
    -------
    tuple[tuple[float, ...], tuple[float, ...]]
        ``(sent, received)``, each indexed by participant ``0..n+reducers-1`` (bytes).

    Examples
    --------
    >>> from sim.collectives.schedule import Phase
    >>> step = [Transfer(0, 1, (0, 1))]
    >>> s = Schedule("send_recv", "direct", 2, 2, 4.0, (Phase(3, lambda k: step, True),))
    >>> traffic(s)
    ((24.0, 0.0), (0.0, 24.0))
    """
    size = s.n + s.reducers
    sent = [0] * size
    received = [0] * size
    for phase in s.phases:
        reps = range(min(phase.repeat, 1)) if phase.uniform else range(phase.repeat)
        scale = phase.repeat if phase.uniform else 1
        for k in reps:
            for t in phase.steps(k):
                sent[t.src] += len(t.chunks) * scale
                received[t.dst] += len(t.chunks) * scale
    return (
        tuple(float(c * s.chunk_bytes) for c in sent),
        tuple(float(c * s.chunk_bytes) for c in received),
    )


def _check_header(s: Schedule, nbytes: float | None) -> None:
    assert s.op in OPS, f"unknown op {s.op!r}"
    assert s.n >= 1, f"n must be >= 1, got {s.n}"
    assert s.reducers >= 0, f"reducers must be >= 0, got {s.reducers}"
    assert 0 <= s.root < s.n, f"root {s.root} not in [0, {s.n})"
    assert s.nchunks >= 1, f"nchunks must be >= 1, got {s.nchunks}"
    assert math.isfinite(s.chunk_bytes) and s.chunk_bytes >= 0, (
        f"chunk_bytes must be finite and >= 0, got {s.chunk_bytes}"
    )
    if s.op in ("all_gather", "reduce_scatter"):
        assert s.nchunks % s.n == 0, f"{s.op}: nchunks {s.nchunks} not a multiple of n {s.n}"
    if s.op == "all_to_all":
        assert s.nchunks % (s.n * s.n) == 0, (
            f"all_to_all: nchunks {s.nchunks} not a multiple of n*n = {s.n * s.n}"
        )
    if s.op == "send_recv":
        assert s.n == 2, f"send_recv needs n == 2, got {s.n}"
    if nbytes is not None:
        # all_to_all's nbytes is one rank's send buffer, i.e. 1/n of all chunks.
        count = s.nchunks // s.n if s.op == "all_to_all" else s.nchunks
        total = count * s.chunk_bytes
        assert math.isclose(total, nbytes, rel_tol=1e-12, abs_tol=0.0), (
            f"bytes not conserved: {count} chunks * {s.chunk_bytes} = {total} != nbytes {nbytes}"
        )
    for p in s.phases:
        assert p.repeat >= 0, f"phase {p.label!r} has negative repeat {p.repeat}"


def _shape(transfers: Sequence[Transfer]) -> Counter[tuple[int, int, int]]:
    return Counter((t.src, t.dst, len(t.chunks)) for t in transfers)


def _shard(s: Schedule, chunk: int) -> int:
    return chunk // (s.nchunks // s.n)


def _a2a_route(s: Schedule, chunk: int) -> tuple[int, int]:
    m = s.nchunks // (s.n * s.n)
    return chunk // (s.n * m), (chunk // m) % s.n


def _initial_state(s: Schedule) -> State:
    state: State = [[None] * s.nchunks for _ in range(s.n + s.reducers)]
    for r in range(s.n):
        for c in range(s.nchunks):
            if s.op in REDUCING:
                holds = True
            elif s.op == "all_gather":
                holds = _shard(s, c) == r
            elif s.op == "all_to_all":
                holds = _a2a_route(s, c)[0] == r
            else:  # broadcast from root, send_recv from rank 0 (root defaults to 0)
                holds = r == (s.root if s.op == "broadcast" else 0)
            state[r][c] = frozenset((r,)) if holds else None
    return state


def _apply_step(s: Schedule, state: State, transfers: Sequence[Transfer], where: str) -> None:
    size = s.n + s.reducers
    incoming: dict[tuple[int, int], list[tuple[frozenset[int], bool]]] = {}
    for t in transfers:
        assert 0 <= t.src < size and 0 <= t.dst < size, (
            f"{where}: {t} names a participant outside 0..{size - 1}"
        )
        assert t.src != t.dst, f"{where}: {t} sends to itself"
        assert t.chunks, f"{where}: {t} carries no chunks"
        assert len(set(t.chunks)) == len(t.chunks), f"{where}: {t} repeats a chunk"
        assert math.isclose(s.transfer_bytes(t), len(t.chunks) * s.chunk_bytes), (
            f"{where}: {t} bytes {s.transfer_bytes(t)} != len(chunks)*chunk_bytes"
        )
        assert not (t.reduce and s.op not in REDUCING), (
            f"{where}: {t} reduces, but {s.op} is not a reducing op"
        )
        for c in t.chunks:
            assert 0 <= c < s.nchunks, f"{where}: {t} names chunk {c} outside 0..{s.nchunks - 1}"
            value = state[t.src][c]
            assert value is not None, f"{where}: {t}: participant {t.src} does not hold chunk {c}"
            incoming.setdefault((t.dst, c), []).append((value, t.reduce))
    for (dst, c), arrivals in incoming.items():
        state[dst][c] = _land(state[dst][c], arrivals, f"{where}: into participant {dst} chunk {c}")


def _land(
    held: frozenset[int] | None, arrivals: list[tuple[frozenset[int], bool]], where: str
) -> frozenset[int]:
    kinds = {is_reduce for _, is_reduce in arrivals}
    assert len(kinds) == 1, f"{where}: a copy and a reduce land in the same step"
    values = [v for v, _ in arrivals]
    if not kinds.pop():
        assert all(v == values[0] for v in values), (
            f"{where}: concurrent copies disagree: {[sorted(v) for v in values]}"
        )
        return values[0]
    total = held or frozenset()
    for v in values:
        overlap = total & v
        assert not overlap, (
            f"{where}: reduce double-counts ranks {sorted(overlap)} "
            f"(held/arrived {sorted(total)}, incoming {sorted(v)})"
        )
        total = total | v
    return total


def _check_final(s: Schedule, state: State) -> None:
    everyone = frozenset(range(s.n))
    for r in range(s.n):
        for c in range(s.nchunks):
            want = _wanted(s, r, c, everyone)
            if want is not None:
                got = state[r][c]
                shown = "nothing" if got is None else sorted(got)
                assert got == want, (
                    f"{s.algorithm} {s.op} n={s.n}: at the end rank {r} chunk {c} holds "
                    f"{shown}, expected {sorted(want)}"
                )


def _wanted(s: Schedule, r: int, c: int, everyone: frozenset[int]) -> frozenset[int] | None:
    """What rank ``r`` must hold in chunk ``c`` at the end (None: anything)."""
    op = s.op
    if op == "all_reduce" or (op == "reduce_scatter" and _shard(s, c) == r):
        return everyone
    if op == "reduce":
        return everyone if r == s.root else None
    if op == "all_gather":
        return frozenset((_shard(s, c),))
    if op == "broadcast":
        return frozenset((s.root,))
    if op == "all_to_all":
        src, dst = _a2a_route(s, c)
        return frozenset((src,)) if dst == r else None
    if op == "send_recv":
        return frozenset((0,)) if r == 1 else None
    return None
