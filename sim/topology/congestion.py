"""Congestion on lossless Ethernet: goodput lost to incast under PFC/ECN/DCQCN.

RoCEv2 fabrics are made lossless with Priority Flow Control (PFC) and rate-controlled
with ECN marking and DCQCN; TCP reacts to loss and ECN. When many flows converge on one
port (incast: an all-to-all, a reduce-scatter into one receiver, ECMP collisions), the
pause frames and rate-control oscillations leave part of the port idle. InfiniBand's
credit-based link-level flow control (and EFA's SRD multipath with its own congestion
control) does not lose goodput this way. The model is phenomenological:

    effective capacity = capacity * (1 - loss * (1 - 1 / flows))

for a link that ``flows`` concurrent transfers share (no loss with one flow, ``loss`` in
the limit of many), applied by both network backends and by the collective tuner.

What it does not capture: queueing delay and latency inflation, PFC pause propagation
to upstream links (head-of-line blocking, congestion trees), packet drops and
retransmission timeouts, DCQCN's dynamics over time, deep-buffer switches, and
receiver-driven admission such as NCCL's. ``network.congestion_loss`` in a topology file
sets ``loss`` for its Ethernet links; the defaults below are estimates to be calibrated.
"""

from __future__ import annotations

import numpy as np

__all__ = ["DEFAULT_LOSS", "effective_capacity", "link_loss"]

#: Default ``loss`` per transport. Estimates (no public per-port incast goodput figure for
#: 400G RoCE was found): Meta's SIGCOMM 2024 paper reports DCQCN was hard to tune at 400G
#: and moved to PFC-only with receiver-driven admission; ~8% for RoCE and ~15% for kernel
#: TCP (whose congestion control backs off on loss) are the starting points, with 0 for
#: lossless-by-credit InfiniBand, EFA's SRD, NVLink and PCIe.
DEFAULT_LOSS = {"roce": 0.08, "tcp": 0.15, "tcpx": 0.10, "tcpxo": 0.10}


def link_loss(transports: tuple[str, ...], loss: float | None) -> np.ndarray:
    """Per-link ``loss``: ``loss`` for the Ethernet transports when given, else the default.

    >>> link_loss(("nvlink", "roce", "ib"), None).tolist()
    [0.0, 0.08, 0.0]
    >>> link_loss(("roce", "tcp"), 0.2).tolist()
    [0.2, 0.2]
    """
    return np.array(
        [
            (DEFAULT_LOSS[t] if loss is None else loss) if t in DEFAULT_LOSS else 0.0
            for t in transports
        ],
        dtype=float,
    )


def effective_capacity(capacity: np.ndarray, loss: np.ndarray, flows: np.ndarray) -> np.ndarray:
    """``capacity * (1 - loss * (1 - 1/flows))`` where ``flows`` > 0, else ``capacity``.

    >>> effective_capacity(np.array([100.0, 100.0]), np.array([0.1, 0.1]), np.array([1, 5])).tolist()
    [100.0, 92.0]
    """
    f = np.maximum(np.asarray(flows, dtype=float), 1.0)
    return capacity * (1.0 - loss * (1.0 - 1.0 / f))
