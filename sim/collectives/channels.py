"""NCCL channels: how many a collective runs on at a given size, and the rate they allow.

NCCL runs a collective on ``nc`` channels, one CUDA block each. ``topoGetAlgoInfo``
(``src/enqueue.cc``, NCCL 2.18-2.22) starts from the communicator's channel count and
lowers ``nc`` while ``nBytes < nc * threads * threshold``: a small message runs on few
channels. Each channel moves at most a per-channel rate (SM-driven copies and protocol
handling; ``tuning.cc`` caps it per channel for LL128 and tree), so a rank's payload rate
is at most ``nc(size) * bandwidth[protocol]``. With ``nc`` growing in proportion to the
size the time stays flat over a range of mid sizes, then grows with the size once every
channel is in use: the shape of every nccl-tests curve between ~16 KiB and ~8 MiB, which a
pure link model misses.

What is modelled here, and what is not:

- ring and tree (and the non-NCCL rhd and hierarchical when asked for) are capped; the
  ring LL threshold is multiplied by the rank count, as NCCL does (``comm.h``);
- NVLS and NVLS-tree run on a fixed ``nvlsChannels`` (16) in NCCL; their rate is
  carried by their in-switch efficiency, so they are not capped here; nor is ``direct``
  (NCCL's point-to-point, which sizes its own channels per peer);
- the channel count of a group is ``per_server`` inside one server and ``per_nic`` per
  NIC of a server when the group spans servers (NCCL's DGX H100 and p5 logs: 24 and 16);
- a ring step overlaps its handshake with its data (``max`` instead of sum) once each
  channel's share of the step fills a pipelined slice (:func:`overlapped`): large rings
  stay bandwidth-bound at any length, small and mid-size steps pay the full latency.
"""

from __future__ import annotations

import math

from sim.collectives.params import ChannelParams

__all__ = ["CAPPED", "channel_count", "channel_rate_Bps", "overlapped"]

#: Algorithms whose rate the channel model caps (see the module docstring).
CAPPED = ("ring", "tree", "rhd", "hierarchical")


def channel_count(
    channels: ChannelParams,
    algorithm: str,
    protocol: str,
    size_bytes: float,
    n_ranks: int,
    max_channels: int,
) -> int:
    """Channels NCCL runs ``algorithm`` on for a message of ``size_bytes`` bytes.

    ``max(1, min(max_channels, floor(size / (threads * threshold))))``, the threshold of
    ring LL times ``n_ranks``.

    >>> from sim.collectives.params import default_params
    >>> ch = default_params().channels
    >>> channel_count(ch, "ring", "simple", 2**20, 8, 24)  # 1 MiB / 32 KiB per channel
    24
    >>> channel_count(ch, "ring", "simple", 2**17, 8, 24)
    4
    >>> channel_count(ch, "ring", "ll", 2**17, 8, 24)  # ring LL: 512 * 8 B * 8 ranks
    4
    """
    per = channels.threads[protocol] * channels.thread_threshold_bytes[protocol]
    if algorithm == "ring" and protocol == "ll":
        per *= n_ranks
    return int(max(1, min(max_channels, math.floor(size_bytes / per))))


def channel_rate_Bps(
    channels: ChannelParams,
    algorithm: str,
    protocol: str,
    size_bytes: float,
    n_ranks: int,
    max_channels: int,
) -> float:
    """Most payload bytes/s one rank moves in a step of ``algorithm`` (``inf``: uncapped).

    >>> from sim.collectives.params import default_params
    >>> ch = default_params().channels
    >>> channel_rate_Bps(ch, "ring", "simple", 2**17, 8, 24) / 1e9  # 4 channels x 40 GB/s
    160.0
    >>> channel_rate_Bps(ch, "nvls", "simple", 2**17, 8, 24)
    inf
    """
    if algorithm not in CAPPED:
        return math.inf
    nc = channel_count(channels, algorithm, protocol, size_bytes, n_ranks, max_channels)
    return nc * channels.bandwidth_Bps[protocol]


def overlapped(channels: ChannelParams, payload_bytes: float, n_channels: int) -> bool:
    """Whether a ring step moving ``payload_bytes`` per rank over ``n_channels`` channels
    fills a slice per channel, so its handshake overlaps the data (``Phase.overlap``).

    >>> from sim.collectives.params import default_params
    >>> ch = default_params().channels
    >>> overlapped(ch, 2**20 * 16, 16), overlapped(ch, 2**16 * 16, 16)
    (True, False)
    """
    return n_channels > 0 and payload_bytes / n_channels >= channels.slice_bytes
