"""What the fabric adds to a GPU-hour: its capex over a stated lifetime, and its power.

    capex per GPU-hour  = capex / (lifetime_years * 8766 h * gpus)
    energy per GPU-hour = power_w * PUE / 1000 * usd_per_kwh / gpus
    fabric per GPU-hour = the two together

Switches and optics draw about the same power whether the links are busy or not, so the
fabric's energy counts every hour; its capex is spread over every hour of its life, all of
it charged to these GPUs (the fabric serves no one else). A cloud GPU-hour price already
includes the provider's network: add the fabric only to the price of GPUs you own or rent
bare, and read cloud presets' fabric as "what building this would cost".

>>> from sim.cost.bom import BillOfMaterials, BomItem
>>> bom = BillOfMaterials("t", 8, (BomItem("switch", "s", 1, 87660.0, 800.0, "", "", False, {}),))
>>> c = fabric_cost(bom, lifetime_years=5.0, usd_per_kwh=0.1, pue=1.25)
>>> round(c.capex_per_gpu_hour_usd, 6), round(c.energy_per_gpu_hour_usd, 6)
(0.25, 0.0125)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from sim.cost.bom import BillOfMaterials
from sim.cost.energy import facility_value
from sim.errors import ConfigError

__all__ = [
    "DEFAULT_LIFETIME_YEARS",
    "FabricCost",
    "StepCost",
    "fabric_cost",
    "fabric_record",
    "step_cost",
]

HOURS_PER_YEAR = 8766.0  # 365.25 days
DEFAULT_LIFETIME_YEARS = 5.0
_LIFETIME_SOURCE = (
    "5 years: IRS Publication 946, MACRS 5-year property (computers and peripheral equipment); "
    "network gear is commonly depreciated over 3-5 years"
)


@dataclass(frozen=True)
class FabricCost:
    """The fabric's capex and power as a price per GPU-hour (USD), with its inputs."""

    capex_usd: float
    power_w: float
    gpus: int
    lifetime_years: float
    usd_per_kwh: float
    pue: float
    capex_per_gpu_hour_usd: float
    energy_per_gpu_hour_usd: float
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def per_gpu_hour_usd(self) -> float:
        """Capex and energy together, USD per GPU-hour."""
        return self.capex_per_gpu_hour_usd + self.energy_per_gpu_hour_usd

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (with ``per_gpu_hour_usd``)."""
        return {**asdict(self), "per_gpu_hour_usd": self.per_gpu_hour_usd}


#: Amortisation periods accepted for the fabric's capex (years): a day to a century.
MIN_LIFETIME_YEARS, MAX_LIFETIME_YEARS = 1 / 365, 100.0


def fabric_cost(
    bom: BillOfMaterials,
    *,
    lifetime_years: float = DEFAULT_LIFETIME_YEARS,
    usd_per_kwh: float | str = "us-industrial",
    pue: float | str = "industry-average",
) -> FabricCost:
    """The fabric of ``bom`` per GPU-hour (see the module docstring).

    Parameters
    ----------
    bom : BillOfMaterials
        The fabric's parts (:func:`sim.cost.bom.bill_of_materials`).
    lifetime_years : float
        Years the capex is spread over (> 0).
    usd_per_kwh : float or str
        Electricity price, USD per kWh, or a ``facility.yaml`` preset (``us-industrial``).
    pue : float or str
        Facility overhead on IT power (>= 1) or a preset (``industry-average``).

    Raises
    ------
    ConfigError
        A lifetime <= 0 or not finite, a negative price, a PUE below 1, or an unknown preset.
    """
    if not MIN_LIFETIME_YEARS <= lifetime_years <= MAX_LIFETIME_YEARS:
        raise ConfigError(
            f"--lifetime-years: must be between {MIN_LIFETIME_YEARS:.3g} (a day) and "
            f"{MAX_LIFETIME_YEARS:g} (got {lifetime_years!r})"
        )
    price, price_src = facility_value("usd_per_kwh", usd_per_kwh, "--usd-per-kwh")
    overhead, pue_src = facility_value("pue", pue, "energy.pue")
    if price < 0 or overhead < 1:
        raise ConfigError(f"fabric cost: usd_per_kwh >= 0 and pue >= 1 (got {price}, {overhead})")
    hours = lifetime_years * HOURS_PER_YEAR * bom.gpus
    return FabricCost(
        capex_usd=bom.capex_usd, power_w=bom.power_w, gpus=bom.gpus,
        lifetime_years=float(lifetime_years), usd_per_kwh=price, pue=overhead,
        capex_per_gpu_hour_usd=bom.capex_usd / hours,
        energy_per_gpu_hour_usd=bom.power_w * overhead / 1000.0 * price / bom.gpus,
        sources={"lifetime_years": _LIFETIME_SOURCE if lifetime_years == DEFAULT_LIFETIME_YEARS
                 else "user value", "usd_per_kwh": price_src, "pue": pue_src},
    )  # fmt: skip


@dataclass(frozen=True)
class StepCost:
    """One step's cost with the fabric (USD): the GPUs at their price and the fabric per
    GPU-hour, for ``gpus`` GPUs over ``step_time_s``; per million tokens the same over
    ``tokens_per_step``. GPU parts are None without a GPU price."""

    gpu_per_step_usd: float | None
    fabric_per_step_usd: float
    per_step_usd: float | None
    gpu_per_million_tokens_usd: float | None
    fabric_per_million_tokens_usd: float
    per_million_tokens_usd: float | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


def step_cost(
    fabric: FabricCost, step_time_s: float, gpus: int, tokens_per_step: float,
    gpu_hour_usd: float | None,
) -> StepCost:  # fmt: skip
    """``gpus * step_time_s / 3600 * (gpu_hour_usd + fabric per GPU-hour)`` per step, and
    per million tokens (``/ tokens_per_step * 1e6``).

    >>> f = FabricCost(0, 0, 8, 5, 0.1, 1.2, 0.25, 0.05)
    >>> c = step_cost(f, 3600.0, 8, 1e6, 2.0)
    >>> c.gpu_per_step_usd, round(c.fabric_per_step_usd, 6), round(c.per_million_tokens_usd, 6)
    (16.0, 2.4, 18.4)
    """
    hours = gpus * step_time_s / 3600.0
    per_m = 1e6 / tokens_per_step
    fab = hours * fabric.per_gpu_hour_usd
    gpu = None if gpu_hour_usd is None else hours * gpu_hour_usd
    total = None if gpu is None else gpu + fab
    return StepCost(gpu, fab, total, None if gpu is None else gpu * per_m, fab * per_m,
                    None if total is None else total * per_m)  # fmt: skip


def fabric_record(
    topology: Any,
    *,
    step_time_s: float,
    gpus: int,
    tokens_per_step: float,
    gpu_hour_usd: float | None,
    catalog: Any = None,
    lifetime_years: float = DEFAULT_LIFETIME_YEARS,
) -> dict[str, Any] | None:
    """The fabric layer of one simulated step, JSON-ready: the bill of materials' totals
    (``capex_usd``, ``power_w``, per GPU, per category), its cost per GPU-hour
    (``cost``: :class:`FabricCost`) and the step's cost with it (``step``:
    :class:`StepCost`); None for a topology without a scale-out network."""
    from sim.cost.bom import bill_of_materials

    bom = bill_of_materials(topology, catalog)
    if not bom.items:
        return None
    cost = fabric_cost(bom, lifetime_years=lifetime_years)
    rec = bom.to_dict()
    del rec["items"]
    return {
        **rec,
        "gpu_hour_usd": gpu_hour_usd,
        "cost": cost.to_dict(),
        "step": step_cost(cost, step_time_s, gpus, tokens_per_step, gpu_hour_usd).to_dict(),
    }
