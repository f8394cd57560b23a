"""Cost and energy of training: dated price presets, time and cost to train, kWh and CO2e.

A layer over a simulated step (DESIGN.md, "Beyond the ideal step"): every function takes
plain numbers (step time, GPU count, GPU name, tokens, ...) and returns a frozen dataclass
with ``to_dict()``. Scenario sections: ``price`` (:class:`PriceConfig`) and ``energy``
(:class:`EnergyConfig`); see docs/beyond-the-step.md.
"""

from sim.cost.config import EnergyConfig, PriceConfig, PriceEntry
from sim.cost.energy import EnergyEstimate, gpu_power_w, training_energy
from sim.cost.prices import PriceQuote, price_preset, price_preset_names, resolve_price
from sim.cost.training import TrainingCost, cost_usd, steps_for_tokens, training_cost

__all__ = [
    "EnergyConfig",
    "EnergyEstimate",
    "PriceConfig",
    "PriceEntry",
    "PriceQuote",
    "TrainingCost",
    "cost_usd",
    "gpu_power_w",
    "price_preset",
    "price_preset_names",
    "resolve_price",
    "steps_for_tokens",
    "training_cost",
    "training_energy",
]
