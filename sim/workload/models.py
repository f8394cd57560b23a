"""Transformer model shapes, the published presets and their parameter counts.

A :class:`ModelSpec` is the shape of a decoder-only transformer: enough to count its
parameters, FLOPs, bytes and activation memory. Presets reproduce the released
checkpoints' shapes (their ``config.json`` or paper tables); :func:`param_count` gives
the number of parameters they imply.

>>> param_count(model_preset("gpt2-124m"))
124439808
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from sim.errors import ConfigError

__all__ = [
    "NORMS",
    "POSITIONS",
    "PRESETS",
    "ModelSpec",
    "active_param_count",
    "megatron_gpt",
    "model_preset",
    "param_count",
    "preset_names",
]

NORMS = ("layernorm", "rmsnorm")
POSITIONS = ("learned", "rope")


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a decoder-only transformer.

    Attributes
    ----------
    name : str
        Label, e.g. ``"llama2-70b"``.
    layers : int
        Number of transformer layers.
    hidden : int
        Model width ``h``.
    ffn_hidden : int
        MLP inner width ``f`` (per expert for MoE).
    heads : int
        Attention (query) heads ``a``; head size is ``hidden // heads``.
    kv_heads : int
        Key/value heads (``heads`` for multi-head attention, fewer for GQA).
    vocab : int
        Vocabulary size ``V``.
    experts : int
        MoE experts per layer (1 = dense MLP).
    top_k : int
        Experts each token is routed to.
    gated_mlp : bool
        SwiGLU MLP (three matmuls: gate, up, down) instead of GeLU (two).
    tied_embeddings : bool
        Output projection shares the input embedding matrix.
    norm : str
        ``"layernorm"`` (weight and bias) or ``"rmsnorm"`` (weight only).
    position : str
        ``"learned"`` (a ``max_seq x hidden`` table) or ``"rope"`` (no parameters).
    max_seq : int
        Rows of the learned position table (ignored for RoPE).
    bias : bool
        Linear layers carry biases (GPT-2/3, Megatron GPT) or not (Llama, Mixtral).
    dropout : float
        Dropout probability of the hidden states and attention probabilities (0 = no
        dropout kernels and masks: Llama, MPT; 0.1 in Megatron's GPT recipes).
    """

    name: str
    layers: int
    hidden: int
    ffn_hidden: int
    heads: int
    kv_heads: int
    vocab: int
    experts: int = 1
    top_k: int = 1
    gated_mlp: bool = False
    tied_embeddings: bool = False
    norm: str = "layernorm"
    position: str = "learned"
    max_seq: int = 2048
    bias: bool = True
    dropout: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "int" and (isinstance(value, bool) or not isinstance(value, int)):
                raise ConfigError(f"model.{f.name}: expected an integer, got {value!r}")
            if f.type == "int" and value < 1:
                raise ConfigError(f"model.{f.name}: must be >= 1, got {value}")
        if self.hidden % self.heads:
            raise ConfigError(
                f"model.hidden: {self.hidden} is not divisible by model.heads={self.heads}"
            )
        if self.heads % self.kv_heads:
            raise ConfigError(
                f"model.kv_heads: {self.kv_heads} must divide model.heads={self.heads}"
            )
        if self.top_k > self.experts:
            raise ConfigError(f"model.top_k: {self.top_k} must be <= model.experts={self.experts}")
        if self.norm not in NORMS:
            raise ConfigError(f"model.norm: {self.norm!r} is not one of {', '.join(NORMS)}")
        if isinstance(self.dropout, bool) or not (
            isinstance(self.dropout, (int, float)) and 0 <= self.dropout < 1
        ):
            raise ConfigError(f"model.dropout: {self.dropout!r} must be a number in [0, 1)")
        if self.position not in POSITIONS:
            raise ConfigError(
                f"model.position: {self.position!r} is not one of {', '.join(POSITIONS)}"
            )

    @property
    def head_dim(self) -> int:
        """Size of one attention head, ``hidden // heads``."""
        return self.hidden // self.heads

    @property
    def kv_dim(self) -> int:
        """Width of the K (or V) projection output, ``kv_heads * head_dim``."""
        return self.kv_heads * self.head_dim

    @property
    def moe(self) -> bool:
        """True for a mixture-of-experts MLP."""
        return self.experts > 1


def attention_params(m: ModelSpec) -> int:
    """Parameters of one attention block: Q, K, V, output projections (+ biases)."""
    weights = 2 * m.hidden * m.hidden + 2 * m.hidden * m.kv_dim
    biases = (2 * m.hidden + 2 * m.kv_dim) if m.bias else 0
    return weights + biases


def expert_params(m: ModelSpec) -> int:
    """Parameters of one MLP (one expert): 2 or 3 matmuls (+ biases)."""
    mats = 3 if m.gated_mlp else 2
    weights = mats * m.hidden * m.ffn_hidden
    biases = ((mats - 1) * m.ffn_hidden + m.hidden) if m.bias else 0
    return weights + biases


