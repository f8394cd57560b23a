"""Prices, time and cost to train, and energy: presets, arithmetic, scaling and bad input."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.catalog import gpu_names, gpu_spec
from sim.cost import (
    EnergyConfig,
    PriceConfig,
    price_preset,
    price_preset_names,
    resolve_price,
    training_cost,
    training_energy,
)
from sim.errors import ClusterSimError, ConfigError
from sim.packaged import read_table, validate_section

# --- prices -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("preset", "server_hour_usd"), [("cudo-h100", 14.96), ("lambda-h100", 19.92), ("aws-p5", 67.68)]
)
def test_issue_quoted_prices(preset: str, server_hour_usd: float) -> None:
    """Issue 11 quotes 8 x H100 server-hours at $14.96 (Cudo), $19.92 (Lambda), $67.68 (AWS p5)."""
    quote = resolve_price(PriceConfig(preset=preset), gpu="H100-SXM")
    assert quote is not None
    assert quote.usd_per_gpu_hour * 8 == pytest.approx(server_hour_usd, rel=1e-12)


def test_every_preset_is_dated_and_sourced() -> None:
    for name in price_preset_names():
        entry = price_preset(name)
        assert re.fullmatch(r"\d{4}-\d{2}(-\d{2})?", entry.as_of), name
        assert len(entry.source) > 40 and entry.gpu in gpu_names(), name


def test_flat_price_still_works_and_wins_over_a_preset() -> None:
    assert resolve_price(PriceConfig(gpu_hour_usd=2.0), gpu="H100-SXM").usd_per_gpu_hour == 2.0  # type: ignore[union-attr]
    quote = resolve_price(PriceConfig(gpu_hour_usd=2.0, preset="aws-p5"), gpu="H100-SXM")
    assert quote is not None and quote.usd_per_gpu_hour == 2.0
    assert any("overrides" in n for n in quote.notes)
    assert resolve_price(PriceConfig(), gpu="H100-SXM") is None


def test_user_entries_and_gpu_mismatch_note() -> None:
    cfg = validate_section(
        PriceConfig,
        {
            "preset": "mine",
            "entries": {
                "mine": {"gpu": "A100-SXM-80GB", "gpus_per_server": 8, "server_hour_usd": 12.0,
                         "as_of": "2026-10-01", "source": "signed quote"},
            },
        },
        "price",
    )  # fmt: skip
    quote = resolve_price(cfg, gpu="H100-SXM")
    assert quote is not None and quote.usd_per_gpu_hour == 1.5 and quote.preset == "mine"
    assert quote.notes == [
        "price preset 'mine' is for A100-SXM-80GB; the simulated GPU is H100-SXM"
    ]


def test_unknown_preset_lists_presets_and_entries() -> None:
    with pytest.raises(
        ConfigError, match=r"price.preset: unknown preset 'cheap'; allowed: .*aws-p5.*lambda-h100"
    ):
        resolve_price(PriceConfig(preset="cheap"), gpu="H100-SXM")


ENTRY = {
    "gpu": "H100-SXM",
    "gpus_per_server": 8,
    "server_hour_usd": 1.0,
    "as_of": "2026",
    "source": "s",
}


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({"gpu_hour_usd": -1}, "price.gpu_hour_usd"),
        ({"gpu_hour_usd": float("nan")}, "price.gpu_hour_usd"),
        ({"entries": {"x": {**ENTRY, "as_of": ""}}}, "price.entries.x.as_of: must not be empty"),
        ({"entries": {"x": {**ENTRY, "gpu": "H1000"}}}, "price.entries.x.gpu: unknown GPU"),
        ({"entries": {"x": {**ENTRY, "gpus_per_server": 0}}}, "price.entries.x.gpus_per_server"),
        ({"currency": "EUR"}, "price.currency: unknown key; allowed: gpu_hour_usd, preset, entries"),
    ],
)  # fmt: skip
def test_bad_price_sections(section: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(key)):
        validate_section(PriceConfig, section, "price")


# --- time and cost to train ------------------------------------------------------------------


@given(
    tokens=st.floats(1e6, 1e14),
    per_step=st.floats(1e3, 1e8),
    step=st.floats(0.01, 100.0),
    gpus=st.integers(1, 100_000),
    price=st.floats(0.0, 20.0),
)
@settings(max_examples=200, deadline=None)
def test_cost_is_steps_times_step_time_times_gpus_times_price(
    tokens: float, per_step: float, step: float, gpus: int, price: float
) -> None:
    c = training_cost(
        tokens=tokens, tokens_per_step=per_step, step_time_s=step, gpus=gpus, usd_per_gpu_hour=price
    )
    assert c.steps == math.ceil(tokens / per_step)
    assert c.wall_time_s == c.useful_time_s == pytest.approx(c.steps * step)
    assert c.cost_usd == pytest.approx(c.steps * step / 3600 * gpus * price, rel=1e-12)


def test_cost_scales_linearly_with_gpus_price_and_wall_time() -> None:
    base = {"tokens": 1e12, "tokens_per_step": 4e6, "step_time_s": 5.0}
    one = training_cost(**base, gpus=512, usd_per_gpu_hour=2.0)
    assert training_cost(**base, gpus=1024, usd_per_gpu_hour=2.0).cost_usd == pytest.approx(
        2 * one.cost_usd
    )  # type: ignore[operator]
    assert training_cost(**base, gpus=512, usd_per_gpu_hour=3.0).cost_usd == pytest.approx(
        1.5 * one.cost_usd
    )  # type: ignore[operator]
    slow = training_cost(
        **base, gpus=512, usd_per_gpu_hour=2.0, wall_time_s=1.25 * one.useful_time_s
    )
    assert slow.cost_usd == pytest.approx(1.25 * one.cost_usd)  # type: ignore[operator]
    assert slow.cost_per_million_tokens_usd == pytest.approx(slow.cost_usd / 1e6)  # type: ignore[operator]
    assert training_cost(**base, gpus=512, usd_per_gpu_hour=None).cost_usd is None


@pytest.mark.parametrize(
    "kwargs",
    [{"tokens": float("nan")}, {"tokens": -1.0}, {"tokens_per_step": 0.0}, {"step_time_s": math.inf},
     {"gpus": 0}, {"gpus": 2.5}, {"usd_per_gpu_hour": -1.0}, {"wall_time_s": 1.0}],
)  # fmt: skip
def test_bad_cost_inputs(kwargs: dict[str, object]) -> None:
    args: dict[str, object] = {
        "tokens": 1e9,
        "tokens_per_step": 1e6,
        "step_time_s": 1.0,
        "gpus": 8,
        "usd_per_gpu_hour": 2.0,
    }
    with pytest.raises(ConfigError):
        training_cost(**{**args, **kwargs})  # type: ignore[arg-type]


# --- energy -------------------------------------------------------------------------------


def test_bloom_dynamic_energy_and_emissions() -> None:
    """Luccioni et al. (JMLR 2023): 1,082,990 A100 GPU-hours x 400 W = 433,196 kWh; x 57 g = 24.7 t."""
    cfg = EnergyConfig(pue="none", grid="bloom-france-2022", server_w_per_gpu=0)
    e = training_energy(
        gpus=384,
        gpu="A100-SXM-80GB",
        busy_time_s=1_082_990 / 384 * 3600,
        utilisation=1.0,
        config=cfg,
    )
    assert e.facility_energy_kwh == pytest.approx(433_196, rel=1e-6)
    assert e.co2e_kg == pytest.approx(24_700, rel=2e-3)


@given(
    u=st.floats(0.0, 1.0),
    pue=st.floats(1.0, 2.0),
    grid=st.floats(0.0, 1000.0),
    server=st.floats(0.0, 1000.0),
)
@settings(max_examples=200, deadline=None)
def test_energy_arithmetic(u: float, pue: float, grid: float, server: float) -> None:
    """E = PUE x gpus x [(P_idle + (TDP - P_idle) u + server + net) t_busy + (P_idle + server + net) t_idle]."""
    cfg = EnergyConfig(
        pue=pue, grid=grid, server_w_per_gpu=server, network_w_per_gpu=25.0, gpu_idle_w=100.0
    )
    e = training_energy(
        gpus=64, gpu="H100-SXM", busy_time_s=7200.0, idle_time_s=1800.0, utilisation=u, config=cfg
    )
    per_gpu = (100 + 600 * u + server + 25) * 7200 + (100 + server + 25) * 1800
    kwh = pue * 64 * per_gpu / 3.6e6
    assert e.facility_energy_kwh == pytest.approx(kwh, rel=1e-12)
    assert e.co2e_kg == pytest.approx(kwh * grid / 1000, rel=1e-12, abs=1e-12)
    assert e.gpu_power_w == pytest.approx(100 + 600 * u)


def test_defaults_come_from_the_catalog_and_presets() -> None:
    e = training_energy(
        gpus=8, gpu="H100-SXM", busy_time_s=3600.0, utilisation=0.5, config=EnergyConfig()
    )
    assert (e.gpu_busy_w, e.gpu_idle_w, e.server_w_per_gpu) == (
        gpu_spec("H100-SXM").tdp_w,
        142.5,
        350.0,
    )
    assert (e.pue, e.grid_g_per_kwh) == (1.58, 367.4)
    assert all(len(v) > 10 for v in e.sources.values())
    other = training_energy(
        gpus=8, gpu="L40S", busy_time_s=3600.0, utilisation=0.5, config=EnergyConfig()
    )
    assert other.gpu_idle_w == pytest.approx(0.2 * gpu_spec("L40S").tdp_w)
    assert any("no measured idle power for L40S" in n for n in other.notes)


def test_cleaner_grid_and_better_pue_lower_emissions() -> None:
    def kg(**cfg: object) -> float:
        return training_energy(
            gpus=8, gpu="H100-SXM", busy_time_s=3600.0, utilisation=0.8, config=EnergyConfig(**cfg)
        ).co2e_kg  # type: ignore[arg-type]

    assert kg(grid="india") > kg(grid="us-average") > kg(grid="france") > kg(grid="quebec-hydro")
    assert kg(pue="industry-average") > kg(pue="hyperscale") > kg(pue="none")


def test_grid_presets_are_sourced() -> None:
    table = read_table("sim.cost", "facility.yaml")
    for kind in ("pue", "grid_g_per_kwh"):
        for name, entry in table[kind].items():
            assert len(entry["source"]) > 20, name


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"pue": 0.9}, "energy.pue: PUE must be >= 1"),
        ({"pue": float("nan")}, "energy.pue"),
        ({"grid": -5.0}, "energy.grid"),
        ({"utilisation": 1.5}, "energy.utilisation"),
        ({"gpu_idle_w": -1}, "energy.gpu_idle_w"),
        ({"solar": True}, "energy.solar: unknown key"),
    ],
)
def test_bad_energy_sections(section: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate_section(EnergyConfig, section, "energy")


@pytest.mark.parametrize(
    ("cfg", "kwargs", "message"),
    [
        (
            {"grid": "mars"},
            {},
            "energy.grid: unknown preset 'mars'; allowed: bloom-france-2022, china",
        ),
        ({"pue": "arctic"}, {}, "energy.pue: unknown preset 'arctic'; allowed: hyperscale"),
        ({}, {"busy_time_s": float("nan")}, "busy time"),
        ({}, {"utilisation": 1.2}, "utilisation"),
        ({}, {"gpu": "H1000"}, "unknown GPU 'H1000'"),
        ({"gpu_idle_w": 900.0}, {}, "exceeds its busy power"),
    ],
)
def test_bad_energy_inputs(cfg: dict[str, object], kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {
        "gpus": 8,
        "gpu": "H100-SXM",
        "busy_time_s": 3600.0,
        "utilisation": 0.5,
        **kwargs,
    }
    with pytest.raises(ClusterSimError, match=re.escape(message)):
        training_energy(config=EnergyConfig(**cfg), **args)  # type: ignore[arg-type]
