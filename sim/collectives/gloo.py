"""Gloo's own collective algorithms, as torch.distributed's gloo backend runs them.

``clustersim calibrate collectives --backend gloo`` times ``torch.distributed`` on CPU
tensors, i.e. ``ProcessGroupGloo`` (torch/csrc/distributed/c10d/ProcessGroupGloo.cpp)
calling gloo's collectives (github.com/pytorch/gloo, ``gloo/*.cc``). Those are not NCCL's:
no protocols, no channels, no tuner. Each op has exactly one algorithm, reproduced here
message for message (ranks in rank order; ``pipeline_chunks`` and ``channels`` unused):

- ``all_reduce``: ``gloo/allreduce.cc`` ``ring`` (torch sets no algorithm, and
  ``UNSPECIFIED`` is the ring; the older ``allreduce_ring_chunked``, ``halving_doubling``
  and ``bcube`` classes are Caffe2's and not reached from torch). The buffer is cut into
  ``numSegments = roundUp(max(ceil(S / 1 MiB), 2n), n)`` segments, ``k`` per rank; a
  reduce-scatter of ``(n-1)k`` steps then an all-gather of ``(n-1)k`` steps, each step
  every rank sending one segment to rank ``r-1`` (two in flight in gloo; here
  synchronous steps whose fitted per-step latency absorbs the overlap).
- ``reduce_scatter``: ProcessGroupGloo's ``reduce_scatter_tensor_coalesced`` clones the
  input and all-reduces the whole of it, then copies out its shard: the all_reduce
  schedule above plus local copies.
- ``all_gather``: ``gloo/allgather.cc``: a ring to rank ``r+1`` moving half chunks,
  ``2(n-1)`` steps of ``S / 2n``.
- ``broadcast``: ``gloo/broadcast.cc``: a binomial tree from the root,
  ``ceil(log2 n)`` steps of the whole buffer.
- ``reduce``: ``gloo/reduce.cc``: a segmented ring reduce-scatter of ``numSegments - 2``
  steps (segments of ``min(ceil(S / 2n), 1 MiB)``), then every rank sends its chunk to
  the root in one step. Where ``k > 2`` gloo sends ``k - 2`` more segments round the ring
  than a reduce-scatter needs (their results are never read); they are kept as copies so
  the traffic is gloo's.
- ``all_to_all``: ``gloo/alltoall.cc``: all ``n(n-1)`` sends posted at once, one step.
- ``send_recv``: one transfer.

Besides the wire, each rank works on its own memory (:func:`local_bytes`): gloo reduces
every received segment into its buffer (``(n-1)/n * S`` per rank for all_reduce,
reduce_scatter and reduce), and torch's wrapper copies data: all_gather into a freshly
allocated flat output and back out (``S + S/n``), reduce_scatter's clone and shard copy
(``S + S/n``), all_to_all's own chunk (``S/n``). Their time is ``local_bytes / local
rate``, the ``gloo.local_GBps`` parameter (fitted: it absorbs the allocations' page faults
as well as memcpy and the reduction loop; gloo overlaps part of the reduction with the
next segment's transfer, which the fitted rate absorbs too), added by
:func:`~sim.collectives.simulate.simulate_collective` to the network time. A parameter
tree with ``backend: gloo`` selects these algorithms instead of NCCL's tuner
(:func:`algorithms_for`).

Approximations: segment sizes are ``S / numSegments`` (gloo rounds them to whole
elements); the reduction arithmetic of all_reduce overlaps the next segment's transfer in
gloo and is not charged separately; the transport's rate does not depend on message size,
but over TCP (loopback included) it drops once messages outgrow the socket buffers
(``net.ipv4.tcp_wmem``: on a host with a 4 MiB maximum, all_reduce segments above about
512 KiB and broadcasts above about 5 MiB ran 2-3x slower per byte), so calibrate over the
sizes you will simulate.

>>> s = gloo("all_reduce", 2, 4096.0, layout=Layout.flat(2))
>>> s.num_steps, s.nchunks, s.chunk_bytes
(4, 4, 1024.0)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from sim.collectives.layout import Layout, check_args
from sim.collectives.schedule import OPS, Phase, Schedule, Transfer
from sim.errors import ConfigError, UnsupportedCollectiveError

__all__ = [
    "BACKENDS",
    "GLOO_ALGORITHMS",
    "MAX_SEGMENT_BYTES",
    "SUPPORTS",
    "algorithms_for",
    "backend_of",
    "gloo",
    "local_bytes",
    "local_rate_Bps",
    "local_time_s",
]

SUPPORTS = OPS
#: gloo's ``AllreduceOptionsImpl::kMaxSegmentSize`` (gloo/allreduce.h): 1 MiB.
MAX_SEGMENT_BYTES = 2**20
#: Values of a parameter tree's ``backend`` key.
BACKENDS = ("nccl", "gloo")
#: What ``auto`` runs per op when the parameters say ``backend: gloo``: gloo's only one.
GLOO_ALGORITHMS: dict[str, tuple[str, ...]] = {op: ("gloo",) for op in OPS}


def backend_of(params: Any) -> str:
    """The ``backend`` of a :class:`~sim.collectives.params.CollectiveParams` (default nccl).

    Raises
    ------
    ConfigError
        When the parameter tree names another backend.
    """
    raw: Mapping[str, Any] = getattr(params, "raw", {})
    backend = raw.get("backend", "nccl")
    if backend not in BACKENDS:
        raise ConfigError(f"collectives.backend: {backend!r} is unknown; allowed: nccl, gloo")
    return str(backend)


def algorithms_for(
    params: Any, nccl: Mapping[str, tuple[str, ...]]
) -> Mapping[str, tuple[str, ...]]:
    """The tuner's table: :data:`GLOO_ALGORITHMS` for gloo parameters, else ``nccl``."""
    return GLOO_ALGORITHMS if backend_of(params) == "gloo" else nccl


