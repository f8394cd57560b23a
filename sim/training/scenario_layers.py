"""The opt-in scenario sections of the layers over a step: reliability, spot, energy, prices.

``reliability:``, ``spot:`` and ``energy:`` are validated by their pydantic models
(:class:`~sim.reliability.ReliabilityConfig`, :class:`~sim.reliability.SpotConfig`,
:class:`~sim.cost.EnergyConfig`); a section that is absent stays None and nothing changes.
``price.preset`` names a dated, sourced price (``sim/cost/prices.yaml``) beside
``price.gpu_hour_usd`` (exactly one of the two); ``training.tokens`` is the token budget.

>>> sections = layer_sections({"reliability": {"restart_s": 60}})
>>> sections["reliability"].restart_s, sections["spot"], sections["energy"]
(60.0, None, None)
>>> check_price(1.0, "lambda-h100")
Traceback (most recent call last):
...
sim.errors.ConfigError: price: give exactly one of price.gpu_hour_usd or price.preset (got both)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from sim.cost.config import EnergyConfig
from sim.cost.prices import price_preset_names
from sim.errors import ConfigError
from sim.packaged import validate_section
from sim.reliability.config import ReliabilityConfig, SpotConfig

__all__ = ["LAYER_MODELS", "check_price", "layer_sections", "read_tokens"]

#: Top-level scenario sections validated by a pydantic model (all optional).
LAYER_MODELS: dict[str, type[BaseModel]] = {
    "reliability": ReliabilityConfig,
    "spot": SpotConfig,
    "energy": EnergyConfig,
}


def layer_sections(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The validated ``reliability``, ``spot`` and ``energy`` sections (None when absent).

    Raises
    ------
    ConfigError
        One line naming the bad key (``reliability.restart_s``) and what is allowed; ``spot``
        without ``reliability`` (the failures of the on-demand baseline).
    """
    out = {
        name: validate_section(model, raw[name], name) if name in raw else None
        for name, model in LAYER_MODELS.items()
    }
    if out["spot"] is not None and out["reliability"] is None:
        raise ConfigError(
            "spot: needs a reliability section (its failures and checkpoints are the "
            "on-demand baseline); add 'reliability: {}' for the defaults"
        )
    return out


def read_tokens(value: object, where: str) -> float:
    """A token budget > 0: a number or a string such as ``15.6e12`` (YAML 1.1 reads that as
    text, since its floats need a signed exponent).

    >>> read_tokens("15.6e12", "training.tokens")
    15600000000000.0
    """
    number: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.replace("_", ""))
        except ValueError:
            number = None
    if number is None or not (math.isfinite(number) and number > 0):
        raise ConfigError(
            f"{where}: expected a number of tokens > 0 such as 15.6e12, got {value!r}"
        )
    return number


def check_price(gpu_hour_usd: float | None, preset: str | None) -> None:
    """Refuse both ``price.gpu_hour_usd`` and ``price.preset``, and unknown presets.

    Raises
    ------
    ConfigError
        Both given, or ``preset`` is not a shipped preset (the message lists them).
    """
    if gpu_hour_usd is not None and preset is not None:
        raise ConfigError(
            "price: give exactly one of price.gpu_hour_usd or price.preset (got both)"
        )
    if preset is not None and preset not in price_preset_names():
        raise ConfigError(
            f"price.preset: unknown preset {preset!r}; allowed: {', '.join(price_preset_names())}"
        )
