"""The power-limit GEMM clock: its fit to the H200 measurements, and what it would change.

Prints three tables:

1. the model fitted to ``calibrate/measurements/h200-2026-12-04`` (``calibrate.power_fit``)
   and its checks: each traced step's GEMM rate predicted leave-one-out, and the memory
   sweeps' phases;
2. the catalog's GEMM shape model at full clock against the traced steps' GEMMs re-run
   alone at their burst rate (an op-level check of the H200 entry, not a fit);
3. GPT-3 177B (TP 8, PP 6, interleaved v=4) from 96 to 4,608 H100 (Megatron-Core's strong
   scaling, ``../shared/data``): the clock the model gives each point, with Megatron-Core's
   TP overlap (7/8 hidden) and with none hidden, and the MFU error without and with it;
4. the H100 tables the catalog is fitted to and validated on: mean and max error with
   the catalog, and with the model laid over it (the catalog's end-to-end
   ``matmul_training_factor`` unchanged: what opting in does to them).

Run: ``python benchmarks/validate_power.py`` (tables 3 and 4 need ../shared/data or
``$CLUSTERSIM_DATA``; about a minute).
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import asdict
from pathlib import Path

from calibrate.fit_training import DATA, table_rows
from calibrate.power_fit import check, check_power, check_sweep, fit_power, fitted, load_folder
from calibrate.published import strong_scaling_curve, strong_scaling_scenario
from sim.training.step import simulate_step

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "calibrate" / "measurements" / "h200-2026-12-04"
sys.path.insert(0, str(ROOT / "benchmarks"))


def _power(model: object) -> dict[str, float]:
    return {f"power_{k}": float(v) for k, v in asdict(model).items()}  # type: ignore[call-overload]


def _clock(result: object) -> float:
    note = next(n for n in result.notes if n.startswith("power-limited clock"))  # type: ignore[attr-defined]
    return float(note.split(" at ")[1].split(" ")[0])


def fit_table() -> dict[str, float]:
    """Print table 1; return the model as compute overrides."""
    idle, sweeps, steps = load_folder(H200)
    model = fit_power(idle, sweeps, steps, 700.0)
    print("1. power model fitted to", H200.relative_to(ROOT))
    print("   " + ", ".join(f"{k} {v:.4g}" for k, v in asdict(model).items()))
    print(f"   {'traced step':<12} {'tensor share':>12} {'other':>6} {'idle':>5} {'measured':>9} "
          f"{'predicted (LOO)':>16}")  # fmt: skip
    for r in check(model, steps, steps):
        print(f"   {r['step']:<12} {r['tensor_share']:>12.3f} {r['other_share']:>6.3f} "
              f"{r['idle_share']:>5.3f} {r['measured_r']:>9.3f} {r['predicted_r']:>16.3f}")  # fmt: skip
    top = max(p["sm_mhz"] for p in idle["phases"])
    for doc in sweeps:
        rows = check_sweep(model, doc, top)
        errs = [abs(r["predicted_r"] - r["measured_r"]) for r in rows]
        print(
            f"   memory sweep (pass {rows[0]['memory_w']:.0f} W): {len(rows)} phases, "
            f"|predicted - measured| mean {statistics.fmean(errs):.3f}, max {max(errs):.3f}"
        )
    for r in check_power(model, H200, steps):
        print(
            f"   {r['step']}: measured {r['measured_w']:.0f} W at {r['measured_sm_mhz']:.0f} MHz "
            f"(nvidia-smi, 60 steps), model {r['predicted_w']:.0f} W"
        )
    fp8 = fitted(H200, "fp8")
    print(
        f"   fp8 GEMMs (duty-*-fp8.json): gemm_w {fp8.gemm_w:.4g}, exponent {fp8.exponent:.4g}, "
        f"idle_w {fp8.idle_w:.4g} (power_gemm_fp8_w: fp8 steps' GEMMs draw it below)"
    )
    return {**_power(model), "power_gemm_fp8_w": fp8.gemm_w}


def strong_scaling(power: dict[str, float]) -> None:
    """Print table 3."""
    from validate_strong_scaling import TABLE, _overlap

    row, points = strong_scaling_curve(TABLE)
    print("\n3. GPT-3 177B strong scaling on H100 (interleaved v=4): clock and MFU error")
    for hidden, label in ((None, "Megatron-Core TP overlap"), (0.0, "nothing hidden")):
        cells = []
        for p in points:
            sc = _overlap(strong_scaling_scenario(row, p.gpus, row.batch, 4), hidden, None)
            base = simulate_step(sc, "analytical")
            opt = simulate_step(sc, "analytical", compute=power)
            cells.append(f"{p.gpus}: clock {_clock(opt):.3f}, {base.mfu / p.mfu - 1:+.1%} -> "
                         f"{opt.mfu / p.mfu - 1:+.1%}")  # fmt: skip
        print(f"   {label:<25} " + " | ".join(cells))


def tables(power: dict[str, float], data: Path) -> None:
    """Print table 4."""
    print(
        "\n4. H100 tables: mean / max |error| with the catalog; with the power clock laid over it "
        "(matmul_training_factor 0.961 kept); with the clock in place of that factor (1)"
    )
    for t in ("llm-foundry-mpt-h100-bf16.csv", "llm-foundry-mpt-h100-fp8.csv",
              "megatron-core-h100-weak-scaling.csv"):  # fmt: skip
        rows = table_rows(t, data)
        base = [abs(r.read(simulate_step(r.scenario)) / r.measured - 1) for r in rows]
        runs = [simulate_step(r.scenario, compute=power) for r in rows]
        kept = [abs(r.read(x) / r.measured - 1) for r, x in zip(rows, runs, strict=True)]
        one = {**power, "matmul_training_factor": 1.0}
        swap = [abs(r.read(simulate_step(r.scenario, compute=one)) / r.measured - 1) for r in rows]
        clocks = [_clock(x) for x in runs]
        print(
            f"   {t:<38} {len(rows):>3} rows: {statistics.fmean(base):.1%} / {max(base):.1%}; "
            f"{statistics.fmean(kept):.1%} / {max(kept):.1%}; "
            f"{statistics.fmean(swap):.1%} / {max(swap):.1%} "
            f"(clock {min(clocks):.3f}-{max(clocks):.3f})"
        )


def burst_gemms() -> list[tuple[str, tuple[int, int, int], float, float]]:
    """(replay, (M, N, K), measured burst s, model s at full clock) of every replayed GEMM
    whose burst ran before the power limit bound (not the 175B layer's: 5-12 ms GEMMs are
    limited by their third iteration)."""
    import json
    from dataclasses import replace

    from sim.catalog import gpu_spec
    from sim.training.compute.kernels import gemm_time_s
    from sim.training.compute.params import compute_params

    gpu = gpu_spec("H200")
    p = replace(compute_params("H200"), sustained_clock=1.0, matmul_training_factor=1.0)
    out = []
    for f in sorted(H200.glob("replay*.json")):
        if f.stem == "replay-175b":
            continue
        for g in json.loads(f.read_text())["gemms"]:
            m, n, k = g["mnk"]
            out.append((f.stem, (m, n, k), g["burst_s"], gemm_time_s(m, n, k, 1, "bf16", gpu, p)))
    return out


def gemm_table() -> None:
    """Print table 2."""
    rows = burst_gemms()
    errs = [model / burst - 1 for _, _, burst, model in rows]
    print(
        f"\n2. H200 GEMM model at full clock vs {len(rows)} training GEMMs at their burst: "
        f"mean |error| {statistics.fmean(abs(e) for e in errs):.1%}, median {statistics.median(errs):+.1%}, "
        f"within 10%: {sum(abs(e) <= 0.1 for e in errs)}"
    )
    for name, mnk, burst, model in sorted(rows, key=lambda r: -abs(r[3] / r[2] - 1))[:3]:
        print(
            f"   {name} {mnk}: measured {burst * 1e3:.3f} ms, model {model * 1e3:.3f} ms "
            f"({model / burst - 1:+.1%})"
        )


def main() -> int:
    power = fit_table()
    gemm_table()
    if not DATA.is_dir():
        print(f"\n(tables 3 and 4 need the shared data at {DATA}; skipped)")
        return 0
    strong_scaling(power)
    tables(power, DATA)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