def local_rate_Bps(params: Any) -> float:
    """The host local rate of torch's gloo wrapper, ``gloo.local_GBps`` (bytes/s).

    Raises
    ------
    ConfigError
        Missing, non-numeric or non-positive ``gloo.local_GBps``.
    """
    raw: Mapping[str, Any] = getattr(params, "raw", {})
    section = raw.get("gloo")
    value = section.get("local_GBps") if isinstance(section, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f"collectives.gloo.local_GBps: expected a number > 0, got {value!r}")
    return float(value) * 1e9


def local_bytes(op: str, n: int, nbytes: float) -> float:
    """Bytes of one rank's local memory work around gloo's wire traffic: gloo's reductions
    and torch's copies (see the module docstring).

    >>> local_bytes("all_gather", 2, 1024.0), local_bytes("all_reduce", 2, 1024.0)
    (1536.0, 512.0)
    """
    if n < 2:
        return 0.0
    reduced = (n - 1) / n * nbytes if op in ("all_reduce", "reduce_scatter", "reduce") else 0.0
    if op in ("all_gather", "reduce_scatter"):
        return float(reduced + nbytes + nbytes / n)
    if op == "all_to_all":
        return float(nbytes / n)
    return float(reduced)


def local_time_s(params: Any, op: str, n: int, nbytes: float) -> float:
    """Seconds of :func:`local_bytes` at the parameters' local rate (0 when none is copied)."""
    b = local_bytes(op, n, nbytes)
    return b / local_rate_Bps(params) if b > 0 else 0.0


def _ring_segments(n: int, nbytes: float, segment_bytes: float) -> int:
    """gloo's ``numSegments``: at least 2 per rank, at most ``segment_bytes`` each, ``n | it``."""
    wanted = max(math.ceil(nbytes / segment_bytes), 2 * n)
    return math.ceil(wanted / n) * n


def _ring_allreduce(op: str, n: int, nbytes: float) -> Schedule:
    ns = _ring_segments(n, nbytes, MAX_SEGMENT_BYTES)
    k = ns // n

    def reduce_step(i: int) -> list[Transfer]:
        # rank r sends segment (r+1)k+i to r-1, which adds it to its own copy
        return [Transfer(r, (r - 1) % n, (((r + 1) * k + i) % ns,), True) for r in range(n)]

    def gather_step(i: int) -> list[Transfer]:
        return [Transfer(r, (r - 1) % n, ((r * k + i) % ns,)) for r in range(n)]

    phases = (
        Phase((n - 1) * k, reduce_step, True, "gloo ring reduce-scatter"),
        Phase((n - 1) * k, gather_step, True, "gloo ring all-gather"),
    )
    return Schedule(op, "gloo", n, ns, nbytes / ns, phases if n > 1 else ())


