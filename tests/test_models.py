"""Model presets: parameter counts against published figures, and shape validation."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from sim.errors import ConfigError
from sim.workload.models import (
    PRESETS,
    ModelSpec,
    active_param_count,
    megatron_gpt,
    model_preset,
    param_count,
)

PUBLISHED = Path(__file__).resolve().parents[2] / "shared" / "data" / "published"

# Published total parameter counts. The nominal names ("7B", "70B") are rounded, so for
# Llama we use the count of the released checkpoint as shown on its Hugging Face model
# page (safetensors metadata, rounded to the digits given there).
PUBLISHED_PARAMS = {
    # GPT-2 release (Radford et al. 2019) as re-counted by HF openai-community/gpt2: 124M
    "gpt2-124m": 124e6,
    # Brown et al. 2020, "Language Models are Few-Shot Learners", Table 2.1: 175.0B
    "gpt3-175b": 175.0e9,
    # HF meta-llama/Llama-2-7b-hf: 6.74B params (Llama 2 paper, Touvron et al. 2023: "7B")
    "llama2-7b": 6.74e9,
    # HF meta-llama/Llama-2-13b-hf: 13.0B params
    "llama2-13b": 13.0e9,
    # HF meta-llama/Llama-2-70b-hf: 69.0B params (paper: "70B", which is 1.5% high)
    "llama2-70b": 69.0e9,
    # HF meta-llama/Meta-Llama-3-8B: 8.03B params
    "llama3-8b": 8.03e9,
    # HF meta-llama/Meta-Llama-3-70B: 70.6B params
    "llama3-70b": 70.6e9,
    # Llama 3 herd paper (Dubey et al. 2024), Table 3: 405B
    "llama3-405b": 405e9,
    # Mistral AI, "Mixtral of experts" (2023-12-11): 46.7B total, 12.9B active per token
    "mixtral-8x7b": 46.7e9,
}


def test_every_preset_has_a_published_count() -> None:
    """The table above covers exactly the shipped presets."""
    assert set(PUBLISHED_PARAMS) == set(PRESETS)


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_param_count_within_one_percent_of_published(name: str) -> None:
    """Each preset's shape implies its published parameter count within 1%."""
    count = param_count(model_preset(name))
    assert count == pytest.approx(PUBLISHED_PARAMS[name], rel=0.01)


def test_mixtral_active_params_match_mistral_announcement() -> None:
    """Mixtral routes each token to 2 of 8 experts: 12.9B of 46.7B parameters active."""
    assert active_param_count(model_preset("mixtral-8x7b")) == pytest.approx(12.9e9, rel=0.01)


def test_dense_models_are_fully_active() -> None:
    """A dense model's active count is its total."""
    m = model_preset("llama3-8b")
    assert active_param_count(m) == param_count(m)


def test_exact_checkpoint_counts() -> None:
    """Exact counts of two well-known checkpoints (HF safetensors totals)."""
    assert param_count(model_preset("gpt2-124m")) == 124_439_808
    assert param_count(model_preset("llama2-7b")) == 6_738_415_616


def _megatron_rows() -> list[dict[str, str]]:
    path = PUBLISHED / "megatron-lm-a100-weak-scaling.csv"
    if not path.exists():
        pytest.skip(f"published data not found at {path}")
    with path.open() as f:
        next(f)  # source line
        return list(csv.DictReader(f))


def test_megatron_gpt_configs_match_the_published_table() -> None:
    """Megatron GPTs (vocab 51200, seq 2048) give the table's sizes (rounded to 0.1B).

    Source: Megatron-LM README / Narayanan et al. SC21 Table 1, via
    ../shared/data/published/megatron-lm-a100-weak-scaling.csv.
    """
    for row in _megatron_rows():
        m = megatron_gpt(int(row["hidden_size"]), int(row["num_layers"]))
        published = float(row["num_params_billion"]) * 1e9
        assert abs(param_count(m) - published) <= 0.05e9 + 0.01 * published, row


def test_unknown_preset_names_the_key_and_known_presets() -> None:
    """An unknown preset is a ConfigError naming model.preset and listing known ones."""
    with pytest.raises(ConfigError, match=r"model\.preset.*llama2-70b"):
        model_preset("llama-9000")


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"hidden": 1000}, "model.hidden"),
        ({"kv_heads": 5}, "model.kv_heads"),
        ({"top_k": 2}, "model.top_k"),
        ({"norm": "batchnorm"}, "model.norm"),
        ({"layers": 0}, "model.layers"),
    ],
)
def test_bad_shapes_name_the_key(kwargs: dict[str, object], key: str) -> None:
    """Impossible shapes raise ConfigError naming the key."""
    base: dict[str, object] = dict(
        name="x", layers=2, hidden=1024, ffn_hidden=4096, heads=16, kv_heads=16, vocab=1000
    )
    base.update(kwargs)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        ModelSpec(**base)  # type: ignore[arg-type]
