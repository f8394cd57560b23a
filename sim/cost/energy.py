"""Energy and emissions of a training run: GPU power at the simulated utilisation plus overheads.

Power per GPU while training, at utilisation ``u`` (the fraction of the step the GPU is busy):

    P_gpu(u) = P_idle + (P_busy - P_idle) u        linear model: Fan, Weber and Barroso,
                                                  "Power Provisioning for a Warehouse-sized
                                                  Computer", ISCA 2007
    P_busy   = the GPU's board power (TDP, topologies/catalog/gpus.yaml) unless overridden
    P_idle   = measured idle draw of a held GPU (power.yaml), else 20% of TDP (flagged)

IT power per GPU adds the server (CPUs, memory, NICs, fans: ``server_w_per_gpu``, 350 W
derived from an 8 x H100 node measured at 8.4 kW) and the network (``network_w_per_gpu``:
the user's value, else the fabric's switches, NICs and optics from its bill of materials,
:mod:`sim.cost.bom`, when the caller passes them, else 0). Time the job spends
checkpointing or restarting counts at idle GPU power.

    E_IT       = gpus * [(P_gpu(u) + P_srv + P_net) t_busy + (P_idle + P_srv + P_net) t_idle]
    E_facility = PUE * E_IT                                           (J; reported in kWh)
    CO2e       = E_facility[kWh] * grid [g/kWh] / 1000                (kg)

Example, BLOOM's dynamic-power estimate (Luccioni et al., JMLR 24(253) 2023): 1,082,990
A100 GPU-hours at 400 W TDP, no overheads, 57 g/kWh -> 433,196 kWh and 24.7 t CO2e:

>>> cfg = EnergyConfig(pue="none", grid="bloom-france-2022", server_w_per_gpu=0)
>>> e = training_energy(gpus=384, gpu="A100-SXM-80GB", busy_time_s=1_082_990 / 384 * 3600,
...                     utilisation=1.0, config=cfg)
>>> round(e.facility_energy_kwh), round(e.co2e_kg / 1000, 1)
(433196, 24.7)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from sim.catalog import gpu_spec
from sim.cost.config import EnergyConfig
from sim.errors import ConfigError
from sim.packaged import lookup, read_table

__all__ = ["EnergyEstimate", "facility_value", "gpu_power_w", "training_energy"]

_J_PER_KWH = 3.6e6


@dataclass(frozen=True)
class EnergyEstimate:
    """Energy (kWh) and emissions (kg CO2e) of a run, with every input that produced them."""

    gpus: int
    gpu: str
    utilisation: float
    gpu_busy_w: float
    gpu_idle_w: float
    gpu_power_w: float
    server_w_per_gpu: float
    network_w_per_gpu: float
    it_power_w: float
    busy_time_s: float
    idle_time_s: float
    it_energy_kwh: float
    pue: float
    facility_energy_kwh: float
    grid_g_per_kwh: float
    co2e_kg: float
    sources: dict[str, str]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


def gpu_power_w(idle_w: float, busy_w: float, utilisation: float) -> float:
    """``idle + (busy - idle) * utilisation`` (W).

    >>> gpu_power_w(100.0, 700.0, 0.5)
    400.0
    """
    if not 0.0 <= utilisation <= 1.0:
        raise ConfigError(f"utilisation: must be within [0, 1] (got {utilisation!r})")
    return idle_w + (busy_w - idle_w) * utilisation


def facility_value(kind: str, value: float | str, what: str) -> tuple[float, str]:
    """A ``facility.yaml`` preset of table ``kind`` by name, or the user's number: (value,
    its source)."""
    if isinstance(value, str):
        entry = lookup(read_table("sim.cost", "facility.yaml")[kind], value, what)
        return float(entry["value"]), f"{value}: {entry['source']}"
    return float(value), "user value"


def _gpu_watts(
    gpu: str, config: EnergyConfig, sources: dict[str, str], notes: list[str]
) -> tuple[float, float]:
    spec = gpu_spec(gpu)
    busy = spec.tdp_w if config.gpu_busy_w is None else config.gpu_busy_w
    sources["gpu_busy_w"] = (
        spec.sources.get("tdp", "catalog") if config.gpu_busy_w is None else "user value"
    )
    power = read_table("sim.cost", "power.yaml")
    if config.gpu_idle_w is not None:
        idle, sources["gpu_idle_w"] = config.gpu_idle_w, "user value"
    elif gpu in power["idle_w"]:
        idle, sources["gpu_idle_w"] = (
            float(power["idle_w"][gpu]["value"]),
            power["idle_w"][gpu]["source"],
        )
    else:
        fraction = float(power["default_idle_fraction"]["value"])
        idle, sources["gpu_idle_w"] = (
            fraction * spec.tdp_w,
            power["default_idle_fraction"]["source"],
        )
        notes.append(
            f"no measured idle power for {gpu}: assumed {fraction:.0%} of its {spec.tdp_w:g} W TDP"
        )
    if idle > busy:
        raise ConfigError(f"energy: GPU idle power {idle:g} W exceeds its busy power {busy:g} W")
    return busy, idle


def training_energy(
    *,
    gpus: int,
    gpu: str,
    busy_time_s: float,
    utilisation: float,
    config: EnergyConfig,
    idle_time_s: float = 0.0,
    fabric_w_per_gpu: float | None = None,
) -> EnergyEstimate:
    """Energy and CO2e of ``gpus`` GPUs training for ``busy_time_s`` and idling ``idle_time_s``.

    Parameters
    ----------
    gpus : int
        GPUs in the job.
    gpu : str
        Catalog GPU name (for its TDP and idle power).
    busy_time_s : float
        Wall time spent running steps (useful and lost work), seconds.
    utilisation : float
        Fraction of a step the GPU is busy, in [0, 1] (e.g. the compute share of the step's
        breakdown); ``energy.utilisation`` overrides it.
    config : EnergyConfig
        The ``energy`` section.
    idle_time_s : float
        Wall time with the GPUs held but idle (checkpoint writes, restarts), seconds.
    fabric_w_per_gpu : float, optional
        The fabric's power per GPU (W: :attr:`sim.cost.bom.BillOfMaterials.power_w` / GPUs),
        used when ``energy.network_w_per_gpu`` is not given.

    Raises
    ------
    ConfigError
        Unknown GPU or preset, negative or NaN times, utilisation outside [0, 1].
    """
    for name, value in (("busy time", busy_time_s), ("idle time", idle_time_s)):
        if not (math.isfinite(value) and value >= 0):
            raise ConfigError(
                f"energy: {name} must be a finite number of seconds >= 0 (got {value!r})"
            )
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ConfigError(f"energy: gpus must be an integer >= 1 (got {gpus!r})")
    sources: dict[str, str] = {}
    notes: list[str] = []
    u = utilisation if config.utilisation is None else config.utilisation
    if config.utilisation is not None:
        notes.append(f"energy.utilisation {u:g} overrides the simulated {utilisation:g}")
    busy_w, idle_w = _gpu_watts(gpu, config, sources, notes)
    table = read_table("sim.cost", "power.yaml")["server_w_per_gpu"]
    server = float(table["value"]) if config.server_w_per_gpu is None else config.server_w_per_gpu
    sources["server_w_per_gpu"] = (
        table["source"] if config.server_w_per_gpu is None else "user value"
    )
    pue, sources["pue"] = facility_value("pue", config.pue, "energy.pue")
    grid, sources["grid"] = facility_value("grid_g_per_kwh", config.grid, "energy.grid")
    net_w = config.network_w_per_gpu
    if net_w is not None:
        sources["network_w_per_gpu"] = "user value"
    elif fabric_w_per_gpu is not None:
        net_w = float(fabric_w_per_gpu)
        sources["network_w_per_gpu"] = (
            "the fabric's bill of materials: switches, NICs and optics (parts catalog)"
        )
    else:
        net_w = 0.0
    if net_w == 0:
        notes.append(
            "network switches and optics not counted (no fabric, or energy.network_w_per_gpu 0)"
        )
    p_gpu = gpu_power_w(idle_w, busy_w, u)
    overhead = server + net_w
    it_j = gpus * ((p_gpu + overhead) * busy_time_s + (idle_w + overhead) * idle_time_s)
    facility_kwh = pue * it_j / _J_PER_KWH
    return EnergyEstimate(
        gpus=gpus, gpu=gpu, utilisation=u, gpu_busy_w=busy_w, gpu_idle_w=idle_w,
        gpu_power_w=p_gpu, server_w_per_gpu=server, network_w_per_gpu=net_w,
        it_power_w=gpus * (p_gpu + overhead), busy_time_s=float(busy_time_s),
        idle_time_s=float(idle_time_s), it_energy_kwh=it_j / _J_PER_KWH, pue=pue,
        facility_energy_kwh=facility_kwh, grid_g_per_kwh=grid,
        co2e_kg=facility_kwh * grid / 1000.0, sources=sources, notes=notes,
    )  # fmt: skip
