"""``clustersim compare``: scenarios or ``--set`` variants side by side, fabric cost included.

The study is :func:`sim.studies.compare.compare`; this module parses the command and
formats its records (text table, ``--json`` list of records, ``--csv`` rows; the JSON is
an input to ``clustersim report``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from sim.cli.outputs import add_set_option, positive_float
from sim.errors import ConfigError

_BREAKDOWN_MIN_S = 1e-9


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``compare`` subcommand."""
    p = sub.add_parser(
        "compare",
        help="scenarios or --set variants side by side: step, breakdown, MFU, memory, cost "
        "with the fabric's capex and power, energy, deltas in %%",
    )
    p.add_argument(
        "scenarios", nargs="+", help="scenario presets or files (the first is the baseline)"
    )
    add_set_option(p, "override a field of every run")
    p.add_argument(
        "--variant", action="append", default=[], metavar="'LABEL: KEY=V ...'",
        help="a run of each scenario with these overrides (repeatable; the first is the baseline)",
    )  # fmt: skip
    p.add_argument("--network", help="flow or analytical for every run (default: each scenario's)")
    p.add_argument(
        "--profile",
        help="profile for every run (none: shipped defaults, like for like across fabrics); "
        "default: chosen per run by hardware, as run does",
    )
    p.add_argument("--force-profile", action="store_true", help="use --profile on other hardware")
    p.add_argument("--parts", metavar="FILE", help="your own parts catalog (prices, watts)")
    p.add_argument(
        "--lifetime-years",
        type=positive_float,
        help="years the fabric's capex is spread over (default 5)",
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="a JSON list of records (report reads it)")
    out.add_argument("--csv", action="store_true", help="one flat CSV row per run")
    p.set_defaults(handler=run)


def _runs(args: argparse.Namespace) -> list[Any]:
    from sim.studies.compare import Variant, parse_variant

    variants = [parse_variant(v) for v in args.variant] or [(None, ())]
    many = len(args.scenarios) > 1
    runs = []
    for s in args.scenarios:
        for label, sets in variants:
            name = label or (" ".join(sets) if sets else s)
            runs.append(Variant(f"{s} / {name}" if many and sets else name, s,
                                (*args.sets, *sets)))  # fmt: skip
    labels = [r.label for r in runs]
    dup = next((x for x in labels if labels.count(x) > 1), None)
    if dup is not None:
        raise ConfigError(
            f"compare: two runs are both labelled {dup!r}; label variants 'NAME: k=v'"
        )
    return runs


def run(args: argparse.Namespace) -> int:
    """Simulate every run and print the comparison."""
    from sim.files import dumps_json
    from sim.studies.compare import compare

    if args.network is not None:
        from sim.network import backend

        backend(args.network, "--network")
    runs = _runs(args)

    def progress(i: int, label: str) -> None:
        print(f"[{i + 1}/{len(runs)}] {label}", file=sys.stderr, flush=True)

    records = compare(runs, network=args.network, profile=args.profile,
                      force_profile=args.force_profile, parts=args.parts,
                      lifetime_years=args.lifetime_years, progress=progress)  # fmt: skip
    if args.json:
        print(dumps_json(records, indent=1, sort_keys=True))
    elif args.csv:
        from sim.result import flat_record
        from sim.studies.files import csv_text

        rows = [flat_record({k: v for k, v in r.items() if k != "profile"}) for r in records]
        columns = list(dict.fromkeys(k for row in rows for k in row))
        sys.stdout.write(csv_text(rows, columns))
    else:
        print("\n".join(text_lines(records)))
    return 0


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x:+.1f}%"


def _delta(r: Mapping[str, Any], key: str, base: bool) -> str:
    return "base" if base else _pct(r["delta_pct"][key])


def _usd(x: float | None) -> str:
    from sim.cli.fabric_text import usd

    return usd(x, ",.4g")


