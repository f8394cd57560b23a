"""The share of a MoE model's compute that its experts do (what ``moe_skew`` scales)."""

from __future__ import annotations

from sim.workload.models import ModelSpec, expert_params, layer_params

__all__ = ["expert_compute_share"]


def expert_compute_share(model: ModelSpec) -> float:
    """Share of a transformer layer's matmul FLOPs spent in its ``top_k`` active experts.

    An approximation by parameters touched per token (FLOPs are 2 per parameter per token
    for every matmul): attention's sequence-length terms, norms' elementwise work, the
    embedding and the output head are left out, so it slightly overstates the share.
    Dense models give 0.

    >>> from sim.workload.models import model_preset
    >>> round(expert_compute_share(model_preset("mixtral-8x7b")), 3)
    0.894
    >>> expert_compute_share(model_preset("llama2-70b"))
    0.0
    """
    if not model.moe:
        return 0.0
    return model.top_k * expert_params(model) / layer_params(model, model.top_k)
