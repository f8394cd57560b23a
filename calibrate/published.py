"""Published training tables as validation data: Megatron-LM's A100 weak-scaling runs.

Narayanan et al. (SC21) / the Megatron-LM README table: GPT models of 1.7B to 1T
parameters on 32 to 3072 A100 80GB (Selene: DGX A100, 8 GPUs per node, HDR InfiniBand),
sequence 2048, vocab 51200. The table gives only model-parallel size = TP x PP; the
paper's split is TP = min(8, MP), PP = MP / TP. Its TFLOP/s count the recomputed forward
(full activation recomputation), so they are compared with the simulator's hardware-FLOP
rate (``StepResult.hw_tflops_per_gpu``).

Assumptions for every row (stated, not tuned per row): micro-batch 1, non-interleaved
1F1B, full recompute, no sequence parallelism, no flash attention (2021: GEMMs for scores
and context, dropout 0.1), Megatron's fused kernels (LayerNorm, bias-GeLU,
bias-dropout-add, scaled-masked softmax), data-parallel gradient all-reduce
after the backward pass (not overlapped; Megatron of 2021) in fp16 (the runs used fp16
mixed precision, whose gradients Megatron-LM all-reduced in fp16 unless
``--accumulate-allreduce-grads-in-fp32`` was given; not stated, assumed not).

The fit of the A100 parameters to this table and to the llm-foundry A100 tables is
:mod:`calibrate.fit_training` (``python -m calibrate.fit_training --gpu A100-SXM``).
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim.errors import CalibrationError
from sim.training.scenario import Scenario, scenario_from_dict
from sim.training.step import simulate_step

__all__ = [
    "MegatronRow",
    "megatron_scenario",
    "predict_rows",
    "read_megatron_table",
]


@dataclass(frozen=True)
class MegatronRow:
    """One row of the weak-scaling table."""

    name: str
    hidden: int
    layers: int
    model_parallel: int
    gpus: int
    batch: int
    tflops_per_gpu: float

    @property
    def tp(self) -> int:
        """Tensor-parallel size: min(8, MP)."""
        return min(8, self.model_parallel)

    @property
    def pp(self) -> int:
        """Pipeline-parallel size: MP / TP."""
        return self.model_parallel // self.tp


def read_megatron_table(path: str | Path) -> list[MegatronRow]:
    """Read ``megatron-lm-a100-weak-scaling.csv`` (line 1: source, line 2: header)."""
    p = Path(path)
    try:
        lines = p.read_text().splitlines()[1:]
        return [
            MegatronRow(
                r["model_size"],
                int(r["hidden_size"]),
                int(r["num_layers"]),
                int(r["model_parallel_size"]),
                int(r["num_gpus"]),
                int(r["batch_size"]),
                float(r["achieved_teraflops_per_gpu"]),
            )
            for r in csv.DictReader(lines)
        ]
    except (OSError, KeyError, ValueError) as e:
        raise CalibrationError(f"{path}: not a Megatron weak-scaling table ({e})") from None


def megatron_scenario(
    row: MegatronRow, profile: str | None = None, network: str = "analytical"
) -> Scenario:
    """The scenario of one row under the module's stated assumptions."""
    raw = {
        "model": {
            "layers": row.layers,
            "hidden": row.hidden,
            "heads": row.hidden // 128,
            "vocab": 51200,
            "tied_embeddings": True,
            "dropout": 0.1,
        },
        "cluster": {"topology": "a100-ib-hdr", "nodes": row.gpus // 8},
        "parallel": {
            "tp": row.tp,
            "pp": row.pp,
            "micro_batch": 1,
            "schedule": "1f1b",
            "recompute": "full",
            "overlap_dp": False,
        },
        "training": {
            "global_batch": row.batch,
            "seq_len": 2048,
            "precision": "bf16",
            "flash_attention": False,
            "fused_kernels": True,
            "grad_dtype": "fp16",
        },
        "network": network,
    }
    if profile:
        raw["profile"] = profile
    return scenario_from_dict(raw, f"megatron-{row.name}")


def predict_rows(
    rows: Sequence[MegatronRow], profile: str | None = None, compute: dict[str, float] | None = None
) -> np.ndarray:
    """Predicted hardware TFLOP/s per GPU of each row."""
    return np.array(
        [
            simulate_step(megatron_scenario(r, profile), compute=compute).hw_tflops_per_gpu
            for r in rows
        ]
    )
