"""The layouts a plan search considers, and why the others are left out.

A :class:`Layout` is one setting of the ``parallel`` section. :func:`layouts` lists
every layout of a model on ``gpus`` GPUs that divides evenly: TP a power of two inside
one server that divides the heads and the MLP width, PP a divisor of the layers, EP a
divisor of the experts and of DP (MoE only), micro-batches that divide the global batch,
interleaving (2, 4 or 8 virtual stages) where the layers and micro-batches allow it, ZeRO 0-3
(only 0 without data parallelism) and sequence parallelism with TP; context parallelism
(CP) only for the sizes asked for (``clustersim plan --cp 1,2,4``; default CP 1). Recompute is not
enumerated: the search takes the least recompute that fits (none, selective, full: each
is slower and smaller than the one before), and the overlap switches are tried on the
finalists only. GPipe is left out: it has 1F1B's bubble and holds more activations.
Layouts that do not divide are counted by reason (:class:`Skipped`) so the report can say
why they were left out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any

from sim.workload.models import ModelSpec

__all__ = ["MICRO_BATCHES", "RECOMPUTE_ORDER", "Layout", "Skipped", "layouts"]

RECOMPUTE_ORDER = ("none", "selective", "full")
"""Fastest first; each stores fewer activations than the one before."""

MICRO_BATCHES = (1, 2, 4, 8, 16)
"""Micro-batch sizes tried (where they divide the batch)."""

VIRTUAL_STAGES = (2, 4, 8)
"""Model chunks per stage tried with the interleaved schedule (where they divide)."""


@dataclass(frozen=True, order=True)
class Layout:
    """One setting of the ``parallel`` section (the keys a scenario's plan has)."""

    tp: int
    pp: int
    dp: int
    ep: int = 1
    sp: bool = False
    zero: int = 0
    micro_batch: int = 1
    schedule: str = "1f1b"
    virtual_stages: int = 1
    recompute: str = "none"
    overlap_tp: bool = True
    overlap_dp: bool = True
    cp: int = 1

    def settings(self) -> dict[str, Any]:
        """The ``parallel`` keys and values, as a scenario takes them (every field is a
        number, bool or string: a shallow copy, ``asdict``'s deep copies cost ~0.3 ms)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def label(self) -> str:
        """Short text, e.g. ``tp8 pp4 dp8 zero1 mb1 sp vs2 rc=selective``."""
        parts = [f"tp{self.tp}"] + ([f"cp{self.cp}"] if self.cp > 1 else [])
        parts += [f"pp{self.pp}", f"dp{self.dp}"]
        parts += [f"ep{self.ep}"] if self.ep > 1 else []
        parts += [f"zero{self.zero}", f"mb{self.micro_batch}"]
        parts += ["sp"] if self.sp else []
        parts += [f"vs{self.virtual_stages}"] if self.virtual_stages > 1 else []
        parts += [f"rc={self.recompute}"]
        parts += [] if self.overlap_tp or self.tp == 1 else ["no-tp-overlap"]
        parts += [] if self.overlap_dp or self.dp == 1 else ["no-dp-overlap"]
        return " ".join(parts)


@dataclass
class Skipped:
    """Layouts left out for not dividing evenly: reason -> count (an example in each)."""

    counts: Counter[str]

    def add(self, reason: str) -> None:
        self.counts[reason] += 1


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _tp_values(model: ModelSpec, gpus: int, per_node: int, skipped: Skipped) -> list[int]:
    out = []
    t = 1
    while t <= min(gpus, max(per_node, 1)):
        if model.heads % t or model.ffn_hidden % t:
            skipped.add(f"tp={t} does not divide heads={model.heads} and ffn={model.ffn_hidden}")
        elif model.kv_heads % t and t % model.kv_heads:
            skipped.add(f"tp={t} and kv_heads={model.kv_heads}: neither divides the other")
        else:
            out.append(t)
        t *= 2
    if t <= gpus:
        skipped.add(f"tp > {per_node}: TP kept inside one server ({per_node} GPUs)")
    return out


def _schedules(pp: int, m: int, layers: int) -> Iterator[tuple[str, int]]:
    yield "1f1b", 1
    if pp == 1 or m % pp:
        return
    for v in VIRTUAL_STAGES:
        if layers % (pp * v) == 0:
            yield "interleaved", v


def layouts(
    model: ModelSpec,
    gpus: int,
    per_node: int,
    global_batch: int,
    cps: Sequence[int] = (1,),
    seq_len: int = 0,
) -> tuple[list[Layout], Skipped]:
    """Every evenly dividing layout (recompute ``none``, overlap on), and the skipped counts.

    ``cps``: context-parallel sizes to try (default only 1, today's search); a CP size
    must divide ``seq_len / 2`` and leaves MoE expert parallelism out.

    >>> from sim.workload.models import model_preset
    >>> found, skipped = layouts(model_preset("gpt2-124m"), 8, 8, 8)
    >>> len(found) > 0 and all(l.tp * l.pp * l.dp == 8 for l in found)
    True
    """
    skipped = Skipped(Counter())
    out: list[Layout] = []
    for tp in _tp_values(model, gpus, per_node, skipped):
        for cp in cps:
            if cp > 1 and (seq_len % (2 * cp) or (gpus // tp) % cp):
                skipped.add(f"cp={cp} does not divide seq_len/2={seq_len // 2} or gpus/tp")
                continue
            rest = gpus // (tp * cp)
            for pp in _divisors(model.layers):
                if rest % pp or pp > rest:
                    continue
                dp = rest // pp
                for ep in _divisors(model.experts) if model.moe and cp == 1 else [1]:
                    if dp % ep:
                        skipped.add(f"ep={ep} does not divide dp={dp}")
                        continue
                    out += _inner(model, tp, pp, dp, ep, global_batch, skipped, cp)
    return out, skipped


def _inner(
    model: ModelSpec, tp: int, pp: int, dp: int, ep: int, batch: int, skipped: Skipped,
    cp: int = 1,
) -> list[Layout]:  # fmt: skip
    out = []
    for mb in MICRO_BATCHES:
        if batch % (mb * dp):
            skipped.add(f"micro_batch x dp = {mb} x {dp} does not divide global_batch={batch}")
            continue
        m = batch // (mb * dp)
        for schedule, v in _schedules(pp, m, model.layers):
            for zero in (0, 1, 2, 3) if dp * cp > 1 else (0,):
                for sp in (False, True) if tp > 1 else (False,):
                    out.append(Layout(tp, pp, dp, ep, sp, zero, mb, schedule, v, cp=cp))
    return out
