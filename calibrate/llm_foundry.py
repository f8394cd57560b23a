"""MosaicML llm-foundry MPT benchmark tables as validation data (H100 and A100, FSDP).

The tables (``../shared/data/published/llm-foundry-mpt-*.csv``, converted cell for cell
from github.com/mosaicml/llm-foundry scripts/train/benchmarking/README.md) give, per run:
model, sequence length, GPUs, micro-batch, gradient accumulation, global batch, precision,
FSDP mixed-precision mode and sharding strategy, activation checkpointing, and the
measured throughput in tokens/s per GPU, which is what is compared.

Assumptions for every row (stated, not tuned per row):

- MPT shapes (d_model / heads / layers): 125m 768/12/12, 350m 1024/16/24,
  760m 1536/12/24, 1b 2048/16/24, 3b 2560/20/32, 7b 4096/32/32, 13b 5120/40/40,
  30b 7168/64/48, 70b 8192/64/80; vocab 50368, 4x GeLU MLP, LayerNorm and biases,
  tied embeddings, a learned position table of ``seq`` rows, no dropout. The tables'
  NumParams column matches these exactly (12 h^2 + 13 h per layer, embeddings, the
  position table and the final norm).
- FSDP FULL_SHARD = ZeRO-3 (SHARD_GRAD_OP = ZeRO-2) over all GPUs, parameters gathered
  in bf16, gradients reduced in fp32 under Composer's ``DEFAULT`` mixed precision and in
  bf16 under ``PURE``; activation checkpointing = full recompute; flash attention.
- ``amp_fp8``: Transformer Engine fp8 for the linear layers (attention core and the tied
  logits projection stay bf16).
- Fabric: A100 rows on 8 x 200 Gb/s RoCE per node (``a100-*gb-roce-200g``, as the README
  states); the H100 fabric is not stated, assumed 8 x 400 Gb/s NDR InfiniBand
  (``h100-ib-ndr``).
- Where micro-batch x accumulation x GPUs differs from the global batch (Composer splits
  a batch into unequal micro-batches), the step simulated is micro-batch x accumulation x
  GPUs sequences; tokens/s per GPU is compared.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sim.errors import CalibrationError
from sim.scenario.load import Scenario, scenario_from_dict

__all__ = [
    "MPT_SHAPES",
    "TABLES",
    "FoundryRow",
    "foundry_scenario",
    "read_foundry_table",
]

#: name -> (d_model, heads, layers)
MPT_SHAPES: dict[str, tuple[int, int, int]] = {
    "125m": (768, 12, 12), "350m": (1024, 16, 24), "760m": (1536, 12, 24),
    "1b": (2048, 16, 24), "3b": (2560, 20, 32), "7b": (4096, 32, 32),
    "13b": (5120, 40, 40), "30b": (7168, 64, 48), "70b": (8192, 64, 80),
}  # fmt: skip
MPT_VOCAB = 50368

#: table file -> topology preset of its cluster
TABLES: dict[str, str] = {
    "llm-foundry-mpt-h100-bf16.csv": "h100-ib-ndr",
    "llm-foundry-mpt-h100-fp8.csv": "h100-ib-ndr",
    "llm-foundry-mpt-a100-80gb.csv": "a100-80gb-roce-200g",
    "llm-foundry-mpt-a100-40gb.csv": "a100-40gb-roce-200g",
}


@dataclass(frozen=True)
class FoundryRow:
    """One run of an llm-foundry table."""

    model: str
    seq: int
    gpus: int
    micro_batch: int
    grad_accum: int
    global_batch: int
    precision: str  # bf16 or fp8
    grad_dtype: str  # fp32 (DEFAULT) or bf16 (PURE)
    sharding: str  # FSDP strategy
    recompute: bool
    tokens_per_s_per_gpu: float
    mfu: float
    topology: str

    @property
    def label(self) -> str:
        """Short row label, e.g. ``7b s2048 8gpu``."""
        return f"{self.model} s{self.seq} {self.gpus}gpu mb{self.micro_batch}"


def _row(r: Mapping[str, str], topology: str) -> FoundryRow:
    precision = r["Precision"].replace("amp_", "")
    return FoundryRow(
        model=r["Model"],
        seq=int(r["SeqLen (T)"]),
        gpus=int(r["# GPUs"]),
        micro_batch=int(r["MicroBatchSize"]),
        grad_accum=int(r["GradAccum"]),
        global_batch=int(r["GlobalBatchSize"]),
        precision="fp8" if precision == "fp8" else "bf16",
        grad_dtype="bf16" if r["MP Mode"] == "PURE" else "fp32",
        sharding=r["Sharding Strategy"],
        recompute=r["Activation Checkpointing"] == "True",
        tokens_per_s_per_gpu=float(r["Throughput (T/s/GPU)"]),
        mfu=float(r["MFU"]) / 100,
        topology=topology,
    )


def read_foundry_table(path: str | Path, models: Sequence[str] | None = None) -> list[FoundryRow]:
    """Read an llm-foundry table (line 1: source, line 2: header); rows of known shapes.

    Raises CalibrationError when the file is not such a table.
    """
    p = Path(path)
    topology = TABLES.get(p.name)
    if topology is None:
        raise CalibrationError(f"{path}: not a known llm-foundry table ({', '.join(TABLES)})")
    try:
        lines = p.read_text().splitlines()[1:]
        rows = [_row(r, topology) for r in csv.DictReader(lines)]
    except (OSError, KeyError, ValueError) as e:
        raise CalibrationError(f"{path}: not an llm-foundry benchmark table ({e})") from None
    keep = set(models) if models is not None else set(MPT_SHAPES)
    return [r for r in rows if r.model in keep and r.model in MPT_SHAPES]


def foundry_scenario(row: FoundryRow, network: str = "analytical") -> Scenario:
    """The scenario of one row under the module's stated assumptions."""
    d, heads, layers = MPT_SHAPES[row.model]
    raw = {
        "model": {
            "layers": layers, "hidden": d, "heads": heads, "vocab": MPT_VOCAB,
            "tied_embeddings": True, "bias": True, "max_seq": row.seq, "dropout": 0.0,
        },
        "cluster": {"topology": row.topology, "nodes": max(1, row.gpus // 8)},
        "parallel": {
            "dp": row.gpus, "zero": row.sharding, "micro_batch": row.micro_batch,
            "recompute": "full" if row.recompute else "none",
        },
        "training": {
            "global_batch": row.micro_batch * row.grad_accum * row.gpus,
            "seq_len": row.seq, "precision": row.precision, "grad_dtype": row.grad_dtype,
            "cross_entropy": "fused", "attention_kernel": "fa_triton",
        },
        "network": network,
    }  # fmt: skip
    return scenario_from_dict(raw, f"mpt-{row.label}")
