"""``clustersim calibrate``: real runs, log import, fitting and validation.

The simulator does not import this package: ``sim.cli`` finds :func:`register` through
the ``clustersim.commands`` entry point (see pyproject.toml). Every handler imports its
``calibrate`` module lazily, so building the parser never imports torch. User mistakes
raise :class:`~sim.errors.CalibrationError` or ``ConfigError``; ``sim.cli.main`` prints
one line and exits 2.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from sim.cli.outputs import count
from sim.errors import CalibrationError, ClusterSimError
from sim.units import parse_size

__all__ = ["register"]

_DEFAULT_OPS = "all_reduce,all_gather,reduce_scatter"


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``calibrate`` and its subcommands."""
    p = sub.add_parser(
        "calibrate", help="real collective/compute runs, nccl-tests import, fit, validate"
    )
    cal = p.add_subparsers(dest="calibrate_command", required=True, metavar="SUBCOMMAND")
    _add_collectives(cal)
    _add_compute(cal)
    _add_import(cal)
    _add_fit(cal)
    _add_validate(cal)
    _add_compare(cal)


def _add_collectives(cal: argparse._SubParsersAction) -> None:
    p = cal.add_parser("collectives", help="time real torch.distributed collectives")
    p.add_argument("--backend", default="nccl", help="nccl (GPUs) or gloo (CPU)")
    p.add_argument("--ops", default=_DEFAULT_OPS, help="comma-separated ops")
    p.add_argument("--min-bytes", "-b", default="1K", help="smallest size, e.g. 1K")
    p.add_argument("--max-bytes", "-e", default="1M", help="largest size, e.g. 64M")
    p.add_argument("--step-factor", "-f", type=float, default=2.0, help="size multiplier")
    p.add_argument("--iters", type=count(1), default=20, help="timed calls per size")
    p.add_argument("--warmup", type=count(0), default=5, help="untimed calls per size")
    p.add_argument("--repeats", type=count(1), default=1, help="interleaved passes over all sizes")
    p.add_argument(
        "--local", type=count(2), help="spawn N >= 2 local processes (else join torchrun)"
    )
    p.add_argument("--dtype", default="float32", help="element type (torch spelling)")
    p.add_argument(
        "--skip-unsupported", action="store_true", help="note ops the backend cannot run"
    )
    p.add_argument(
        "--timeout", type=float, default=300.0,
        help="seconds one collective may take before the run fails (a stopped rank)",
    )  # fmt: skip
    p.add_argument(
        "--resume", action="store_true",
        help="keep the records already in --out (a failed run's, measured with the same ranks, "
        "iterations, dtype and backend) and measure only the rest",
    )  # fmt: skip
    _add_force(p)
    p.add_argument("--out", required=True, help="measurement file (JSON), rewritten per size")
    _times_kernels(p, _collectives)


def _add_force(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--force",
        action="store_true",
        help="replace --out if it exists (measurements in it are lost)",
    )


CLOCK_HELP = (
    "CPU timer: wall (default), or thread: the thread's CPU time, leaving out other "
    "processes on a shared host (needs --device cpu --threads 1)"
)
STATISTIC_HELP = (
    "what a record's time is of its timed iterations: median (default), or min, the "
    "fastest: on a shared host other work only ever adds time (give calibrate compute and "
    "step the same)"
)


def _times_kernels(
    p: argparse.ArgumentParser, handler: Callable[[argparse.Namespace], int]
) -> None:
    """A subcommand that times real kernels: its ``--statistic``, and the marker that keeps
    the command's C heap as a training job has it (:func:`sim.cli.runtime.settle`)."""
    p.add_argument("--statistic", default="median", help=STATISTIC_HELP)
    p.set_defaults(handler=handler, times_kernels=True)


def _check_measuring(args: argparse.Namespace, resume: bool | None = None) -> None:
    """A measuring subcommand's checks before it measures: its statistic, then its ``--out``."""
    from calibrate.measurements import check_statistic

    check_statistic(args.statistic)
    _check_out(args.out, args.force, resume)


def _add_compute(cal: argparse._SubParsersAction) -> None:
    p = cal.add_parser("compute", help="time GEMMs, attention, memory-bound ops, launches")
    p.add_argument("--device", default="cuda", help="cuda or cpu")
    p.add_argument("--quick", action="store_true", help="few small cases")
    p.add_argument("--threads", type=count(1), help="CPU threads torch may use (default: torch's)")
    p.add_argument("--clock", default="wall", help=CLOCK_HELP)
    _add_force(p)
    p.add_argument("--out", required=True, help="measurement file (JSON)")
    _times_kernels(p, _compute)
    s = cal.add_parser("step", help="train a small GPT for a few steps, time each step")
    s.add_argument("--device", default="cuda", help="cuda or cpu")
    s.add_argument("--quick", action="store_true", help="small model, few steps")
    s.add_argument("--steps", type=count(1), help="timed steps")
    s.add_argument("--threads", type=count(1), help="CPU threads torch may use (default: torch's)")
    s.add_argument("--clock", default="wall", help=CLOCK_HELP)
    s.add_argument("--trace", help="also write a PyTorch profiler (Kineto) trace of the job here")
    s.add_argument("--trace-steps", type=int, default=5, help="profiled steps (after the timed)")
    s.add_argument("--config", help="the GPT as key=value,... (layers, hidden, heads, "
                   "ffn_hidden, vocab, seq, batch, dtype); default by --device and --quick")  # fmt: skip
    _add_force(s)
    s.add_argument("--out", required=True, help="measurement file (JSON)")
    _times_kernels(s, _step)