def _allgather(n: int, nbytes: float) -> Schedule:
    def step(i: int) -> list[Transfer]:
        # half chunk i&1 of segment r - i//2 goes to rank r+1
        return [Transfer(r, (r + 1) % n, (2 * ((r - i // 2) % n) + (i & 1),)) for r in range(n)]

    phases = (Phase(2 * (n - 1), step, True, "gloo allgather ring"),) if n > 1 else ()
    return Schedule("all_gather", "gloo", n, 2 * n, nbytes / (2 * n), phases)


def _broadcast(n: int, nbytes: float, root: int) -> Schedule:
    dim = math.ceil(math.log2(n)) if n > 1 else 0

    def step(i: int) -> list[Transfer]:
        span = 1 << i
        return [
            Transfer((v + root) % n, (v + span + root) % n, (0,))
            for v in range(min(span, n))
            if v + span < n
        ]

    phases = (Phase(dim, step, False, "gloo binomial broadcast"),) if dim else ()
    return Schedule("broadcast", "gloo", n, 1, nbytes, phases, root=root)


def _reduce(n: int, nbytes: float, root: int) -> Schedule:
    segment = min(math.ceil(nbytes / (2 * n)), MAX_SEGMENT_BYTES) if nbytes > 0 else 1
    ns = _ring_segments(n, nbytes, segment)
    k = ns // n
    useful = (n - 1) * k

    def ring_step(reduce: bool, offset: int) -> Any:
        def step(i: int) -> list[Transfer]:
            j = i + offset
            return [Transfer(r, (r - 1) % n, (((r + 1) * k + j) % ns,), reduce) for r in range(n)]

        return step

    def gather(_: int) -> list[Transfer]:
        return [Transfer(r, root, tuple(range(r * k, (r + 1) * k))) for r in range(n) if r != root]

    phases = (
        Phase(useful, ring_step(True, 0), True, "gloo reduce ring"),
        Phase(ns - 2 - useful, ring_step(False, useful), True, "gloo reduce extra sends"),
        Phase(1, gather, True, "gloo reduce gather"),
    )
    return Schedule("reduce", "gloo", n, ns, nbytes / ns, phases if n > 1 else (), root=root)


def _all_to_all(n: int, nbytes: float) -> Schedule:
    def step(_: int) -> list[Transfer]:
        return [Transfer(s, d, (s * n + d,)) for s in range(n) for d in range(n) if d != s]

    phases = (Phase(1, step, True, "gloo alltoall"),) if n > 1 else ()
    return Schedule("all_to_all", "gloo", n, n * n, nbytes / n, phases)


def gloo(
    op: str,
    n: int,
    nbytes: float,
    *,
    layout: Layout,
    channels: int = 1,
    root: int = 0,
    pipeline_chunks: int = 1,
) -> Schedule:
    """Gloo's schedule for ``op`` on ``n`` ranks (see the module docstring).

    Parameters
    ----------
    op : str
        Any of :data:`~sim.collectives.schedule.OPS`.
    n : int
        Ranks (2 for send_recv).
    nbytes : float
        nccl-tests size in bytes (all_gather: the output; reduce_scatter: the input;
        all_to_all: one rank's send buffer).
    layout : Layout
        Rank placement; gloo orders its rings by rank, so only its size is used.
    channels, pipeline_chunks : int
        Unused: gloo has neither.
    root : int
        Root rank of broadcast and reduce.

    Raises
    ------
    UnsupportedCollectiveError
        send_recv with ``n != 2``.

    Examples
    --------
    >>> [gloo(op, 4, 2.0**20, layout=Layout.flat(4)).num_steps
    ...  for op in ("all_reduce", "all_gather", "broadcast", "reduce", "all_to_all")]
    [12, 6, 2, 7, 1]
    """
    check_args("gloo", SUPPORTS, op, n, nbytes, layout, channels, root, pipeline_chunks)
    if op in ("all_reduce", "reduce_scatter"):
        return _ring_allreduce(op, n, nbytes)
    if op == "all_gather":
        return _allgather(n, nbytes)
    if op == "broadcast":
        return _broadcast(n, nbytes, root)
    if op == "reduce":
        return _reduce(n, nbytes, root)
    if op == "all_to_all":
        return _all_to_all(n, nbytes)
    if n != 2:
        raise UnsupportedCollectiveError(
            f"algorithm 'gloo' for op 'send_recv' needs n == 2 ranks (got n={n})"
        )
    return Schedule(
        "send_recv", "gloo", 2, 1, nbytes, (Phase(1, lambda k: [Transfer(0, 1, (0,))], True),)
    )
