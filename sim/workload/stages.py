"""Which layers each pipeline chunk holds, placed as Megatron-Core places them.

A plan with ``pp`` stages and ``v`` virtual stages (model chunks) per stage has ``pp * v``
chunks; chunk ``c`` of stage ``s`` is virtual stage ``vs = c * pp + s`` and holds the next
layers in model order. Megatron-Core (``get_num_layers_to_build``) splits them so:

- **even**: ``layers / (pp v)`` per chunk;
- **first/last stage sizes given** (``--decoder-first/last-pipeline-num-layers``): those
  stages get that many layers, the other stages share the rest evenly;
- **embedding and loss counted as layers** (``account_for_embedding_in_pipeline_split``,
  ``account_for_loss_in_pipeline_split``): the split is computed for ``layers + 2`` (or
  ``+ 1``) and the first chunk of the first stage (the last chunk of the last stage)
  builds one layer fewer. Llama 3 405B's 126 layers on 16 stages are placed this way:
  8 slots per stage, 7 layers on the first and last stage (Dubey et al. 2024, 3.3.2).

Every stage's count must divide by ``v``. When neither option is given and the layers do
not divide, the embedding and loss are counted as layers if that makes them divide;
otherwise the plan is refused with the keys that would fix it.

>>> from sim.workload.plan import ParallelPlan
>>> from sim.workload.models import model_preset
>>> plan = ParallelPlan(pp=16, dp=1, global_batch=16)
>>> layers = chunk_layers(plan, model_preset("llama3-405b"))
>>> layers[0], layers[1], layers[-1], sum(layers)
(7, 8, 7, 126)
"""

from __future__ import annotations

from sim.errors import ConfigError
from sim.workload.models import ModelSpec
from sim.workload.plan import ParallelPlan

__all__ = ["chunk_layers", "stage_layers"]


def _per_stage(plan: ParallelPlan, layers: int) -> tuple[list[int], bool, bool]:
    """Layer slots per stage and whether embedding / loss take a slot."""
    p, v = plan.pp, plan.virtual_stages
    if plan.layer_split is not None:  # given per stage (stage_split: speed)
        if len(plan.layer_split) != p or sum(plan.layer_split) != layers:
            raise ConfigError(
                f"layers per stage {list(plan.layer_split)}: need {p} stages summing to "
                f"model.layers={layers}"
            )
        return list(plan.layer_split), False, False
    first, last = plan.first_stage_layers, plan.last_stage_layers
    emb, loss = plan.embedding_as_layer, plan.loss_as_layer
    if first is not None or last is not None:
        if emb or loss:
            raise ConfigError(
                "parallel.first_stage_layers/last_stage_layers cannot be combined with "
                "parallel.embedding_as_layer/loss_as_layer; give one way of splitting"
            )
        return _given_ends(plan, layers, first, last), False, False
    if emb is None and loss is None:
        auto = layers % (p * v) != 0 and p > 1 and (layers + 2) % (p * v) == 0
        emb = loss = auto
    emb, loss = bool(emb), bool(loss)
    slots = layers + emb + loss
    if slots % p:
        raise ConfigError(_cannot_place(plan, layers))
    return [slots // p] * p, emb, loss


def _given_ends(plan: ParallelPlan, layers: int, first: int | None, last: int | None) -> list[int]:
    p = plan.pp
    if p == 1:
        raise ConfigError("parallel.first_stage_layers/last_stage_layers need parallel.pp > 1")
    if p == 2 and first is not None and last is not None and first + last != layers:
        raise ConfigError(
            f"parallel.first_stage_layers + last_stage_layers = {first} + {last} must equal "
            f"model.layers={layers} with 2 stages"
        )
    for key, value in (("first_stage_layers", first), ("last_stage_layers", last)):
        if value is not None and not 0 <= value <= layers:
            raise ConfigError(f"parallel.{key}: {value} must be in 0..{layers}")
    rest = layers - (first or 0) - (last or 0)
    middle = p - (first is not None) - (last is not None)
    if rest < 0 or (middle == 0 and rest) or (middle and rest % middle):
        raise ConfigError(
            f"parallel.first_stage_layers/last_stage_layers: the other {middle} stages "
            f"cannot share the remaining {rest} of model.layers={layers} evenly"
        )
    per = [rest // middle if middle else 0] * p
    if first is not None:
        per[0] = first
    if last is not None:
        per[-1] = last
    return per


def _cannot_place(plan: ParallelPlan, layers: int) -> str:
    chunks = plan.pp * plan.virtual_stages
    return (
        f"model.layers={layers} cannot be placed on parallel.pp x parallel.virtual_stages = "
        f"{plan.pp} x {plan.virtual_stages} = {chunks} chunks: set parallel.first_stage_layers"
        " and/or parallel.last_stage_layers (Megatron's uneven first/last stages), or "
        "parallel.embedding_as_layer/loss_as_layer"
    )


def chunk_layers(plan: ParallelPlan, model: ModelSpec) -> tuple[int, ...]:
    """Layers of each virtual stage ``vs = chunk * pp + stage``, in model order.

    Raises ConfigError naming the keys to set when the layers cannot be placed.

    >>> from sim.workload.models import megatron_gpt
    >>> plan = ParallelPlan(pp=4, first_stage_layers=4, last_stage_layers=2, global_batch=4)
    >>> chunk_layers(plan, megatron_gpt(1024, 12))
    (4, 3, 3, 2)
    """
    p, v = plan.pp, plan.virtual_stages
    per_stage, emb, loss = _per_stage(plan, model.layers)
    out = [0] * (p * v)
    for s, count in enumerate(per_stage):
        if count % v:
            raise ConfigError(
                f"stage {s} holds {count} layer slots, which parallel.virtual_stages={v} "
                f"does not divide; {_cannot_place(plan, model.layers)}"
            )
        for c in range(v):
            out[c * p + s] = count // v
    if emb:
        out[0] -= 1
    if loss:
        out[-1] -= 1
    if min(out) < 0 or sum(out) != model.layers:
        raise ConfigError(_cannot_place(plan, model.layers))
    return tuple(out)


def stage_layers(plan: ParallelPlan, model: ModelSpec) -> tuple[int, ...]:
    """Layers held by each pipeline stage (all its chunks).

    >>> from sim.workload.models import model_preset
    >>> plan = ParallelPlan(pp=16, virtual_stages=2, schedule="interleaved", global_batch=16)
    >>> stage_layers(plan, model_preset("llama3-405b"))[:2]
    (7, 8)
    """
    p = plan.pp
    per = chunk_layers(plan, model)
    return tuple(sum(per[c * p + s] for c in range(plan.virtual_stages)) for s in range(p))