def _add_import(cal: argparse._SubParsersAction) -> None:
    p = cal.add_parser("import-nccl-tests", help="parse nccl-tests logs into a measurement file")
    p.add_argument("logs", nargs="+", metavar="LOG")
    p.add_argument("--op", help="the collective, when the log does not say")
    p.add_argument("--created", help="fixed creation time (UTC ISO-8601)")
    _add_force(p)
    p.add_argument("--out", required=True, help="measurement file (JSON)")
    p.set_defaults(handler=_import)


def _add_target(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topology", required=True, help="preset name or YAML file the runs used")
    p.add_argument(
        "--nodes", type=count(1), help="servers of the measured group (if the file does not say)"
    )
    p.add_argument("--gpus", type=count(1), help="GPUs per server of the measured group")


def _add_fit(cal: argparse._SubParsersAction) -> None:
    p = cal.add_parser("fit", help="fit a profile to measurement files")
    p.add_argument("measurements", nargs="+", metavar="MEASUREMENTS")
    _add_target(p)
    p.add_argument("--name", help="profile name (default: the output file's stem)")
    p.add_argument("--created", help="fixed creation time, for byte-identical output")
    p.add_argument("--note", action="append", default=[], help="a provenance note (repeatable)")
    p.add_argument("--out", required=True, help="profile YAML to write")
    p.add_argument(
        "--force", action="store_true",
        help="write the profile even if the hardware contradicts the topology or the fit is "
        "poor, or --out is a file that is not a profile",
    )  # fmt: skip
    p.add_argument(
        "--params",
        help="comma-separated knobs to fit (others keep their defaults); an unknown one is "
        "refused with the list of what this data can fit",
    )
    p.set_defaults(handler=_fit)


def _add_validate(cal: argparse._SubParsersAction) -> None:
    p = cal.add_parser("validate", help="predict every measured case with a profile; show errors")
    p.add_argument("profile", help="profile name or YAML file")
    p.add_argument("measurements", nargs="+", metavar="MEASUREMENTS")
    _add_target(p)
    p.add_argument(
        "--holdout", action="store_true", help="refit on even-indexed sizes, predict the rest"
    )
    p.add_argument("--min-bytes", help="report only cases of at least this size, e.g. 64K")
    p.add_argument("--json", action="store_true", help="print rows and summary as JSON")
    p.set_defaults(handler=_validate)


def _add_compare(cal: argparse._SubParsersAction) -> None:
    p = cal.add_parser(
        "compare", help="the simulated step beside a measured step and its profiler trace"
    )
    p.add_argument("step", metavar="STEP", help="calibrate step measurement file")
    p.add_argument("--trace", help="its profiler trace (default: the one the file names)")
    p.add_argument(
        "--profile",
        help="profile whose compute section to simulate with (shipped name, file or none)",
    )
    p.add_argument("--topology", default="cpu-single", help="topology the job ran on")
    p.add_argument("--reader", default="json", help="trace reader: json (built in) or hta")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.set_defaults(handler=_compare)


def _compare(args: argparse.Namespace) -> int:
    from calibrate.compare import compare, format_comparison
    from calibrate.measurements import load_measurements
    from sim.errors import CalibrationError
    from sim.files import dumps_json
    from sim.profile import load_profile
    from sim.topology.presets import load_topology

    step = load_measurements(args.step)
    trace = args.trace or step.meta.details.get("trace")
    if not isinstance(trace, str) or not trace:
        raise CalibrationError(f"{args.step}: names no trace; give --trace FILE")
    # a shipped name, a file or none, loaded as every command loads one; its hardware is
    # not checked against --topology (only its compute section is used)
    compute = dict(load_profile(args.profile).compute) if args.profile else {}
    c = compare(step, trace, load_topology(args.topology), compute, args.reader)
    print(dumps_json(c.to_dict(), indent=1, sort_keys=True) if args.json else format_comparison(c))
    return 0


def _collectives(args: argparse.Namespace) -> int:
    _check_measuring(args, args.resume)
    from calibrate.collectives import run_collectives
    from calibrate.measurements import save_measurements

    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    m = run_collectives(
        args.backend, ops, parse_size(args.min_bytes, "--min-bytes"),
        parse_size(args.max_bytes, "--max-bytes"), args.step_factor, args.iters,
        args.warmup, args.local, args.dtype, args.skip_unsupported, repeats=args.repeats,
        timeout_s=args.timeout, out=args.out, resume=args.resume, statistic=args.statistic,
    )  # fmt: skip
    if _is_rank0():
        save_measurements(m, args.out)
        print(f"wrote {len(m.records)} records to {args.out}")
    return 0


def _check_out(
    path: str, force: bool = False, resume: bool | None = None, option: str = "--out"
) -> None:
    """Refuse an output path that cannot be written before any measuring: a measurement
    file already there is data measured once, replaced only with ``--force`` (or, where
    the command has it, continued with ``--resume``). ``option`` names the path in
    messages (``--out``, ``--trace``)."""
    from sim.files import check_output_path

    target = check_output_path(path, option)
    if force or resume or not target.exists():
        return
    from calibrate.measurements import describe_file

    way = "--resume to continue it or --force" if resume is not None else "--force"
    raise CalibrationError(
        f"{option} {path!r} exists ({describe_file(target)}); add {way} to replace it, or "
        "choose another file"
    )


def _check_profile_out(path: str, force: bool) -> None:
    """Refuse an output that cannot be written; a file already there may be replaced only
    when it is a profile (fitted data, made again from its measurement files)."""
    from sim.files import check_output_path, read_text

    target = check_output_path(path, "--out")
    if force or not target.exists():
        return
    try:
        is_profile = "clustersim.profile/" in read_text(target, "--out", max_bytes=2**20)
    except ClusterSimError:
        is_profile = False
    if not is_profile:
        raise CalibrationError(
            f"--out {path!r} exists and is not a profile (measurements?); choose another "
            "file, or add --force to replace it"
        )


def _is_rank0() -> bool:
    import os

    return os.environ.get("RANK", "0") == "0"


def _compute(args: argparse.Namespace) -> int:
    _check_measuring(args)
    from calibrate.compute import run_compute
    from calibrate.measurements import save_measurements

    m = run_compute(args.device, args.quick, threads=args.threads, clock=args.clock,
                    statistic=args.statistic)  # fmt: skip
    save_measurements(m, args.out)
    print(f"wrote {len(m.records)} records to {args.out}")
    return 0


def _step(args: argparse.Namespace) -> int:
    _check_measuring(args)
    from calibrate.measurements import save_measurements
    from calibrate.stepjob import parse_config, run_step_job

    if args.trace:
        _check_out(args.trace, args.force, option="--trace")
    config = parse_config(args.config, args.device, args.quick) if args.config else None
    m = run_step_job(args.device, args.quick, config=config, steps=args.steps,
                     threads=args.threads, clock=args.clock, trace=args.trace,
                     trace_steps=args.trace_steps, statistic=args.statistic)  # fmt: skip
    save_measurements(m, args.out)
    print(f"wrote step job ({m.records[0].time_s * 1e3:.3f} ms/step) to {args.out}"
          + (f" and its trace to {args.trace}" if args.trace else ""))  # fmt: skip
    return 0


def _import(args: argparse.Namespace) -> int:
    _check_out(args.out, args.force)
    from calibrate.nccl_tests import import_nccl_tests

    m = import_nccl_tests(args.logs, args.out, op=args.op, created=args.created)
    print(f"wrote {len(m.records)} records to {args.out}")
    return 0


def _fit(args: argparse.Namespace) -> int:
    _check_profile_out(args.out, args.force)
    from pathlib import Path

    from calibrate.profile_io import fit_profile, load_files, topology_for, write_profile
    from sim.profile import ErrorBar

    ms = load_files(args.measurements)
    topo = topology_for(args.topology, ms, args.nodes, args.gpus)
    name = args.name or Path(args.out).stem
    params = [x.strip() for x in args.params.split(",") if x.strip()] if args.params else None
    profile = fit_profile(ms, topo, name=name, nodes=args.nodes, gpus=args.gpus,
                          created=args.created, notes=args.note, force=args.force,
                          params=params)  # fmt: skip
    write_profile(profile, args.out)
    coll = profile["provenance"]["fit"].get("collectives")
    if coll:
        print(f"collectives: {coll['points']} points, R2(log) {coll['r2_log_time']}, "
              f"MAPE {coll['mape_pct']}%, max APE {coll['max_ape_pct']}%")  # fmt: skip
    for bar in profile["error_bars"]:
        print(f"error bar: {ErrorBar(**bar).label}")
    for note in profile["provenance"]["notes"]:
        if note.startswith("written with --force"):
            print(f"warning: {note}")
    print(f"wrote profile {name!r} to {args.out}")
    return 0


def _validate(args: argparse.Namespace) -> int:
    from calibrate.profile_io import load_files, topology_for
    from calibrate.validate import format_table, validate
    from sim.files import dumps_json
    from sim.profile import load_profile

    profile = load_profile(args.profile)
    ms = load_files(args.measurements)
    topo = topology_for(args.topology, ms, args.nodes, args.gpus)
    v = validate(profile, ms, topo, nodes=args.nodes, gpus=args.gpus, holdout=args.holdout,
                 min_bytes=parse_size(args.min_bytes, "--min-bytes") if args.min_bytes else 0)  # fmt: skip
    if args.json:
        out: dict[str, Any] = {"rows": list(v.rows), "summary": v.summary}
        if v.refit is not None:
            out["refit"] = v.refit.summary()
        print(dumps_json(out, indent=1, sort_keys=True))
    else:
        print(format_table(v))
    return 0
