"""Collective-timing parameters: data with documented defaults, overwritten by calibration.

The defaults live in ``defaults.yaml`` beside this module (with their sources); a
profile's ``collectives`` section may override any subset of them with the same shape.
A merged tree is validated whole by the pydantic models of
:mod:`sim.collectives.param_models` (the profile's models with the needed keys required),
so a mistake is one line naming the key path. The shipped defaults and shipped profiles
are built unchecked (the test suite checks them; see :meth:`CollectiveParams.from_dict`):

>>> default_params().merged({"algorithms": {"ring": {"efficiency": 1.5}}})
Traceback (most recent call last):
...
sim.errors.ConfigError: profile.collectives: algorithms.ring.efficiency: must be <= 1, got 1.5
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from sim.collectives.selection import PROTOCOLS
from sim.errors import ConfigError
from sim.files import load_shipped_yaml
from sim.topology.links import SCOPES

__all__ = [
    "PROTOCOLS",
    "SCOPES",
    "AlgorithmParams",
    "ChannelParams",
    "CollectiveParams",
    "TransportParams",
    "default_params",
]


@dataclass(frozen=True)
class AlgorithmParams:
    """Per-algorithm timing parameters (seconds; efficiency in (0, 1])."""

    efficiency: float
    protocols: tuple[str, ...]
    base_latency_s: Mapping[str, float]
    step_latency_s: Mapping[str, Mapping[str, float]]


@dataclass(frozen=True)
class ChannelParams:
    """NCCL channel model (see ``channels:`` in ``defaults.yaml``).

    Attributes
    ----------
    threads : Mapping[str, int]
        Threads per channel per protocol (NCCL's maxThreads).
    thread_threshold_bytes : Mapping[str, float]
        Bytes per thread before NCCL adds a channel (ring LL: times the rank count).
    bandwidth_Bps : Mapping[str, float]
        Most payload bytes/s one channel moves per protocol.
    per_server : int
        Channels of a group inside one server.
    per_nic : int
        Channels per NIC of a group that spans servers.
    slice_bytes : float
        Bytes of one pipelined slice of a channel (NCCL's buffer per step): a ring step
        moving at least this much per channel overlaps its handshake with its data.
    """

    threads: Mapping[str, int]
    thread_threshold_bytes: Mapping[str, float]
    bandwidth_Bps: Mapping[str, float]
    per_server: int
    per_nic: int
    slice_bytes: float = 524288.0


@dataclass(frozen=True)
class TransportParams:
    """One network transport (see ``transports:`` in ``defaults.yaml``).

    Attributes
    ----------
    efficiency : float
        Achievable fraction of a link's line rate, in (0, 1].
    socket_Bps : float
        Rate of one socket (bytes/s), for CPU-bound socket transports; inf otherwise.
    sockets : int
        Sockets per NIC (threads x sockets per thread).
    """

    efficiency: float
    socket_Bps: float = float("inf")
    sockets: int = 1

    def factor(self, line_Bps: float, at_nic: bool = True) -> float:
        """Fraction of a link of line rate ``line_Bps`` this transport achieves; the socket
        limit applies to a host's own NIC links only (``at_nic``), not to switch links.

        >>> TransportParams(0.9, 4.5e9, 1).factor(12.5e9)  # 100G: the socket binds
        0.36
        """
        if not at_nic:
            return self.efficiency
        return min(self.efficiency, self.sockets * self.socket_Bps / line_Bps)


@dataclass(frozen=True)
class CollectiveParams:
    """Everything the collective engine needs besides the topology.

    Attributes
    ----------
    link_efficiency : Mapping[str, float]
        Achievable fraction of line rate per scope (``nvlink``, ``pcie``, ``net``).
    protocol_efficiency : Mapping[str, float]
        Payload fraction per protocol (``ll``, ``ll128``, ``simple``).
    algorithms : Mapping[str, AlgorithmParams]
        Per-algorithm latencies and efficiency.
    pipeline_chunk_bytes : float
        Target bytes per pipelined piece for tree/NVLS/chain schedules.
    pipeline_max_chunks : int
        Cap on pipelined pieces of trees and NVLS (a ring broadcast or reduce chain's
        pieces keep ``pipeline_chunk_bytes``: :mod:`sim.collectives.simulate`).
    pipeline_min_chunks : int
        Floor on pipelined pieces: NCCL splits even small messages over many channels
        that run concurrently, so the steps of a pipelined algorithm overlap.
    channels : ChannelParams
        How many NCCL channels a collective uses at a size, and their rate.
    transports : Mapping[str, TransportParams]
        Per network transport: efficiency and socket limits; a ``net`` link of a listed
        transport uses it instead of ``link_efficiency["net"]``.
    raw : Mapping[str, Any]
        The merged parameter tree (for provenance and round trips).
    """

    link_efficiency: Mapping[str, float]
    protocol_efficiency: Mapping[str, float]
    algorithms: Mapping[str, AlgorithmParams]
    pipeline_chunk_bytes: float
    pipeline_max_chunks: int
    pipeline_min_chunks: int
    channels: ChannelParams
    transports: Mapping[str, TransportParams]
    raw: Mapping[str, Any]

    @classmethod
    def from_dict(
        cls,
        tree: Mapping[str, Any],
        where: str = "collectives",
        *,
        owned: bool = False,
        check: bool = True,
    ) -> CollectiveParams:
        """Validate a complete parameter tree shaped like ``defaults.yaml`` and build it.

        Parameters
        ----------
        tree : Mapping
            The whole tree (defaults, or defaults with a profile's section merged in).
        where : str
            Where the tree comes from, first in every error message.
        owned : bool
            The caller hands ``tree`` over: keep it as :attr:`raw` without a copy.
        check : bool
            Validate ``tree`` first (False only for the shipped defaults and shipped
            profiles, which the test suite validates: building the models' validators
            is ~20 ms of a cold command). The models are strict, so a valid tree's
            values are built as written, checked or not.

        Raises
        ------
        ConfigError
            One line naming the key path: a wrong type, a value out of range, an unknown
            or missing key (:data:`~sim.collectives.param_models.CompleteCollectives`).
        """
        if check:
            _check(tree, where)
        raw = dict(tree) if owned else copy.deepcopy(dict(tree))
        return _built(raw)

    def link_factor(
        self, scope: str, transport: str, line_Bps: float, at_nic: bool = True
    ) -> float:
        """Achievable fraction of a link's line rate: its transport's for a network link
        of a listed transport (socket limits on NIC links only), else its scope's link
        efficiency."""
        if scope == "net" and transport in self.transports:
            return self.transports[transport].factor(line_Bps, at_nic)
        return self.link_efficiency[scope]

    def merged(
        self, override: Mapping[str, Any], where: str = "profile.collectives", *, check: bool = True
    ) -> CollectiveParams:
        """These parameters with ``override`` (same shape, any subset) laid on top.

        The merge copies the mappings on the override's paths and shares the rest with
        ``self.raw`` (never mutated), so a fit can merge thousands of times cheaply; the
        override's own leaves are copied. ``check``: as :meth:`from_dict`'s.
        """
        tree = _deep_merge(self.raw, copy.deepcopy(override), where)
        return CollectiveParams.from_dict(tree, where, owned=True, check=check)

    def algorithm(self, name: str) -> AlgorithmParams:
        """Parameters of algorithm ``name``; ConfigError if it has none."""
        try:
            return self.algorithms[name]
        except KeyError:
            raise ConfigError(
                f"no collective parameters for algorithm {name!r}; known: {', '.join(sorted(self.algorithms))}"
            ) from None


def _check(tree: Mapping[str, Any], where: str) -> None:
    """Validate a complete tree (:data:`~sim.collectives.param_models.CompleteCollectives`;
    the models are imported here, when a tree is checked: a command on shipped data
    builds none of them)."""
    from sim.collectives.param_models import CompleteCollectives
    from sim.validation import validate_model

    validate_model(CompleteCollectives, tree, where)


@cache
def default_params() -> CollectiveParams:
    """The shipped defaults (``sim/collectives/defaults.yaml``; validated by the test suite,
    not at load: see :meth:`CollectiveParams.from_dict`)."""
    text = resources.files("sim.collectives").joinpath("defaults.yaml").read_text()
    tree = load_shipped_yaml(text, "defaults.yaml")
    return CollectiveParams.from_dict(tree, "defaults", owned=True, check=False)


def _deep_merge(base: Mapping[str, Any], over: Mapping[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(over, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {over!r}")
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(base.get(k), Mapping):
            out[k] = _deep_merge(base[k], v, f"{where}.{k}")
        else:
            out[k] = v
    return out


def _built(t: Mapping[str, Any]) -> CollectiveParams:
    """The dataclasses from a complete tree (valid against ``CompleteCollectives``; SI
    units). Keys the complete model leaves optional take the builder's defaults."""
    links, protos, pipe = t["link_efficiency"], t["protocols"], t["pipeline"]
    return CollectiveParams(
        {s: _efficiency(links[s]) for s in SCOPES},
        {p: float(protos[p]["efficiency"]) for p in PROTOCOLS},
        {name: _algorithm(a) for name, a in t["algorithms"].items()},
        float(pipe["chunk_bytes"]),
        pipe["max_chunks"],
        pipe.get("min_chunks") or 1,
        _channels(t["channels"]),
        {name: _transport(x) for name, x in (t.get("transports") or {}).items()},
        t,
    )


def _efficiency(entry: float | Mapping[str, Any]) -> float:
    """A bare number or ``{value: x, source: ...}``."""
    return float(entry["value"] if isinstance(entry, Mapping) else entry)


def _seconds(us: Mapping[str, float], protos: tuple[str, ...]) -> dict[str, float]:
    return {p: float(us[p]) * 1e-6 for p in protos}


def _algorithm(a: Mapping[str, Any]) -> AlgorithmParams:
    protos = tuple(a["protocols"]) if a.get("protocols") is not None else PROTOCOLS
    steps = a["step_latency_us"]
    return AlgorithmParams(
        float(a["efficiency"]),
        protos,
        _seconds(a["base_latency_us"], protos),
        {s: _seconds(steps[s], protos) for s in SCOPES},
    )


def _per_protocol(table: Mapping[str, float], scale: float = 1.0) -> dict[str, float]:
    return {p: float(table[p]) * scale for p in PROTOCOLS}


def _channels(c: Mapping[str, Any]) -> ChannelParams:
    slice_bytes = c.get("slice_bytes")
    return ChannelParams(
        {p: int(c["threads"][p]) for p in PROTOCOLS},
        _per_protocol(c["thread_threshold_bytes"]),
        _per_protocol(c["bandwidth_GBps"], 1e9),
        c["per_server"],
        c["per_nic"],
        float(slice_bytes) if slice_bytes is not None else 524288.0,
    )


def _transport(x: Mapping[str, Any]) -> TransportParams:
    eff = float(x["efficiency"])
    if x.get("socket_GBps") is None:
        return TransportParams(eff)
    return TransportParams(eff, x["socket_GBps"] * 1e9, x["threads"] * x["sockets_per_thread"])
