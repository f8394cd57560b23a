"""Memory/time techniques of a training step: optimizer choice, LoRA/QLoRA fine-tuning and
optimizer offload (ZeRO-Offload / ZeRO-Infinity). Every one is opt-in; the defaults
(:data:`DEFAULT`, full-parameter mixed-precision AdamW on the GPU) change nothing.

Optimizer states per *trainable* parameter, fp32, besides the bf16 weight and the
gradient (``plan.grad_bytes``):

===========  ===========================================  =======================
optimizer    moments                                      + fp32 master weight
===========  ===========================================  =======================
adamw, adam  m and v: 8 B                                 4 B  (12 B: today's)
sgd          momentum: 4 B (``momentum: false``: 0 B)     4 B
adafactor    factored second moment, ``(m + n)`` values   4 B
             per ``m x n`` matrix, no first moment
             (Shazeer & Stern 2018, arXiv:1804.04235)
===========  ===========================================  =======================

LoRA (Hu et al. 2021, arXiv:2106.09685) adds ``r (d_in + d_out)`` trainable parameters
per adapted matrix (``A``: ``d_in x r``, ``B``: ``r x d_out``); the base model is frozen:
bf16 weights, no gradient, no master weight, no optimizer state, and the backward skips
the base weights' gradient GEMMs. QLoRA (Dettmers et al. 2023, arXiv:2305.14314) stores
the transformer blocks' linear weights in 4-bit NF4 with double-quantised constants
(``8/64 + 32/(64 * 256)`` = 0.127 bits per parameter, §3) and dequantises them to bf16
before every GEMM that reads them; the QLoRA recipe trains the adapters in bf16 with a
paged 32-bit AdamW and no fp32 master copy (the paper's Figure 6 counts the optimizer
at 4x the bf16 adapters: 8 B per parameter).

>>> from sim.workload.models import model_preset
>>> lora_trainable_params(model_preset("llama2-7b"), Techniques(finetune="lora"))
16777216
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.errors import ConfigError
from sim.workload.models import ModelSpec, norm_params, param_count

__all__ = [
    "ADAPTER_NAMES",
    "DEFAULT",
    "FINETUNES",
    "NF4_BYTES",
    "OFFLOADS",
    "OPTIMIZERS",
    "Techniques",
    "adapter_shapes",
    "base_linear_params",
    "lora_layer_params",
    "lora_trainable_params",
    "optimizer_state_bytes",
    "optimizer_step_bytes",
    "parse_targets",
]

OPTIMIZERS = ("adamw", "adam", "sgd", "adafactor")
FINETUNES = ("full", "lora", "qlora")
OFFLOADS = ("none", "cpu", "nvme")
#: LoRA target names: attention projections and (gated) MLP matrices, as PEFT names them.
ADAPTER_NAMES = ("q", "k", "v", "o", "gate", "up", "down")
ATTENTION_TARGETS = ("q", "k", "v", "o")
#: NF4 weight (4 bits) + double-quantised constants (8/64 + 32/(64*256) bits), bytes per
#: parameter (QLoRA, arXiv:2305.14314, §3 "Double Quantization").
NF4_BYTES = (4 + 8 / 64 + 32 / (64 * 256)) / 8
#: DeepSpeed CPU-Adam throughput per GPU process, parameters/s (an estimate): CPU-Adam is
#: memory-bound at ~28 B per parameter (fp32 master, m, v read and written, fp16 gradient
#: in, fp16 parameter out; ZeRO-Offload, arXiv:2101.06840, §5.1). A 2-socket host with
#: 8-channel DDR5-4800 per socket has 2 x 307 GB/s peak (Intel Xeon Platinum 8480+ ARK);
#: at ~55% achievable (STREAM-like) and shared by 8 GPUs: 614e9 * 0.55 / 28 / 8 ~ 1.5e9.
CPU_ADAM_PARAMS_PER_S = 1.5e9
#: NVMe bandwidth per GPU, bytes/s (read and write alike): one PCIe Gen4 enterprise U.2
#: drive per GPU (DGX H100 user guide: 8 x 3.84 TB NVMe data drives), sequential write
#: 3.8 GB/s (Samsung PM1733 datasheet; reads are faster, 7 GB/s: this errs slow).
NVME_BPS = 3.8e9
#: Achievable host<->device copy rate as a fraction of the PCIe link's line rate: pinned
#: cudaMemcpy reaches ~50 GB/s of PCIe Gen5 x16's 63 GB/s per direction (NVIDIA
#: bandwidthTest on H100 SXM, as reported in NVIDIA's H100 tuning guide): 0.8.
PCIE_EFF = 0.8
#: PCIe line rate used when the topology models no GPU PCIe link: Gen5 x16 per direction
#: (PCI Express Base Specification 5.0: 32 GT/s x 16 lanes x 128b/130b).
PCIE_DEFAULT_BPS = 63e9


@dataclass(frozen=True)
class Techniques:
    """The technique settings of ``training`` (see the module docstring).

    Attributes
    ----------
    optimizer : str
        ``adamw`` (default), ``adam``, ``sgd`` or ``adafactor``.
    momentum : bool
        SGD keeps a momentum buffer (default True).
    finetune : str
        ``full`` (default), ``lora`` or ``qlora``.
    lora_rank : int
        LoRA rank ``r`` (default 16).
    lora_targets : tuple of str
        Adapted matrices per layer, from :data:`ADAPTER_NAMES` (default q, k, v, o).
    offload : str
        ``none`` (default), ``cpu`` (ZeRO-Offload) or ``nvme`` (ZeRO-Infinity).
    offload_overlap : bool
        ZeRO-Offload's delayed parameter update: the offloaded step overlaps the next
        step's forward and backward.
    cpu_adam_params_per_s : float
        CPU optimizer throughput per GPU process, parameters/s.
    nvme_Bps : float
        NVMe bandwidth per GPU, bytes/s.
    """

    optimizer: str = "adamw"
    momentum: bool = True
    finetune: str = "full"
    lora_rank: int = 16
    lora_targets: tuple[str, ...] = ATTENTION_TARGETS
    offload: str = "none"
    offload_overlap: bool = False
    cpu_adam_params_per_s: float = CPU_ADAM_PARAMS_PER_S
    nvme_Bps: float = NVME_BPS

    @property
    def lora(self) -> bool:
        """LoRA or QLoRA: a frozen base with trainable adapters."""
        return self.finetune != "full"

    @property
    def is_default(self) -> bool:
        """Whether the step is today's full-parameter AdamW on the GPU."""
        return self.optimizer in ("adamw", "adam") and not self.lora and self.offload == "none"

    def check(self, model: ModelSpec, precision: str) -> None:
        """ConfigError (one line, key named) for combinations the model does not cover."""
        if self.finetune == "qlora" and precision == "fp8":
            raise ConfigError(
                "training.finetune: qlora dequantises NF4 weights to bf16 for every GEMM; "
                "use training.precision bf16 or fp16 (got fp8)"
            )
        mlp = set(self.lora_targets) - set(ATTENTION_TARGETS)
        if self.lora and mlp and model.moe:
            raise ConfigError(
                f"training.lora_targets: MLP adapters ({', '.join(sorted(mlp))}) on a "
                "mixture-of-experts model are not modelled; use attention targets q, k, v, o"
            )
        if self.lora and "gate" in mlp and not model.gated_mlp:
            raise ConfigError(
                "training.lora_targets: 'gate' needs a gated MLP (model.gated_mlp: true)"
            )
        if self.lora:
            full = min(
                min(d_in, d_out) for _, d_in, d_out in adapter_shapes(model, self.lora_targets)
            )
            if self.lora_rank > full:
                raise ConfigError(
                    f"training.lora_rank: {self.lora_rank} exceeds the full rank {full} of the "
                    "smallest adapted matrix; a LoRA rank is at most min(d_in, d_out)"
                )


