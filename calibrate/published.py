"""Published training tables as validation data: Megatron-LM's A100 weak-scaling runs, its
A100 selective-recompute runs and Megatron-Core's H100 weak-scaling runs.

Narayanan et al. (SC21) / the Megatron-LM README table: GPT models of 1.7B to 1T
parameters on 32 to 3072 A100 80GB (Selene: DGX A100, 8 GPUs per node, HDR InfiniBand),
sequence 2048, vocab 51200. The table gives only model-parallel size = TP x PP; the
paper's split is TP = min(8, MP), PP = MP / TP. Its TFLOP/s count the recomputed forward
(full activation recomputation), so they are compared with the simulator's hardware-FLOP
rate (``StepResult.hw_tflops_per_gpu``).

The run settings of every row come from the authors' script for Table 1,
``examples/sc21/run_table_1.sh`` in github.com/NVIDIA/Megatron-LM (:data:`SC21_RUNS`):
attention heads, micro-batch size, torch DDP (gradient all-reduce overlapped with the
backward pass) for the runs without pipeline parallelism and Megatron's local DDP (after
the backward pass) for the others, and the interleaved 1F1B schedule (layers per virtual
stage) for 76B-530B. A row the script does not name falls back to heads = hidden / 128,
micro-batch 1, non-interleaved 1F1B and a non-overlapped all-reduce.

Assumptions for every row (stated, not tuned per row): full recompute (the script's
``--recompute-method uniform``), no sequence parallelism, no flash attention (2021: GEMMs
for scores and context, dropout 0.1), Megatron's fused kernels (LayerNorm, bias-GeLU,
bias-dropout-add, scaled-masked softmax), gradients all-reduced in fp16 (the runs used
fp16 mixed precision, whose gradients Megatron-LM all-reduced in fp16 unless
``--accumulate-allreduce-grads-in-fp32`` was given; the script's ``CONFIG.sh`` does not
give it), and no gradient-accumulation fusion (``training.grad_accum_fusion: false``:
the 2021 code, NVIDIA/Megatron-LM@aed2f75e, has no ``--gradient-accumulation-fusion``;
each micro-batch after the first adds its fresh fp16 weight gradients into ``.grad``
through autograd, or into ``main_grad`` in the local DDP's hook).

The fit of the A100 parameters to this table and to the llm-foundry A100 tables is
:mod:`calibrate.fit_training` (``python -m calibrate.fit_training --gpu A100-SXM``).

Megatron-Core H100 (``megatron-core-h100-weak-scaling.csv``: the Megatron-LM README's
"Performance Benchmarking" table, GPT 1.7B-462B on 48-6144 H100): TP, PP and DP per row;
sequence 4096, vocab 131072, ``--overlap-grad-reduce --overlap-param-gather
--tp-comm-overlap``; per-GPU *model* TFLOP/s (compared with
``StepResult.model_tflops_per_gpu``). Assumptions for every row (:func:`mcore_scenario`;
stated, not tuned per row): bf16 (the README does not say; presumably bf16), micro-batch 1
(batch / DP sequences per replica, as the batch column grows with DP fixed at 48), the
distributed optimizer (``--overlap-param-gather`` needs it: ZeRO-1), gradients reduced in
bf16 (Megatron-Core's default ``grad_reduce_in_fp32=False``), sequence parallelism with
TP > 1 (``--tp-comm-overlap`` needs it) and TP communication overlapped, the
non-interleaved 1F1B schedule, Megatron-Core's own behaviour (``training.framework:
megatron-core``: ``--overlap-param-gather`` gathers each bucket's updated parameters one
bucket ahead of the next step's forward, as its forward pre-hooks dispatch them without
interleaving, the first bucket's from the step's start (``zero_grad()`` at the README
table's commit f2e5db40); pipeline ranks > 0 have one bucket, gathered whole from the
step's start; :mod:`sim.workload.frameworks`), no activation recomputation, Transformer Engine's fused
kernels and flash attention, GeLU MLP of 4 x hidden with biases, LayerNorm, learned
absolute positions (Megatron's defaults), untied embeddings and output weights; the
fabric is not stated, assumed 8 x 400 Gb/s NDR InfiniBand per 8-GPU server
(``h100-ib-ndr``; NVIDIA's EOS).

Megatron-LM A100 with selective recompute (``megatron-mfu-hfu-a100.csv``: the Megatron-LM
README's MFU/HFU table at commit 2e90a342, 2022-05-19, measured "using a data parallel
size of one"; Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models", arXiv 2205.05198). The table names only the model; each model's
shape and run (TP, PP, GPUs, batch, micro-batch, interleaving) are the paper's, as the
analytical model Calculon encodes them for its own validation against the same runs
(github.com/calculon-ai/calculon, ``validation/*_seqsel.json`` and ``examples/*.json``):
:data:`SELECTIVE_RUNS`. The published MFU is model FLOP/s over the A100's 312 TFLOP/s
fp16/bf16 peak, with the paper's model FLOPs ``72 B s l h^2 (1 + s / 6h + V / 12 l h)``,
the same count as ``StepResult.model_tflops_per_gpu`` (attention scores in full, the
logits included, no recompute), so the table is compared as model TFLOP/s per GPU
(``MFU x 312``). Assumptions for every row (:func:`selective_scenario`; stated, not tuned
per row): as the SC21 rows above (fp16 mixed precision run as bf16, no flash attention,
dropout 0.1, Megatron's fused kernels, tied embeddings, gradients in fp16 without
gradient-accumulation fusion: the 2022 code turns the fusion off unless gradients are
accumulated in fp32, ``megatron/arguments.py`` at 2e90a342, and the runs' fp16 setup does
not ask for that), with sequence parallelism and selective recompute (the attention core:
scores, softmax, dropout, context), no data parallelism (nothing to reduce), and the 2022
code's behaviour as behaviour keys over the ``megatron-core`` preset
(:data:`MEGATRON_LM_2022`): its column-parallel backward launches 4 of a layer's 10 TP
collectives asynchronously beside the layer's own GEMMs (the input re-gather beside the
input-gradient GEMM, the gradient reduce-scatter beside the weight-gradient GEMM;
``tp_async_backward``), and every other TP collective is on the critical path. The SC21
rows' 2021 code had no such overlap (NVIDIA/Megatron-LM@aed2f75e; the asynchronous
all-reduce arrived in 2021-08), so they name no framework.

The same file's header quotes the README's strong-scaling statement: GPT-3 175B (the
table's 177B row) from 96 to 4608 H100 at a fixed batch of 1152 sequences, MFU falling
from 47% to 42% (:func:`read_mcore_strong_scaling`). It names no schedule; its TP and PP
are taken from the 177B row, DP = GPUs / (TP x PP). :func:`strong_scaling_scenario` builds
any point under the table's assumptions, or interleaved with ``v`` chunks per stage;
:func:`strong_scaling_curve` gives the published points, the table's 177B row (2304 GPUs at
the same batch) between the statement's two ends.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from sim.errors import CalibrationError
from sim.result import StepResult
from sim.scenario.load import Scenario, scenario_from_dict
from sim.training.step import simulate_step

__all__ = [
    "A100_PEAK_TFLOPS",
    "MCORE_SEQ",
    "MCORE_VOCAB",
    "MEGATRON_LM_2022",
    "MEGATRON_LM_FP16",
    "SC21_RUNS",
    "SELECTIVE_PAPER_SECONDS",
    "SELECTIVE_RUNS",
    "McoreRow",
    "MegatronRow",
    "SelectiveRow",
    "StrongScaling",
    "StrongScalingPoint",
    "full_recompute",
    "implied_compute_only_mfu",
    "mcore_scenario",
    "megatron_scenario",
    "predict_rows",
    "read_mcore_strong_scaling",
    "read_mcore_table",
    "read_megatron_table",
    "read_selective_table",
    "selective_scenario",
    "strong_scaling_curve",
    "strong_scaling_scenario",
]


#: Table 1 row -> (attention heads, micro-batch, torch DDP (overlapped all-reduce),
#: layers per virtual pipeline stage or None); source: Megatron-LM
#: examples/sc21/run_table_1.sh (NAH, MBS, DDP=torch|local,
#: --num-layers-per-virtual-pipeline-stage), the script the paper's Table 1 came from.
SC21_RUNS: dict[str, tuple[int, int, bool, int | None]] = {
    "1.7B": (24, 16, True, None),
    "3.6B": (32, 16, True, None),
    "7.5B": (32, 16, True, None),
    "18B": (48, 8, True, None),
    "39B": (64, 4, False, None),
    "76B": (80, 2, False, 5),
    "145B": (96, 2, False, 5),
    "310B": (128, 1, False, 3),
    "530B": (128, 1, False, 1),
    "1T": (160, 1, False, None),
}


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
    row: MegatronRow, profile: str | None = None, network: str = "analytical",
    run_script: bool = True,
) -> Scenario:  # fmt: skip
    """The scenario of one row under the module's stated assumptions.

    ``run_script``: take heads, micro-batch, DDP overlap and interleaving from
    :data:`SC21_RUNS` (where it names the row); False: heads = hidden / 128,
    micro-batch 1, non-interleaved 1F1B, all-reduce after the backward pass.
    """
    heads, micro, overlap, per_virtual = SC21_RUNS.get(row.name, (0, 1, False, None))
    if not run_script or heads == 0:
        heads, micro, overlap, per_virtual = row.hidden // 128, 1, False, None
    parallel: dict[str, object] = {
        "tp": row.tp,
        "pp": row.pp,
        "micro_batch": micro,
        "schedule": "1f1b",
        "recompute": "full",
        "overlap_dp": overlap,
    }
    if per_virtual is not None:
        parallel["schedule"] = "interleaved"
        parallel["virtual_stages"] = row.layers // row.pp // per_virtual
    raw = _megatron_lm_run(row.layers, row.hidden, heads, row.gpus, row.batch, parallel, network)
    if profile:
        raw["profile"] = profile
    return scenario_from_dict(raw, f"megatron-{row.name}")


def _megatron_lm_run(layers: int, hidden: int, heads: int, gpus: int, batch: int,
                     parallel: dict[str, object], network: str,
                     framework: dict[str, object] | None = None) -> dict[str, object]:  # fmt: skip
    """The scenario tree of a Megatron-LM A100 run under the assumptions the SC21 and the
    2022 selective-recompute rows share (module docstring): GPT of vocab 51200 with tied
    embeddings and dropout 0.1 at sequence 2048 on Selene, fp16 as bf16, no flash
    attention, fused kernels, fp16 gradients without gradient-accumulation fusion;
    ``framework``: behaviour keys over the ``megatron-core`` preset (None: no framework)."""
    training: dict[str, object] = {
        "global_batch": batch, "seq_len": 2048, "precision": "bf16",
        "flash_attention": False, "fused_kernels": True, "grad_dtype": "fp16",
        "grad_accum_fusion": False,
    }  # fmt: skip
    raw: dict[str, object] = {
        "model": {
            "layers": layers, "hidden": hidden, "heads": heads, "vocab": 51200,
            "tied_embeddings": True, "dropout": 0.1,
        },
        "cluster": {"topology": "a100-ib-hdr", "nodes": max(1, gpus // 8)},
        "parallel": parallel,
        "training": training,
        "network": network,
    }  # fmt: skip
    if framework is not None:
        training["framework"] = "megatron-core"
        raw["framework"] = dict(framework)
    return raw


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


#: Megatron-Core benchmark table: sequence length and vocabulary (the README's text).
MCORE_SEQ = 4096
MCORE_VOCAB = 131072


@dataclass(frozen=True)
class McoreRow:
    """One row of the Megatron-Core H100 weak-scaling table."""

    name: str
    heads: int
    hidden: int
    layers: int
    tp: int
    pp: int
    dp: int
    gpus: int
    batch: int
    tflops_per_gpu: float


def read_mcore_table(path: str | Path) -> list[McoreRow]:
    """Read ``megatron-core-h100-weak-scaling.csv`` (line 1: source, line 2: header).

    Raises CalibrationError when the file is not that table or a row's TP x PP x DP is not
    its GPU count.
    """
    p = Path(path)
    try:
        lines = p.read_text().splitlines()[1:]
        rows = [
            McoreRow(r["model_size"], int(r["attention_heads"]), int(r["hidden_size"]),
                     int(r["num_layers"]), int(r["tensor_mp_size"]), int(r["pipeline_mp_size"]),
                     int(r["data_parallel_size"]), int(r["num_gpus"]), int(r["batch_size"]),
                     float(r["per_gpu_teraflops"]))
            for r in csv.DictReader(lines)
        ]  # fmt: skip
    except (OSError, KeyError, ValueError) as e:
        raise CalibrationError(f"{path}: not a Megatron-Core weak-scaling table ({e})") from None
    for r in rows:
        if r.tp * r.pp * r.dp != r.gpus:
            raise CalibrationError(
                f"{path}: row {r.name}: TP {r.tp} x PP {r.pp} x DP {r.dp} != {r.gpus} GPUs"
            )
    return rows


def mcore_scenario(row: McoreRow, network: str = "analytical") -> Scenario:
    """The scenario of one Megatron-Core row under the module's stated assumptions."""
    raw = {
        "model": {
            "layers": row.layers, "hidden": row.hidden, "heads": row.heads,
            "vocab": MCORE_VOCAB, "max_seq": MCORE_SEQ, "tied_embeddings": False,
            "bias": True, "dropout": 0.0,
        },
        "cluster": {"topology": "h100-ib-ndr", "nodes": max(1, row.gpus // 8)},
        "parallel": {
            "tp": row.tp, "pp": row.pp, "dp": row.dp, "sp": row.tp > 1, "zero": 1,
            "micro_batch": 1, "schedule": "1f1b", "recompute": "none",
            "overlap_tp": row.tp > 1, "overlap_dp": True,
        },
        "training": {
            "global_batch": row.batch, "seq_len": MCORE_SEQ, "precision": "bf16",
            "flash_attention": True, "fused_kernels": True, "grad_dtype": "bf16",
            "framework": "megatron-core",
        },
        "network": network,
    }  # fmt: skip
    return scenario_from_dict(raw, f"mcore-{row.name}")


@dataclass(frozen=True)
class StrongScaling:
    """The Megatron-Core README's strong-scaling statement: the table's ``row`` (by name)
    run on ``gpus`` = (fewest, most) H100 at a fixed ``batch``, at ``mfu`` = (at fewest,
    at most), fractions."""

    row: str
    gpus: tuple[int, int]
    batch: int
    mfu: tuple[float, float]


_STRONG = re.compile(
    r"\((\d+)B\) from (\d+) to (\d+) H100 at fixed batch (\d+) sequences, "
    r"MFU falls from (\d+)% to (\d+)%"
)


def read_mcore_strong_scaling(path: str | Path) -> StrongScaling:
    """The strong-scaling statement quoted in the header (line 1) of
    ``megatron-core-h100-weak-scaling.csv``.

    Raises CalibrationError when the header does not quote it.
    """
    try:
        head = Path(path).read_text().splitlines()[0]
    except (OSError, IndexError) as e:
        raise CalibrationError(f"{path}: cannot read the table's header ({e})") from None
    m = _STRONG.search(head)
    if m is None:
        raise CalibrationError(f"{path}: the header quotes no strong-scaling statement")
    size, low, high, batch, mfu_low, mfu_high = m.groups()
    return StrongScaling(f"{size}B", (int(low), int(high)), int(batch),
                         (int(mfu_low) / 100, int(mfu_high) / 100))  # fmt: skip


@dataclass(frozen=True)
class StrongScalingPoint:
    """One published point of the strong-scaling curve: ``gpus`` H100 at the statement's
    batch, published MFU (fraction), and where it comes from."""

    gpus: int
    mfu: float
    source: str


def strong_scaling_curve(path: str | Path) -> tuple[McoreRow, list[StrongScalingPoint]]:
    """The strong-scaling statement's row and its published points, fewest GPUs first:
    the statement's two ends, and between them the table's own row where it is a point of
    the same curve (same TP, PP and batch: the 177B row runs 2304 GPUs at 1152 sequences),
    at its per-GPU TFLOP/s over H100 SXM's dense bf16 peak (the simulator's MFU
    denominator, ``topologies/catalog/gpus.yaml``).

    Raises CalibrationError when the header quotes no statement or the table has no row
    of that name.
    """
    from sim.catalog import gpu_spec

    claim = read_mcore_strong_scaling(path)
    row = next((r for r in read_mcore_table(path) if r.name == claim.row), None)
    if row is None:
        raise CalibrationError(f"{path}: no row {claim.row!r} for the strong-scaling statement")
    low, high = claim.gpus
    points = [StrongScalingPoint(low, claim.mfu[0], "statement"),
              StrongScalingPoint(high, claim.mfu[1], "statement")]  # fmt: skip
    if row.batch == claim.batch and low < row.gpus < high:
        peak = gpu_spec("H100-SXM").peak_flops["bf16"]
        points.insert(
            1, StrongScalingPoint(row.gpus, row.tflops_per_gpu * 1e12 / peak, "table row")
        )
    return row, points


def implied_compute_only_mfu(mfu: float, r: StepResult) -> float:
    """Compute-only MFU (fraction of peak) that a run of ``mfu`` implies where ``r`` is
    its predicted step: the non-compute share of ``r`` taken out, ``mfu x step /
    compute``. With ``r.mfu``, the simulator's own (model FLOPs over the compute time)."""
    return mfu * r.step_time_s / r.breakdown["compute"]


def strong_scaling_scenario(
    row: McoreRow, gpus: int, batch: int, virtual_stages: int = 1
) -> Scenario:
    """:func:`mcore_scenario` of ``row`` on ``gpus`` GPUs at ``batch`` sequences (DP =
    gpus / (TP x PP)); with ``virtual_stages`` > 1 under the interleaved 1F1B schedule.

    Raises CalibrationError when ``gpus`` is not a multiple of TP x PP.
    """
    model_parallel = row.tp * row.pp
    if gpus % model_parallel:
        raise CalibrationError(f"{gpus} GPUs do not divide into TP {row.tp} x PP {row.pp}")
    sc = mcore_scenario(replace(row, dp=gpus // model_parallel, gpus=gpus, batch=batch))
    if virtual_stages == 1:
        return sc
    par = replace(sc.parallel, schedule="interleaved", virtual_stages=virtual_stages)
    return replace(sc, parallel=par)


#: Megatron-LM selective-recompute runs (Korthikanti et al. 2022): model -> (heads, hidden,
#: layers, TP, PP, GPUs, global batch, micro-batch, model chunks per pipeline stage), as
#: Calculon's validation encodes the paper's runs (module docstring); sequence 2048, vocab
#: 51200, DP 1.
SELECTIVE_RUNS: dict[str, tuple[int, int, int, int, int, int, int, int, int]] = {
    "22B": (64, 6144, 48, 8, 1, 8, 4, 4, 1),
    "175B": (96, 12288, 96, 8, 8, 64, 64, 1, 3),
    "530B": (128, 20480, 105, 8, 35, 280, 280, 1, 3),
    "1T": (160, 25600, 128, 8, 64, 512, 512, 1, 1),
}

#: Iteration seconds of the same runs in Korthikanti et al. 2022 (full recompute without
#: sequence parallelism, the paper's baseline; selective recompute with it), as Calculon's
#: validation quotes them (github.com/calculon-ai/calculon, calculon/megatron/validation.py:
#: "reported here: https://arxiv.org/pdf/2205.05198"). Not in ../shared/data; the
#: selective times give the shared table's MFU within 0.2 point with the paper's FLOP count.
SELECTIVE_PAPER_SECONDS: dict[str, tuple[float, float]] = {
    "22B": (1.42, 1.10),
    "175B": (18.13, 13.75),
    "530B": (49.05, 37.83),
    "1T": (94.42, 71.49),
}

#: Megatron-LM before Megatron-Core, as the A100 tables ran it, in behaviour keys over the
#: ``megatron-core`` preset (:mod:`sim.workload.frameworks`): fp16 gradients reduced in
#: fp16 with an fp32 copy for the optimizer, no distributed optimizer, no TP or parameter
#: gather overlap (``megatron/arguments.py`` and ``megatron/optimizer`` at 2e90a342).
MEGATRON_LM_FP16: dict[str, object] = {
    "main_grad_dtype": "fp16", "grad_reduce_dtype": "fp16", "fp32_grad_copy": True,
    "default_zero": 0, "overlap_param_gather": False, "tp_comm_overlap": False,
}  # fmt: skip

#: The 2022 selective-recompute runs' Megatron-LM (the sequence-parallel branch, merged
#: 2022-05-20 as NVIDIA/Megatron-LM@9aad9203): :data:`MEGATRON_LM_FP16`, sent pipeline
#: outputs deallocated (``deallocate_output_tensor``, ``megatron/schedules.py``, since
#: 2022-01) and the column-parallel backward's collectives run asynchronously beside its
#: GEMMs (``LinearWithGradAccumulationAndAsyncCommunication`` in ``megatron/mpu/layers.py``:
#: the re-gather beside the input-gradient GEMM, the reduce-scatter, or without sequence
#: parallelism the all-reduce, beside the weight-gradient GEMM).
MEGATRON_LM_2022: dict[str, object] = {
    **MEGATRON_LM_FP16, "deallocate_pipeline_outputs": True, "tp_async_backward": True,
}  # fmt: skip

#: A100's dense fp16/bf16 peak, TFLOP/s (NVIDIA A100 datasheet): the MFU denominator.
A100_PEAK_TFLOPS = 312.0


@dataclass(frozen=True)
class SelectiveRow:
    """One row of the selective-recompute table: the run and its published MFU and HFU
    (fractions)."""

    name: str
    heads: int
    hidden: int
    layers: int
    tp: int
    pp: int
    gpus: int
    batch: int
    micro_batch: int
    virtual_stages: int
    mfu: float
    hfu: float

    @property
    def model_tflops_per_gpu(self) -> float:
        """Published model TFLOP/s per GPU: MFU x the A100's 312 TFLOP/s."""
        return self.mfu * A100_PEAK_TFLOPS


def _fraction(cell: str) -> float:
    return float(cell.strip().rstrip("%")) / 100


def read_selective_table(path: str | Path) -> list[SelectiveRow]:
    """Read ``megatron-mfu-hfu-a100.csv`` (line 1: source, line 2: header).

    Raises CalibrationError when the file is not that table or names a model without a
    known run (:data:`SELECTIVE_RUNS`).
    """
    try:
        lines = Path(path).read_text().splitlines()[1:]
        cells = [(r["model_size"], _fraction(r["model_flops_utilization"]),
                  _fraction(r["hardware_flops_utilization"]))
                 for r in csv.DictReader(lines)]  # fmt: skip
    except (OSError, KeyError, ValueError, AttributeError) as e:
        raise CalibrationError(f"{path}: not the Megatron MFU/HFU table ({e})") from None
    unknown = [name for name, _, _ in cells if name not in SELECTIVE_RUNS]
    if unknown:
        known = ", ".join(SELECTIVE_RUNS)
        raise CalibrationError(f"{path}: no known run for {', '.join(unknown)}; known: {known}")
    return [SelectiveRow(name, *SELECTIVE_RUNS[name], mfu, hfu) for name, mfu, hfu in cells]


def selective_scenario(row: SelectiveRow, network: str = "analytical") -> Scenario:
    """The scenario of one selective-recompute row under the module's stated assumptions,
    run by :data:`MEGATRON_LM_2022`."""
    parallel: dict[str, object] = {
        "tp": row.tp, "pp": row.pp, "dp": 1, "sp": row.tp > 1, "micro_batch": row.micro_batch,
        "schedule": "1f1b", "recompute": "selective", "overlap_tp": False,
    }  # fmt: skip
    if row.virtual_stages > 1:
        parallel.update(schedule="interleaved", virtual_stages=row.virtual_stages)
    raw = _megatron_lm_run(row.layers, row.hidden, row.heads, row.gpus, row.batch, parallel,
                           network, MEGATRON_LM_2022)  # fmt: skip
    return scenario_from_dict(raw, f"megatron-selective-{row.name}")


def full_recompute(sc: Scenario) -> Scenario:
    """The paper's baseline of a selective-recompute run: full recompute, no sequence
    parallelism (TP all-reduces), everything else the same."""
    return replace(sc, parallel=replace(sc.parallel, recompute="full", sp=False))
