"""What a plan searches besides the parallel layout: the training *recipe*.

A :class:`Recipe` is one choice of the ``training`` keys that trade memory for time or
for what is trained: fine-tuning (``full``, ``lora``, ``qlora``), optimizer (``adamw``,
``sgd``, ``adafactor``: 12, 8 and about 4 bytes of state per trainable parameter) and
optimizer offload (``none``, ``cpu``: ZeRO-Offload, ``nvme``: ZeRO-Infinity). Recompute is
searched per layout already (the least that fits). The search runs every layout under
every recipe asked for, so ``plan --gpus 1`` can answer "is one GPU enough?" with LoRA,
QLoRA or offload where full fine-tuning does not fit.

LoRA and QLoRA train adapters only (the base model is frozen): they answer a different
question than full training, and the plan's text says so beside them.

>>> [r.label() for r in recipes(["full", "qlora"], ["adamw"], ["none", "cpu"])]
['full adamw', 'full adamw offload=cpu', 'qlora adamw', 'qlora adamw offload=cpu']
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from sim.errors import ConfigError
from sim.scenario.load import Scenario
from sim.workload.trainable import FINETUNES, OFFLOADS, OPTIMIZERS

__all__ = ["ALL", "FULL", "SEARCHED_OPTIMIZERS", "Recipe", "own_recipe", "parse_choices", "recipes"]

SEARCHED_OPTIMIZERS = ("adamw", "sgd", "adafactor")
"""Optimizers ``all`` stands for (``adam`` keeps AdamW's state: not searched twice)."""

ALL = {"finetune": FINETUNES, "optimizer": SEARCHED_OPTIMIZERS, "offload": OFFLOADS}
"""What ``--finetune all`` (``--optimizer all``, ``--offload all``) stands for."""

_ALLOWED = {"finetune": FINETUNES, "optimizer": OPTIMIZERS, "offload": OFFLOADS}


@dataclass(frozen=True, order=True)
class Recipe:
    """One choice of the ``training`` keys a plan searches (see the module docstring)."""

    finetune: str = "full"
    optimizer: str = "adamw"
    offload: str = "none"

    def label(self) -> str:
        """Short text, e.g. ``qlora adamw offload=cpu``."""
        return " ".join(
            [self.finetune, self.optimizer]
            + ([f"offload={self.offload}"] if self.offload != "none" else [])
        )

    def applied(self, scenario: Scenario) -> Scenario:
        """``scenario`` with this recipe's training keys."""
        training = dataclasses.replace(
            scenario.training,
            finetune=self.finetune,
            optimizer=self.optimizer,
            offload=self.offload,
        )
        return dataclasses.replace(scenario, training=training)

    def settings(self) -> dict[str, str]:
        """The ``training`` keys and values, as a scenario takes them."""
        return dataclasses.asdict(self)


FULL = Recipe()
"""Full fine-tuning with AdamW on the GPU: the simulator's defaults."""


def own_recipe(scenario: Scenario) -> Recipe:
    """The recipe ``scenario`` is written with."""
    t = scenario.training
    return Recipe(t.finetune, t.optimizer, t.offload)


def parse_choices(key: str, text: str | None, own: str) -> tuple[str, ...]:
    """``--finetune full,lora`` -> ``("full", "lora")``; ``all``; None: the scenario's own.

    >>> parse_choices("offload", "all", "none")
    ('none', 'cpu', 'nvme')
    """
    if text is None:
        return (own,)
    if text.strip() == "all":
        return ALL[key]
    out = tuple(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
    bad = [v for v in out if v not in _ALLOWED[key]]
    if bad or not out:
        raise ConfigError(
            f"--{key} {text!r}: {bad[0] if bad else 'nothing'} is not one of "
            f"{', '.join(_ALLOWED[key])} (or all)"
        )
    return out


def recipes(
    finetunes: Sequence[str], optimizers: Sequence[str], offloads: Sequence[str]
) -> list[Recipe]:
    """Every combination, in the order given (fine-tuning outermost)."""
    return [Recipe(f, o, d) for f, o, d in itertools.product(finetunes, optimizers, offloads)]