DEFAULT = Techniques()


def parse_targets(value: object, where: str = "training.lora_targets") -> tuple[str, ...]:
    """Read ``lora_targets``: ``attention``, ``all``, a comma list or a list of names.

    >>> parse_targets("q,v"), parse_targets("all")
    (('q', 'v'), ('q', 'k', 'v', 'o', 'gate', 'up', 'down'))
    """
    if value == "attention":
        return ATTENTION_TARGETS
    if value == "all":
        return ADAPTER_NAMES
    parts = value.split(",") if isinstance(value, str) else value
    if not isinstance(parts, (list, tuple)) or not parts:
        raise ConfigError(f"{where}: expected attention, all or a list of names, got {value!r}")
    names = tuple(str(p).strip() for p in parts)
    bad = [n for n in names if n not in ADAPTER_NAMES]
    if bad or len(set(names)) != len(names):
        raise ConfigError(
            f"{where}: {value!r} must name each matrix at most once from "
            f"{', '.join(ADAPTER_NAMES)} (or attention, all)"
        )
    return tuple(n for n in ADAPTER_NAMES if n in names)


def adapter_shapes(model: ModelSpec, targets: tuple[str, ...]) -> list[tuple[str, int, int]]:
    """``(name, d_in, d_out)`` of each adapted matrix of one layer (whole, before TP).

    Without a gated MLP, ``up`` is the first MLP matrix and ``gate`` does not exist.

    >>> from sim.workload.models import model_preset
    >>> adapter_shapes(model_preset("llama2-70b"), ("k", "down"))
    [('k', 8192, 1024), ('down', 28672, 8192)]
    """
    h, f, kv = model.hidden, model.ffn_hidden, model.kv_dim
    dims = {"q": (h, h), "k": (h, kv), "v": (h, kv), "o": (h, h), "gate": (h, f),
            "up": (h, f), "down": (f, h)}  # fmt: skip
    return [(n, *dims[n]) for n in targets]