def text_lines(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """The comparison as text: the main table with deltas, the breakdown, the cost to
    train, the profiles and the notes."""
    base = records[0]
    w = max(12, *(len(r["label"]) for r in records))
    lines = [
        f"compare: {len(records)} runs on the {base['network']} network; deltas against "
        f"the first ({base['label']}); fabric capex over {base['fabric_lifetime_years']:g} years",
        f"{'run':<{w}} {'GPUs':>6} {'step s':>9} {'Δ':>7} {'tokens/s':>10} {'MFU':>6} "
        f"{'GiB/GPU':>7} {'fits':>4} {'fabric':>9} {'fab kW':>7} {'fab $/GPU-h':>11} "
        f"{'$/step':>8} {'Δ':>7} {'$/M tok':>8} {'Δ':>7} {'kWh/step':>8}",
    ]
    for i, r in enumerate(records):
        b = i == 0
        lines.append(
            f"{r['label']:<{w}} {r['gpus']:>6,} {r['step_time_s']:>9.4f} {_delta(r, 'step_time_s', b):>7} "
            f"{r['tokens_per_s']:>10,.0f} {r['mfu']:>6.1%} {r['memory_per_gpu_bytes'] / 2**30:>7.1f} "
            f"{'yes' if r['fits'] else 'NO':>4} {_usd(r['fabric_capex_usd']):>9} "
            f"{r['fabric_power_w'] / 1e3:>7.1f} {r['fabric_per_gpu_hour_usd']:>11.4f} "
            f"{_usd(r['cost_per_step_usd']):>8} {_delta(r, 'cost_per_step_usd', b):>7} "
            f"{_usd(r['cost_per_million_tokens_usd']):>8} {_delta(r, 'cost_per_million_tokens_usd', b):>7} "
            f"{r['energy_per_step_kwh']:>8.3f}"
        )
    lines += _breakdown(records, w) + _train(records, w) + _profiles(records) + _notes(records)
    if all(r["cost_per_step_usd"] is None or r["gpu_hour_usd"] is None for r in records):
        lines.append("note: no GPU price in these scenarios ($/step is the fabric's alone): "
                     "--set price.preset=... or price.gpu_hour_usd=...")  # fmt: skip
    return lines


def _breakdown(records: Sequence[Mapping[str, Any]], w: int) -> list[str]:
    keys = [k for k in records[0]["breakdown"]
            if any(r["breakdown"].get(k, 0.0) > _BREAKDOWN_MIN_S for r in records)]  # fmt: skip
    head = "".join(f" {k.replace('_exposed', '').replace('_comm', ' comm'):>13}" for k in keys)
    lines = ["", f"{'breakdown (s)':<{w}}{head}"]
    for r in records:
        lines.append(
            f"{r['label']:<{w}}" + "".join(f" {r['breakdown'].get(k, 0.0):>13.4f}" for k in keys)
        )
    return lines


def _train(records: Sequence[Mapping[str, Any]], w: int) -> list[str]:
    if all(r["train"] is None for r in records):
        return []
    lines = ["", f"{'to train':<{w}} {'tokens':>9} {'steps':>10} {'days':>8} {'cost':>10} "
                 f"{'of it fabric':>12} {'MWh':>9}"]  # fmt: skip
    for r in records:
        t = r["train"]
        if t is None:
            lines.append(f"{r['label']:<{w}} (no training.tokens)")
            continue
        lines.append(
            f"{r['label']:<{w}} {t['tokens']:>9.3g} {t['steps']:>10,} {t['days']:>8.2f} "
            f"{_usd(t['cost_usd']):>10} {_usd(t['fabric_cost_usd']):>12} {t['energy_mwh']:>9.2f}"
        )
    return lines


def _profiles(records: Sequence[Mapping[str, Any]]) -> list[str]:
    names = [(r["label"], (r.get("profile") or {}).get("name", "-")) for r in records]
    lines = ["", "profiles: " + "; ".join(f"{label}: {name}" for label, name in names)]
    if len({n for _, n in names}) > 1:
        lines.append("note: the runs use different profiles (chosen by hardware); --profile none "
                     "compares every run on the shipped defaults, like for like")  # fmt: skip
    return lines


def _notes(records: Sequence[Mapping[str, Any]]) -> list[str]:
    out = []
    for r in records:
        for n in r["notes"]:
            if "replaces the" in n:
                out.append(f"note ({r['label']}): {n}")
    return out
