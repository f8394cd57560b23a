"""The record of one simulated collective (nccl-tests' columns and provenance)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from sim.collectives.schedule import busbw_factor

__all__ = ["CollectiveResult"]


@dataclass(frozen=True)
class CollectiveResult:
    """One simulated collective (SI units; bandwidths in bytes/s, nccl-tests definitions)."""

    op: str
    size_bytes: float
    n_ranks: int
    time_s: float
    algorithm: str
    protocol: str
    network: str
    steps: int
    channels: int
    pipeline_chunks: int
    wire_bytes_by_scope: dict[str, float] = field(default_factory=dict)

    @property
    def algbw_Bps(self) -> float:
        """Algorithm bandwidth: size / time (bytes/s)."""
        return self.size_bytes / self.time_s if self.time_s > 0 else float("inf")

    @property
    def busbw_Bps(self) -> float:
        """Bus bandwidth: algbw times nccl-tests' factor for the op (bytes/s)."""
        return self.algbw_Bps * busbw_factor(self.op, self.n_ranks)

    def record(self) -> dict[str, object]:
        """JSON-ready record (nccl-tests columns plus provenance)."""
        d = asdict(self)
        d.update(
            time_us=self.time_s * 1e6,
            algbw_GBps=self.algbw_Bps / 1e9,
            busbw_GBps=self.busbw_Bps / 1e9,
        )
        return d
