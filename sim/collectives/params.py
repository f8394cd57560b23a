"""Collective-timing parameters: data with documented defaults, overwritten by calibration.

The defaults live in ``defaults.yaml`` beside this module (with their sources); a
profile's ``collectives`` section may override any subset of them with the same shape.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from sim.collectives.gloo import check_backend
from sim.errors import ConfigError
from sim.files import load_yaml

__all__ = [
    "PROTOCOLS",
    "SCOPES",
    "AlgorithmParams",
    "ChannelParams",
    "CollectiveParams",
    "TransportParams",
    "default_params",
]

PROTOCOLS = ("ll", "ll128", "simple")
SCOPES = ("nvlink", "pcie", "net")


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
        Cap on pipelined pieces.
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
        cls, tree: Mapping[str, Any], where: str = "collectives", *, owned: bool = False
    ) -> CollectiveParams:
        """Validate a parameter tree shaped like ``defaults.yaml``; errors name the key."""
        _known(
            tree,
            {
                "source",
                "link_efficiency",
                "protocols",
                "algorithms",
                "pipeline",
                "channels",
                "transports",
                "backend",
                "gloo",
            },
            where,
        )  # fmt: skip
        check_backend(tree, where)
        link = {
            s: _eff(_get(tree, "link_efficiency", where), s, where + ".link_efficiency")
            for s in SCOPES
        }
        protos = _get(tree, "protocols", where)
        proto_eff = {
            p: _fraction(
                _get(protos, p, f"{where}.protocols"), "efficiency", f"{where}.protocols.{p}"
            )
            for p in PROTOCOLS
        }
        algos = {
            name: _algorithm(spec, f"{where}.algorithms.{name}")
            for name, spec in _get(tree, "algorithms", where).items()
        }
        pipe = _get(tree, "pipeline", where)
        chunk = _positive(pipe, "chunk_bytes", f"{where}.pipeline")
        max_chunks = int(_positive(pipe, "max_chunks", f"{where}.pipeline"))
        min_chunks = (
            int(_positive(pipe, "min_chunks", f"{where}.pipeline")) if "min_chunks" in pipe else 1
        )
        if min_chunks > max_chunks:
            raise ConfigError(
                f"{where}.pipeline.min_chunks: {min_chunks} must be <= max_chunks {max_chunks}"
            )
        channels = _channels(_get(tree, "channels", where), f"{where}.channels")
        transports = {
            name: _transport(spec, f"{where}.transports.{name}")
            for name, spec in tree.get("transports", {}).items()
        }
        return cls(
            link, proto_eff, algos, chunk, max_chunks, min_chunks, channels, transports,
            dict(tree) if owned else copy.deepcopy(dict(tree)),
        )  # fmt: skip

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
        self, override: Mapping[str, Any], where: str = "profile.collectives"
    ) -> CollectiveParams:
        """These parameters with ``override`` (same shape, any subset) laid on top.

        The merge copies the mappings on the override's paths and shares the rest with
        ``self.raw`` (never mutated), so a fit can merge thousands of times cheaply; the
        override's own leaves are copied.
        """
        tree = _deep_merge(self.raw, copy.deepcopy(dict(override)), where)
        return CollectiveParams.from_dict(tree, where, owned=True)

    def algorithm(self, name: str) -> AlgorithmParams:
        """Parameters of algorithm ``name``; ConfigError if it has none."""
        try:
            return self.algorithms[name]
        except KeyError:
            raise ConfigError(
                f"no collective parameters for algorithm {name!r}; known: {', '.join(sorted(self.algorithms))}"
            ) from None


@cache
def default_params() -> CollectiveParams:
    """The shipped defaults (``sim/collectives/defaults.yaml``)."""
    text = resources.files("sim.collectives").joinpath("defaults.yaml").read_text()
    return CollectiveParams.from_dict(load_yaml(text, "defaults.yaml"), "defaults")


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


def _known(tree: Mapping[str, Any], keys: set[str], where: str) -> None:
    if not isinstance(tree, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {tree!r}")
    for k in tree:
        if k not in keys:
            raise ConfigError(f"{where}: unknown key {k!r}; allowed: {', '.join(sorted(keys))}")


def _get(tree: Mapping[str, Any], key: str, where: str) -> Any:
    if not isinstance(tree, Mapping) or key not in tree:
        raise ConfigError(f"{where}: missing key {key!r}")
    return tree[key]


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}: expected a number, got {value!r}")
    return float(value)


def _fraction(tree: Mapping[str, Any], key: str, where: str) -> float:
    x = _number(_get(tree, key, where), f"{where}.{key}")
    if not 0 < x <= 1:
        raise ConfigError(f"{where}.{key}: {x!r} must be in (0, 1]")
    return x


def _eff(tree: Mapping[str, Any], scope: str, where: str) -> float:
    entry = _get(tree, scope, where)
    return (
        _fraction(entry, "value", f"{where}.{scope}")
        if isinstance(entry, Mapping)
        else _fraction({"value": entry}, "value", f"{where}.{scope}")
    )


def _positive(tree: Mapping[str, Any], key: str, where: str) -> float:
    x = _number(_get(tree, key, where), f"{where}.{key}")
    if x <= 0:
        raise ConfigError(f"{where}.{key}: {x!r} must be > 0")
    return x


def _latency_us(tree: Mapping[str, Any], protos: tuple[str, ...], where: str) -> dict[str, float]:
    out = {}
    for p in protos:
        x = _number(_get(tree, p, where), f"{where}.{p}")
        if x < 0:
            raise ConfigError(f"{where}.{p}: {x!r} must be >= 0 (microseconds)")
        out[p] = x * 1e-6
    return out


def _algorithm(spec: Mapping[str, Any], where: str) -> AlgorithmParams:
    _known(spec, {"efficiency", "protocols", "base_latency_us", "step_latency_us", "source"}, where)
    protos = tuple(spec.get("protocols", PROTOCOLS))
    for p in protos:
        if p not in PROTOCOLS:
            raise ConfigError(
                f"{where}.protocols: unknown protocol {p!r}; allowed: {', '.join(PROTOCOLS)}"
            )
    base = _latency_us(_get(spec, "base_latency_us", where), protos, f"{where}.base_latency_us")
    steps = _get(spec, "step_latency_us", where)
    step = {
        s: _latency_us(
            _get(steps, s, f"{where}.step_latency_us"), protos, f"{where}.step_latency_us.{s}"
        )
        for s in SCOPES
    }
    return AlgorithmParams(_fraction(spec, "efficiency", where), protos, base, step)


def _per_protocol(tree: Mapping[str, Any], key: str, where: str) -> dict[str, float]:
    sub = _get(tree, key, where)
    _known(sub, set(PROTOCOLS), f"{where}.{key}")
    return {p: _positive(sub, p, f"{where}.{key}") for p in PROTOCOLS}


def _channels(tree: Mapping[str, Any], where: str) -> ChannelParams:
    _known(
        tree,
        {
            "source",
            "threads",
            "thread_threshold_bytes",
            "bandwidth_GBps",
            "per_server",
            "per_nic",
            "slice_bytes",
        },
        where,
    )
    threads = {p: int(v) for p, v in _per_protocol(tree, "threads", where).items()}
    bw = {p: v * 1e9 for p, v in _per_protocol(tree, "bandwidth_GBps", where).items()}
    return ChannelParams(
        threads, _per_protocol(tree, "thread_threshold_bytes", where), bw,
        int(_positive(tree, "per_server", where)), int(_positive(tree, "per_nic", where)),
        _positive(tree, "slice_bytes", where) if "slice_bytes" in tree else 524288.0,
    )  # fmt: skip


def _transport(spec: Mapping[str, Any], where: str) -> TransportParams:
    _known(spec, {"efficiency", "socket_GBps", "threads", "sockets_per_thread", "source"}, where)
    eff = _fraction(spec, "efficiency", where)
    if "socket_GBps" not in spec:
        return TransportParams(eff)
    socks = int(_positive(spec, "threads", where)) * int(
        _positive(spec, "sockets_per_thread", where)
    )
    return TransportParams(eff, _positive(spec, "socket_GBps", where) * 1e9, socks)