def norm_params(m: ModelSpec) -> int:
    """Parameters of one norm: weight (and bias for LayerNorm)."""
    return (2 if m.norm == "layernorm" else 1) * m.hidden


def layer_params(m: ModelSpec, experts: int | None = None) -> int:
    """Parameters of one transformer layer counting ``experts`` experts (default: all)."""
    n = m.experts if experts is None else experts
    router = m.hidden * m.experts if m.moe else 0
    return attention_params(m) + n * expert_params(m) + router + 2 * norm_params(m)


def embedding_params(m: ModelSpec) -> int:
    """Input embedding (and learned position table) parameters."""
    pos = m.max_seq * m.hidden if m.position == "learned" else 0
    return m.vocab * m.hidden + pos


def head_params(m: ModelSpec) -> int:
    """Final norm and (untied) output projection parameters."""
    return norm_params(m) + (0 if m.tied_embeddings else m.vocab * m.hidden)


def param_count(m: ModelSpec) -> int:
    """Total parameters (all experts), as a checkpoint would hold them.

    >>> param_count(model_preset("llama2-7b"))
    6738415616
    """
    return embedding_params(m) + m.layers * layer_params(m) + head_params(m)


def active_param_count(m: ModelSpec) -> int:
    """Parameters one token touches: only ``top_k`` experts per MoE layer.

    >>> round(active_param_count(model_preset("mixtral-8x7b")) / 1e9, 1)
    12.9
    """
    return embedding_params(m) + m.layers * layer_params(m, m.top_k) + head_params(m)


def _gpt(name: str, layers: int, hidden: int, heads: int, vocab: int, seq: int) -> ModelSpec:
    return ModelSpec(name, layers, hidden, 4 * hidden, heads, heads, vocab, max_seq=seq,
                     dropout=0.1)  # fmt: skip


def _llama(
    name: str, layers: int, hidden: int, ffn: int, heads: int, kv: int, vocab: int, seq: int
) -> ModelSpec:
    return ModelSpec(
        name, layers, hidden, ffn, heads, kv, vocab, gated_mlp=True, norm="rmsnorm",
        position="rope", max_seq=seq, bias=False,
    )  # fmt: skip


# Shapes from each release's config.json (Hugging Face hub) or paper table.
PRESETS: dict[str, ModelSpec] = {
    "gpt2-124m": ModelSpec(
        "gpt2-124m",
        12,
        768,
        3072,
        12,
        12,
        50257,
        tied_embeddings=True,
        max_seq=1024,
        dropout=0.1,
    ),
    "gpt3-175b": _gpt("gpt3-175b", 96, 12288, 96, 50257, 2048),
    "llama2-7b": _llama("llama2-7b", 32, 4096, 11008, 32, 32, 32000, 4096),
    "llama2-13b": _llama("llama2-13b", 40, 5120, 13824, 40, 40, 32000, 4096),
    "llama2-70b": _llama("llama2-70b", 80, 8192, 28672, 64, 8, 32000, 4096),
    "llama3-8b": _llama("llama3-8b", 32, 4096, 14336, 32, 8, 128256, 8192),
    "llama3-70b": _llama("llama3-70b", 80, 8192, 28672, 64, 8, 128256, 8192),
    "llama3-405b": _llama("llama3-405b", 126, 16384, 53248, 128, 8, 128256, 8192),
    "mixtral-8x7b": replace(
        _llama("mixtral-8x7b", 32, 4096, 14336, 32, 8, 32000, 32768), experts=8, top_k=2
    ),
}


def preset_names() -> list[str]:
    """Sorted preset names."""
    return sorted(PRESETS)


def model_preset(name: str) -> ModelSpec:
    """Return the preset called ``name``; unknown names raise ConfigError listing known ones.

    >>> model_preset("llama2-70b").kv_heads
    8
    """
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(
            f"model.preset: unknown model {name!r}; known: {', '.join(preset_names())}"
        ) from None


def megatron_gpt(hidden: int, layers: int, heads: int | None = None, vocab: int = 51200,
                 seq: int = 2048) -> ModelSpec:  # fmt: skip
    """A Megatron-LM GPT of Narayanan et al. (SC21) Table 1: 4h MLP, tied embeddings,
    dropout 0.1 (Megatron-LM's GPT default for hidden states and attention).

    Heads default to ``hidden // 128`` (head size 128); they do not change FLOPs.

    >>> m = megatron_gpt(2304, 24)
    >>> round(param_count(m) / 1e9, 2)
    1.65
    """
    if heads is None:
        heads = hidden // 128 if hidden % 128 == 0 else hidden // 64
    return ModelSpec(
        f"megatron-gpt-h{hidden}-l{layers}", layers, hidden, 4 * hidden, heads, heads, vocab,
        tied_embeddings=True, max_seq=seq, dropout=0.1,
    )  # fmt: skip
