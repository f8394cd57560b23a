"""Published training tables as validation data: Megatron-LM's A100 weak-scaling runs.

Narayanan et al. (SC21) / the Megatron-LM README table: GPT models of 1.7B to 1T
parameters on 32 to 3072 A100 80GB (Selene: DGX A100, 8 GPUs per node, HDR InfiniBand),
sequence 2048, vocab 51200. The table gives only model-parallel size = TP x PP; the
paper's split is TP = min(8, MP), PP = MP / TP. Its TFLOP/s count the recomputed forward
(full activation recomputation), so they are compared with the simulator's hardware-FLOP
rate (``StepResult.hw_tflops_per_gpu``).

Assumptions for every row (stated, not tuned per row): micro-batch 1, non-interleaved
1F1B, full recompute, no sequence parallelism, no flash attention (2021), data-parallel
gradient all-reduce after the backward pass (not overlapped; Megatron of 2021), bf16
gradients (Megatron reduced fp32 gradients: our DP volume is half of theirs).
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
    "fit_compute",
    "leave_one_out",
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


def _params(x: np.ndarray) -> dict[str, float]:
    return {"matmul_eff_max": float(x[0]), "matmul_half_flops": float(10 ** x[1])}


def fit_compute(rows: Sequence[MegatronRow]) -> tuple[dict[str, float], np.ndarray]:
    """Fit the matmul efficiency curve (ceiling, half-saturation FLOPs) to ``rows``.

    One parameter set for all rows: robust least squares (soft-L1) on log(pred / measured).
    Returns the compute parameters and the relative errors on ``rows``.
    """
    from scipy.optimize import least_squares

    meas = np.array([r.tflops_per_gpu for r in rows])

    def resid(x: np.ndarray) -> np.ndarray:
        return np.log(predict_rows(rows, compute=_params(x)) / meas)

    res = least_squares(
        resid,
        [0.7, 10.0],
        bounds=([0.2, 6.0], [1.0, 13.0]),
        loss="soft_l1",
        f_scale=0.05,
        diff_step=1e-3,
    )
    params = _params(res.x)
    return params, predict_rows(rows, compute=params) / meas - 1


def leave_one_out(rows: Sequence[MegatronRow]) -> np.ndarray:
    """Relative error of each row predicted by a fit on the other rows."""
    out = []
    for i, row in enumerate(rows):
        params, _ = fit_compute([r for j, r in enumerate(rows) if j != i])
        out.append(predict_rows([row], compute=params)[0] / row.tflops_per_gpu - 1)
    return np.array(out)
