"""Does every published run fit in memory? Each shared table's runs under the framework
that ran them.

Runs that were run did fit, so the memory model must say ``fits`` for each of them.
:func:`fit_rows` builds every run of the shared published tables found under ``data``
(``../shared/data/published``), with the framework semantics of the code that ran it:

- Megatron-LM A100 weak scaling (SC21, 2021): ``megatron-core`` as Megatron-LM ran then:
  fp16 parameters and gradients with an fp32 gradient copy in the optimizer
  (``docs/user-guide/features/dist_optimizer.md``: 20 bytes per parameter without the
  distributed optimizer, which did not exist yet), no overlap of TP or parameter
  gathers, sent pipeline outputs kept (Megatron-LM began deallocating them in January
  2022: commit c1e4526b renames 'free' to 'deallocate'). Scenario as
  :func:`calibrate.published.megatron_scenario` builds it.
- Megatron-LM A100 with selective recompute (2022, DP 1): the same fp16 settings, with
  sent pipeline outputs deallocated. Scenario as :func:`calibrate.published.selective_scenario`
  builds it (sequence parallelism, selective recompute of the attention core).
- Megatron-Core H100 weak scaling: ``megatron-core`` (the preset is that benchmark's
  configuration) with sequence parallelism under TP (``--tp-comm-overlap`` needs it),
  micro-batch 1, no recomputation (Megatron's default), flash attention, 1F1B without
  interleaving (the table states neither; assumed).
- llm-foundry MPT (A100 40/80 GB, H100): ``fsdp`` with the row's mixed-precision mode
  (``PURE`` reduces in bf16) and without expandable segments (the tables were last
  updated in January 2024, when ``scripts/train/train.py`` set only
  ``max_split_size_mb``; the option arrived in April 2024). Scenario as
  :func:`calibrate.llm_foundry.foundry_scenario`.
- DeepSpeed statements that give a configuration: the 530B MT-NLG run on Selene
  (Smith et al. 2022, arXiv:2201.11990: TP 8, PP 35, DP 8, micro-batch 1, global batch
  1920, seq 2048, bf16; ZeRO-1 and full recomputation assumed), and the Azure ZeRO-3
  runs with no TP/PP of 530B, 1T and 2T parameters on 1024 A100 80 GB at micro-batch 8,
  seq 1024, optimizer states and activation checkpoints in host memory
  (``docs/_posts/2022-07-26-deepspeed-azure.md``; layer, hidden and head counts from its
  Table 2; vocabulary 51200 and attention without flash kernels assumed, 2022 GPT).

Each row is checked against the NVML capacity of its GPU
(:func:`sim.training.memory.allocator.device_memory_bytes`).
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from calibrate.llm_foundry import TABLES, foundry_scenario, read_foundry_table
from calibrate.published import (
    MEGATRON_LM_FP16,
    megatron_scenario,
    read_megatron_table,
    read_selective_table,
    selective_scenario,
)
from sim.scenario.load import Scenario, resolve_plan
from sim.topology.presets import load_topology
from sim.training.memory.allocator import device_memory_bytes
from sim.training.memory.report import MemoryReport, memory_per_gpu
from sim.workload.framework_section import framework_semantics
from sim.workload.frameworks import Semantics
from sim.workload.models import ModelSpec, megatron_gpt
from sim.workload.plan import ParallelPlan
from sim.workload.trainable import DEFAULT, Techniques

__all__ = ["FitRow", "fit_rows"]

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "published"
A100_80 = device_memory_bytes("A100-SXM-80GB", 80e9)


@dataclass(frozen=True)
class FitRow:
    """One published run: what it trained, how, on what capacity, under which framework."""

    table: str
    label: str
    model: ModelSpec
    plan: ParallelPlan
    seq: int
    semantics: Semantics
    capacity_bytes: float
    datasheet_bytes: float
    flash_attention: bool = True
    cross_entropy: str = "fp32"
    tech: Techniques = DEFAULT

    def framework_report(self) -> MemoryReport:
        """Memory as the row's framework holds it, against the NVML capacity."""
        return memory_per_gpu(
            self.model, self.plan, self.seq, self.capacity_bytes, None, self.flash_attention,
            self.cross_entropy, self.tech, self.semantics,
        )  # fmt: skip

    def neutral_report(self) -> MemoryReport:
        """Memory under the framework-neutral model, against the datasheet capacity (what
        the simulator reported before framework semantics)."""
        return memory_per_gpu(
            self.model, self.plan, self.seq, self.datasheet_bytes, None, self.flash_attention,
            self.cross_entropy, self.tech,
        )  # fmt: skip


def _from_scenario(table: str, label: str, sc: Scenario, sem: Semantics) -> FitRow:
    topo = load_topology(sc.cluster.topology, nodes=sc.cluster.nodes)
    plan = resolve_plan(sc, topo.num_gpus, topo.gpus_per_node)
    gpu = topo.gpu
    return FitRow(
        table, label, sc.model, plan, sc.training.seq_len, sem,
        device_memory_bytes(gpu.name, gpu.hbm_bytes), gpu.hbm_bytes,
        sc.training.flash_attention, sc.training.cross_entropy, sc.training.techniques,
    )  # fmt: skip


