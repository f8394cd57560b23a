"""GPU-hour prices: dated, sourced presets (``prices.yaml``), user entries, or a flat number.

>>> quote = resolve_price(PriceConfig(preset="lambda-h100"), gpu="H100-SXM")
>>> quote.usd_per_gpu_hour, quote.as_of
(2.49, '2026-11')
>>> resolve_price(PriceConfig(), gpu="H100-SXM") is None
True
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from sim.cost.config import PriceConfig, PriceEntry
from sim.errors import ConfigError
from sim.packaged import lookup, read_table

__all__ = ["PriceQuote", "check_price", "price_preset", "price_preset_names", "resolve_price"]


@dataclass(frozen=True)
class PriceQuote:
    """The price a cost is computed with.

    Attributes
    ----------
    usd_per_gpu_hour : float
        USD per GPU-hour.
    preset : str or None
        The preset or entry it came from (None for a flat ``gpu_hour_usd``).
    gpu : str or None
        The GPU the price is for (None for a flat price).
    kind, as_of, source : str
        Pricing model, date quoted and where it comes from.
    notes : list[str]
        E.g. a preset for another GPU than the simulated one.
    """

    usd_per_gpu_hour: float
    preset: str | None = None
    gpu: str | None = None
    kind: str = "user"
    as_of: str = ""
    source: str = "price.gpu_hour_usd"
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


def price_preset_names() -> list[str]:
    """Names of the shipped price presets.

    >>> "aws-p5" in price_preset_names()
    True
    """
    return sorted(read_table("sim.cost", "prices.yaml"))


def price_preset(name: str) -> PriceEntry:
    """A shipped preset, validated like a user entry (unknown name: ConfigError listing them)."""
    raw = lookup(read_table("sim.cost", "prices.yaml"), name, "price.preset")
    entry = PriceEntry.model_validate(raw)
    return entry.model_copy(update={"source": " ".join(entry.source.split())})


def _quote(name: str, entry: PriceEntry, gpu: str) -> PriceQuote:
    notes = []
    if entry.gpu != gpu:
        notes.append(f"price preset {name!r} is for {entry.gpu}; the simulated GPU is {gpu}")
    return PriceQuote(
        usd_per_gpu_hour=entry.server_hour_usd / entry.gpus_per_server,
        preset=name,
        gpu=entry.gpu,
        kind=entry.kind,
        as_of=entry.as_of,
        source=entry.source,
        notes=notes,
    )


def resolve_price(config: PriceConfig, gpu: str) -> PriceQuote | None:
    """The price of one GPU-hour for ``gpu`` under the ``price`` section, or None if none is set.

    ``gpu_hour_usd`` wins over ``preset`` (so ``--set price.gpu_hour_usd=...`` overrides a
    scenario's preset; the quote notes it). ``preset`` names a user entry first, then a
    shipped preset.

    Raises
    ------
    ConfigError
        Unknown preset (the message lists shipped presets and user entries).
    """
    if config.gpu_hour_usd is not None:
        notes = (
            [f"price.gpu_hour_usd overrides price.preset {config.preset!r}"]
            if config.preset
            else []
        )
        return PriceQuote(usd_per_gpu_hour=config.gpu_hour_usd, notes=notes)
    if config.preset is None:
        return None
    if config.preset in config.entries:
        return _quote(config.preset, config.entries[config.preset], gpu)
    if config.preset not in price_preset_names():
        allowed = sorted({*price_preset_names(), *config.entries})
        raise ConfigError(
            f"price.preset: unknown preset {config.preset!r}; allowed: {', '.join(allowed)}"
        )
    return _quote(config.preset, price_preset(config.preset), gpu)


def check_price(gpu_hour_usd: float | None, preset: str | None) -> None:
    """Refuse both ``price.gpu_hour_usd`` and ``price.preset``, and unknown presets.

    >>> check_price(1.0, "lambda-h100")
    Traceback (most recent call last):
    ...
    sim.errors.ConfigError: price: give exactly one of price.gpu_hour_usd or price.preset (got both)

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
