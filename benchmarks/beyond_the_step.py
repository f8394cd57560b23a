"""Beyond the ideal step: Llama-3-405B on 16,384 H100, failures, spot, cost and energy.

Simulates one training step (analytical network; about 3 s), then runs the layers over it:
the reliability estimate and its event simulation, spot against on-demand, time and cost
to train on 15.6T tokens at three providers' prices, and energy and CO2e on three grids.
Prints the numbers docs/beyond-the-step.md quotes.

    python benchmarks/beyond_the_step.py [--runs 20]
"""

from __future__ import annotations

import argparse

from sim import StepResult, simulate_step
from sim.cost import EnergyConfig, PriceConfig, resolve_price, training_cost, training_energy
from sim.cost.bom import bill_of_materials
from sim.reliability import (
    GoodputEstimate,
    ReliabilityConfig,
    SpotConfig,
    goodput_estimate,
    job_plan,
    simulate_goodput,
    spot_comparison,
)
from sim.scenario.load import load_scenario
from sim.topology.presets import load_topology
from sim.workload.models import param_count

# Llama 3 405B as Meta trained it (arXiv:2407.21783, Table 4): the shipped scenario
# scenarios/llama3-405b-16k.yaml (TP 8, PP 16 interleaved with one layer per virtual stage,
# DP 128, 16M-token batches of 8192-token sequences on 16,384 H100 over 400G RoCE), so this
# script and `clustersim run llama3-405b-16k` print the same run.
SCENARIO = load_scenario("llama3-405b-16k")
ALTERNATIVES: dict[str, dict[str, object]] = {
    "restart 60 s": {"restart_s": 60},
    "local NVMe": {"storage": "local-nvme"},
    "object store": {"storage": "object-store"},
    "OPT-era failures": {"failures": "opt-175b-a100"},
}
assert SCENARIO.training.tokens is not None
TOKENS = SCENARIO.training.tokens
PARAMS = float(param_count(SCENARIO.model))
PER_STEP = SCENARIO.training.global_batch * SCENARIO.training.seq_len
GPUS = 16384


def llama3_run() -> tuple[StepResult, GoodputEstimate]:
    """The simulated step and the reliability estimate of the whole run (also used by a test)."""
    step = simulate_step(SCENARIO, network="analytical")
    est = goodput_estimate(
        step_time_s=step.step_time_s, gpus=GPUS, gpus_per_node=8, params=PARAMS,
        config=ReliabilityConfig(), tokens=TOKENS, tokens_per_step=PER_STEP,
    )  # fmt: skip
    return step, est


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="event-simulation runs (default 20)")
    args = parser.parse_args()

    step, est = llama3_run()
    per_step = PER_STEP
    util = step.breakdown["compute"] / step.step_time_s
    print(
        f"step {step.step_time_s:.3f} s, {step.tflops_per_gpu:.0f} TFLOP/s per GPU, compute share {util:.3f}"
    )

    job = {"step_time_s": step.step_time_s, "gpus": 16384, "gpus_per_node": 8, "params": PARAMS}
    budget = {"tokens": TOKENS, "tokens_per_step": per_step}
    rel = ReliabilityConfig()
    day = 86400.0
    print(f"MTBI {est.mtbi_s / 3600:.2f} h; checkpoint {est.checkpoint_bytes / 1e12:.2f} TB "
          f"in {est.checkpoint_write_s:.2f} s at {est.checkpoint_bandwidth_Bps / 1e12:g} TB/s")  # fmt: skip
    print(f"intervals: Young {est.interval_young_s:.1f} s, Daly {est.interval_daly_s:.1f} s, "
          f"exact {est.interval_exact_s:.1f} s -> every {est.interval_steps} steps")  # fmt: skip
    assert est.expected_wall_time_s is not None and est.expected_breakdown_s is not None
    print(
        f"goodput {est.goodput:.4f}; {est.useful_time_s / day:.1f} d useful, "  # type: ignore[operator]
        f"{est.expected_wall_time_s / day:.1f} d expected wall, {est.expected_interruptions:.0f} interruptions"
    )
    print(
        "breakdown (d): "
        + ", ".join(f"{k} {v / day:.2f}" for k, v in est.expected_breakdown_s.items())
    )
    for name, extra in ALTERNATIVES.items():
        alt = goodput_estimate(config=ReliabilityConfig(**extra), **job, **budget)  # type: ignore[arg-type]
        print(f"  {name:<17} goodput {alt.goodput:.4f}, interval {alt.interval_steps} steps")

    plan = job_plan(rel.job(16384, 8), step_time_s=step.step_time_s, checkpoint_s=est.checkpoint_write_s,
                    steps=est.steps, policy="daly")  # fmt: skip
    sim = simulate_goodput(
        plan.segment_work_s(), est.checkpoint_write_s, rel.job(16384, 8), runs=args.runs, seed=0
    )
    print(f"event simulation ({args.runs} runs): wall {sim.mean_wall_s / day:.2f} +- {sim.sem_wall_s / day:.2f} d, "
          f"goodput {sim.goodput:.4f}")  # fmt: skip

    for preset in ("cudo-h100", "lambda-h100", "aws-p5"):
        quote = resolve_price(PriceConfig(preset=preset), gpu="H100-SXM")
        assert quote is not None
        cost = training_cost(tokens=TOKENS, tokens_per_step=per_step, step_time_s=step.step_time_s, gpus=16384,
                             usd_per_gpu_hour=quote.usd_per_gpu_hour, wall_time_s=est.expected_wall_time_s)  # fmt: skip
        print(
            f"{preset:<12} ${quote.usd_per_gpu_hour:.3f}/GPU-h: {cost.gpu_hours / 1e6:.1f}M GPU-h, "
            f"${cost.cost_usd / 1e6:.1f}M"
        )  # type: ignore[operator]

    for spot in (SpotConfig(discount=0.6, monthly_interruption=0.05, restart_s=1800),
                 SpotConfig(discount=0.6, preemptions_per_node_hour=2e-3, restart_s=1800)):  # fmt: skip
        cmp = spot_comparison(reliability=rel, spot=spot, usd_per_gpu_hour=2.49, **job, **budget)  # type: ignore[arg-type]
        print(f"spot {spot.preemption_rate_per_node_s() * 3600:.2e}/node-h: goodput {cmp.spot.goodput:.4f} "
              f"vs {cmp.on_demand.goodput:.4f}, relative cost {cmp.relative_cost:.3f}, "
              f"break-even {cmp.break_even_preemptions_per_node_hour:.2e}/node-h")  # fmt: skip

    assert est.busy_time_s is not None and est.idle_time_s is not None
    cluster = SCENARIO.cluster
    fabric = bill_of_materials(load_topology(cluster.topology, nodes=cluster.nodes))
    for grid in ("us-average", "eu-27", "quebec-hydro"):
        e = training_energy(gpus=16384, gpu="H100-SXM", busy_time_s=est.busy_time_s, idle_time_s=est.idle_time_s,
                            utilisation=util, config=EnergyConfig(pue="hyperscale", grid=grid),
                            fabric_w_per_gpu=fabric.power_w / GPUS)  # fmt: skip
        print(f"energy ({grid}, PUE {e.pue}): {e.gpu_power_w:.0f} W per GPU busy, "
              f"{e.network_w_per_gpu:.0f} W fabric, IT {e.it_power_w / 1e6:.1f} MW, "
              f"{e.facility_energy_kwh / 1e6:.1f} GWh, {e.co2e_kg / 1e6:.2f} kt CO2e")  # fmt: skip


if __name__ == "__main__":
    main()