def lora_layer_params(model: ModelSpec, tech: Techniques) -> int:
    """Adapter parameters of one layer: ``r (d_in + d_out)`` per adapted matrix."""
    shapes = adapter_shapes(model, tech.lora_targets)
    return sum(tech.lora_rank * (d_in + d_out) for _, d_in, d_out in shapes)


def lora_trainable_params(model: ModelSpec, tech: Techniques) -> int:
    """Trainable parameters of a LoRA model (all layers' adapters)."""
    return model.layers * lora_layer_params(model, tech)


def base_linear_params(model: ModelSpec) -> int:
    """Weights of one layer's linear layers (what QLoRA quantises; no norms, no biases)."""
    mlp = (3 if model.gated_mlp else 2) * model.hidden * model.ffn_hidden
    router = model.hidden * model.experts if model.moe else 0
    attn = 2 * model.hidden * model.hidden + 2 * model.hidden * model.kv_dim
    return attn + model.experts * mlp + router


def _adafactor_ratio(model: ModelSpec) -> float:
    """Factored statistics per parameter: ``sum (m + n) / sum m n`` over the matrices
    (vectors keep a full second moment), the whole model's average."""
    h, f, kv, v = model.hidden, model.ffn_hidden, model.kv_dim, model.vocab
    mats = [(h, h), (h, kv), (h, kv), (h, h)] + [(h, f)] * (3 if model.gated_mlp else 2)
    stats = model.layers * (sum(a + b for a, b in mats) * model.experts + 2 * norm_params(model))
    stats += 2 * (v + h)  # embedding and head (tied or not: an upper bound)
    return stats / param_count(model)


def optimizer_state_bytes(tech: Techniques, model: ModelSpec) -> float:
    """fp32 optimizer state + master weight per trainable parameter, bytes.

    Adafactor's factored statistics are averaged over the model (an approximation: every
    parameter carries the model's mean ``(m + n) / (m n)``).

    >>> from sim.workload.models import model_preset
    >>> m = model_preset("llama2-7b")
    >>> optimizer_state_bytes(DEFAULT, m), optimizer_state_bytes(Techniques(optimizer="sgd"), m)
    (12.0, 8.0)
    >>> optimizer_state_bytes(Techniques(finetune="qlora"), m)  # QLoRA: no fp32 master
    8.0
    """
    moments = {"adamw": 8.0, "adam": 8.0, "sgd": 4.0 if tech.momentum else 0.0}.get(tech.optimizer)
    if moments is None:  # adafactor
        moments = 4.0 * _adafactor_ratio(model)
    master = 0.0 if tech.finetune == "qlora" else 4.0
    return moments + master


def optimizer_step_bytes(tech: Techniques, model: ModelSpec, grad_bytes: int) -> float:
    """HBM bytes one optimizer step moves per trainable parameter: read and write the
    fp32 state and master, write the bf16 weight (2), read the gradient for the step and
    the global norm and zero it (3 x ``grad_bytes``). AdamW: ``26 + 3 grad_bytes``.

    >>> from sim.workload.models import model_preset
    >>> optimizer_step_bytes(DEFAULT, model_preset("llama2-7b"), 4)
    38.0
    """
    return 2 * optimizer_state_bytes(tech, model) + 2 + 3 * grad_bytes
