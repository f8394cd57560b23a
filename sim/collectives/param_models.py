"""The complete collective-parameter tree as pydantic models, derived from the profile's.

:class:`sim.profile_models.CollectivesSection` types a profile's ``collectives`` section,
where every key is optional because a profile may override any subset of
``defaults.yaml``. :data:`CompleteCollectives` is the same models (same field types,
bounds, unknown-key refusal and the ``min_chunks <= max_chunks`` rule) with every key the
simulator needs made required: the merged tree (defaults plus a profile) must validate
against it. Only the keys in :data:`OPTIONAL` stay optional; two rules no field type can
say are added: an algorithm has latencies for each protocol it runs, and a transport with
a socket rate says how many sockets a NIC opens.

>>> from sim.validation import validate_model
>>> validate_model(CompleteCollectives, {"pipeline": {"chunk_bytes": 1}}, "c")
Traceback (most recent call last):
...
sim.errors.ConfigError: c: missing key 'link_efficiency'
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Union, cast

from pydantic import BaseModel, create_model, model_validator

from sim.collectives.selection import PROTOCOLS
from sim.profile_models import Algorithm, CollectivesSection, Transport
from sim.topology.links import SCOPES

__all__ = ["OPTIONAL", "PROTOCOLS", "SCOPES", "CompleteCollectives", "required_model"]

#: Per model of :mod:`sim.profile_models`, the keys a complete tree may leave out (with
#: the default the builder uses); a model not listed needs all of its keys.
OPTIONAL: Mapping[str, frozenset[str]] = {
    "CollectivesSection": frozenset({"source", "transports", "backend", "gloo"}),
    "Algorithm": frozenset({"source", "protocols"}),  # protocols: all three
    "PerProtocolUs": frozenset(PROTOCOLS),  # needed per the algorithm's protocols
    "Pipeline": frozenset({"source", "min_chunks"}),  # min_chunks: 1
    "Channels": frozenset({"source", "slice_bytes"}),  # slice_bytes: 512 KiB
    "Transport": frozenset({"source", "socket_GBps", "threads", "sockets_per_thread"}),
    "Efficiency": frozenset({"source"}),
    "ProtocolEntry": frozenset({"source"}),
    "Gloo": frozenset({"source"}),
}


def _every_protocol_timed(self: Any) -> Any:
    protos = tuple(self.protocols) if self.protocols is not None else PROTOCOLS
    steps = self.step_latency_us
    tables = [("base_latency_us", self.base_latency_us)]
    tables += [(f"step_latency_us.{s}", getattr(steps, s)) for s in SCOPES]
    for key, table in tables:
        for p in protos:
            if getattr(table, p) is None:
                raise ValueError(
                    f"{key}: missing key {p!r} (the algorithm runs {', '.join(protos)})"
                )
    return self


def _sockets_counted(self: Any) -> Any:
    if self.socket_GBps is not None:
        for key in ("threads", "sockets_per_thread"):
            if getattr(self, key) is None:
                raise ValueError(f"missing key {key!r} (socket_GBps is set)")
    return self


#: Checks across fields of one model, added to its complete version.
RULES: Mapping[type[BaseModel], Callable[[Any], Any]] = {
    Algorithm: _every_protocol_timed,
    Transport: _sockets_counted,
}


def required_model(
    model: type[BaseModel],
    optional: Mapping[str, frozenset[str]],
    rules: Mapping[type[BaseModel], Callable[[Any], Any]] | None = None,
) -> type[BaseModel]:
    """A subclass of ``model`` whose optional fields are required, recursively.

    Field types, bounds, the model config and validators are inherited; a field of type
    ``X | None`` becomes ``X`` (no default) unless its name is in
    ``optional[model.__name__]``, and every nested model (also inside ``dict``, ``list``
    and unions) is replaced by its own required version.

    Parameters
    ----------
    model : type[pydantic.BaseModel]
        A model whose fields are all optional (e.g. a profile's override section).
    optional : Mapping[str, frozenset[str]]
        Per model class name, the fields that stay optional.
    rules : Mapping[type, Callable], optional
        Per model, an ``after`` model validator to add to its required version.

    Returns
    -------
    type[pydantic.BaseModel]
        The derived model, named ``Complete<Model>``.
    """
    rules = rules or {}
    done: dict[type[BaseModel], type[BaseModel]] = {}

    def derive(m: type[BaseModel]) -> type[BaseModel]:
        if m not in done:
            keep = optional.get(m.__name__, frozenset())
            fields: dict[str, Any] = {}
            for name, info in m.model_fields.items():
                hint = _swap(info.annotation, derive)
                if name in keep:
                    if hint is not info.annotation:
                        fields[name] = (hint, info.default)
                elif _is_optional(hint):
                    fields[name] = (_not_none(hint), ...)
                elif hint is not info.annotation:
                    fields[name] = (hint, info)
            check = rules.get(m)
            rule = {"_rule": model_validator(mode="after")(check)} if check else None
            extra = cast("dict[str, Callable[..., Any]] | None", rule)
            done[m] = create_model(
                f"Complete{m.__name__}", __base__=m, __module__=__name__,
                __validators__=extra, **fields,
            )  # fmt: skip
        return done[m]

    return derive(model)


def _is_optional(hint: Any) -> bool:
    return typing.get_origin(hint) in (Union, types.UnionType) and type(None) in typing.get_args(
        hint
    )


def _not_none(hint: Any) -> Any:
    args = tuple(a for a in typing.get_args(hint) if a is not type(None))
    return Union[args]  # noqa: UP007 (a tuple of members)


def _swap(hint: Any, derive: Callable[[type[BaseModel]], type[BaseModel]]) -> Any:
    """``hint`` with each model in it replaced by ``derive(model)`` (else ``hint`` itself)."""
    if isinstance(hint, type) and issubclass(hint, BaseModel):
        return derive(hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin not in (Union, types.UnionType, dict, list):
        return hint  # Annotated scalars, Literal, plain types
    new = tuple(_swap(a, derive) for a in args)
    if all(a is b for a, b in zip(new, args, strict=True)):
        return hint
    if origin is dict:
        return dict[new[0], new[1]]  # type: ignore[valid-type]
    if origin is list:
        return list[new[0]]  # type: ignore[valid-type]
    return Union[new]  # noqa: UP007


#: The merged collective-parameter tree: ``CollectivesSection`` with the needed keys required.
CompleteCollectives: type[BaseModel] = required_model(CollectivesSection, OPTIONAL, RULES)
