"""Published training throughput against the framework presets, row by row.

``calibrate/published_throughput.yaml`` holds runs of framework benchmark tables that no
fit in this project reads (NeMo's and Megatron-Bridge's H100 FP8 summaries, torchtitan's
H100 tables and its H200 runs; a row the model is known to miss says why in
``known_gap``, none today), each as a
clustersim scenario with the tokens/s per GPU its source reports. They test the presets
out of sample: the framework named in each scenario supplies every default the source
does not print (ZeRO stage, overlap, attention kernel, cross-entropy), so a preset that
stops matching its framework shows here.

>>> rows = throughput_rows()
>>> rows[0].label, rows[0].measured
('GPT3-175B 128 GPUs', 716.0)
>>> 0.5 < predicted_tokens_per_gpu(rows[0]) / rows[0].measured < 2
True
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from calibrate.sourced_table import sourced_rows
from sim.scenario.load import Scenario, scenario_from_dict
from sim.training.step import simulate_step

__all__ = ["THROUGHPUT_TABLE", "ThroughputRow", "predicted_tokens_per_gpu", "throughput_rows"]

THROUGHPUT_TABLE = Path(__file__).with_name("published_throughput.yaml")


@dataclass(frozen=True)
class ThroughputRow:
    """One published run: its label, source key, tokens/s per GPU and scenario mapping;
    ``known_gap``: why the model misses it (such rows are kept out of the bounds)."""

    label: str
    source: str
    measured: float
    scenario: dict[str, Any]
    note: str = ""
    known_gap: str = ""

    @property
    def gpus(self) -> int:
        """GPUs of the run: TP x PP x CP x DP."""
        par = self.scenario["parallel"]
        return int(par.get("tp", 1) * par.get("pp", 1) * par.get("cp", 1) * par["dp"])

    def to_scenario(self, network: str = "analytical") -> Scenario:
        """The run as a :class:`~sim.scenario.load.Scenario` on ``network``."""
        return scenario_from_dict({**self.scenario, "network": network}, self.label)


def _row(r: dict[str, Any]) -> ThroughputRow:
    return ThroughputRow(
        r["label"],
        r["source"],
        float(r["measured"]),
        r["scenario"],
        r.get("note", ""),
        r.get("known_gap", ""),
    )


def throughput_rows(path: Path = THROUGHPUT_TABLE) -> list[ThroughputRow]:
    """Read the published-throughput table. Raises CalibrationError on a bad file."""
    return sourced_rows(path, "published-throughput", _row)


def predicted_tokens_per_gpu(
    row: ThroughputRow,
    network: str = "analytical",
    attention_kernel: str | None = None,
    profile: str | None = None,
) -> float:
    """Simulated tokens per second per GPU of ``row``'s run (with ``attention_kernel``
    instead of the run's own, and ``profile`` (a name, file or ``none``) instead of the one
    selected for its hardware, where given)."""
    sc = row.to_scenario(network)
    if attention_kernel is not None:
        sc = replace(sc, training=replace(sc.training, attention_kernel=attention_kernel))
    return float(simulate_step(sc, network=network, profile=profile).tokens_per_s) / row.gpus