def _megatron_a100(data: Path) -> list[FitRow]:
    """The SC21 runs: Megatron-LM's 2021 fp16 settings (:data:`MEGATRON_LM_FP16`), sent
    pipeline outputs kept and no asynchronous TP backward (the 2021 code has neither)."""
    path = data / "megatron-lm-a100-weak-scaling.csv"
    sem = framework_semantics("megatron-core", {
        **MEGATRON_LM_FP16, "deallocate_pipeline_outputs": False, "tp_async_backward": False,
    })  # fmt: skip
    return [
        _from_scenario(path.name, row.name, megatron_scenario(row), sem)
        for row in read_megatron_table(path)
    ]


def _megatron_selective_a100(data: Path) -> list[FitRow]:
    """The Megatron-LM 2022 runs with selective recompute, under the framework their
    scenarios name (:data:`MEGATRON_LM_2022`: the 2021 rows' fp16 settings, with pipeline
    outputs deallocated once sent)."""
    path = data / "megatron-mfu-hfu-a100.csv"
    if not path.exists():
        return []
    rows = []
    for row in read_selective_table(path):
        sc = selective_scenario(row)
        assert sc.framework is not None  # the scenario names megatron-core
        rows.append(_from_scenario(path.name, f"{row.name} selective", sc, sc.framework))
    return rows


def _megatron_core_h100(data: Path) -> list[FitRow]:
    path = data / "megatron-core-h100-weak-scaling.csv"
    sem = framework_semantics("megatron-core")
    rows = []
    for r in csv.DictReader(path.read_text().splitlines()[1:]):
        h, tp = int(r["hidden_size"]), int(r["tensor_mp_size"])
        model = megatron_gpt(h, int(r["num_layers"]), int(r["attention_heads"]), 131072, 4096)
        plan = ParallelPlan(
            tp=tp, pp=int(r["pipeline_mp_size"]), dp=int(r["data_parallel_size"]),
            sp=tp > 1, zero=sem.default_zero, micro_batch=1,
            global_batch=int(r["batch_size"]),
        )  # fmt: skip
        hbm = device_memory_bytes("H100-SXM", 80e9)
        rows.append(
            FitRow(path.name, r["model_size"], model, plan, 4096, sem, hbm, 80e9, True, "fp32")
        )
    return rows


def _foundry(data: Path) -> list[FitRow]:
    rows = []
    for name in TABLES:
        path = data / name
        if not path.exists():
            continue
        for row in read_foundry_table(path):
            sem = framework_semantics(
                "fsdp", {"grad_reduce_dtype": row.grad_dtype, "expandable_segments": False}
            )
            rows.append(_from_scenario(name, row.label, foundry_scenario(row), sem))
    return rows


#: DeepSpeed Azure post, Table 2: name -> (layers, hidden, heads).
_AZURE = {"530B": (105, 20480, 128), "1T": (128, 25600, 160), "2T": (160, 32768, 128)}


def _deepspeed(data: Path) -> list[FitRow]:
    table = "deepspeed-published-throughput.csv"
    if not (data / table).exists():
        return []
    sem = framework_semantics("deepspeed", {"cpu_checkpointing": True})
    rows = []
    for name, (layers, hidden, heads) in _AZURE.items():
        model = megatron_gpt(hidden, layers, heads, 51200, 1024)
        plan = ParallelPlan(dp=1024, zero=3, micro_batch=8, global_batch=8 * 1024,
                            recompute="full")  # fmt: skip
        rows.append(FitRow(table, f"Azure {name} ZeRO-3", model, plan, 1024, sem, A100_80,
                           80e9, False, "fp32", Techniques(offload="cpu")))  # fmt: skip
    mtnlg = megatron_gpt(20480, 105, 128, 51200, 2048)
    plan = ParallelPlan(tp=8, pp=35, dp=8, sp=False, zero=1, micro_batch=1,
                        global_batch=1920, recompute="full")  # fmt: skip
    ds = framework_semantics("deepspeed")
    rows.append(FitRow(table, "Selene MT-NLG 530B", mtnlg, plan, 2048, ds, A100_80, 80e9,
                       False, "fp32"))  # fmt: skip
    return rows


#: table builders, in report order
BUILDERS: tuple[Callable[[Path], list[FitRow]], ...] = (
    _megatron_a100,
    _megatron_selective_a100,
    _megatron_core_h100,
    _foundry,
    _deepspeed,
)


def fit_rows(data: Path = DATA) -> list[FitRow]:
    """Every shared published run found under ``data`` (empty when there is none)."""
    if not data.is_dir():
        return []
    return [row for build in BUILDERS for row in build(data)]
