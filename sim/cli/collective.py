"""``clustersim collective``: an nccl-tests look-alike on the simulator.

The simulator is imported inside :func:`run` (only the light op list is needed for the
parser), so ``clustersim collective --help`` starts fast.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from sim.collectives.schedule import OPS
from sim.errors import ConfigError
from sim.units import parse_bytes

if TYPE_CHECKING:
    from sim.collectives.simulate import CollectiveSetup

DTYPE_BYTES = {
    "float": 4,
    "float32": 4,
    "half": 2,
    "float16": 2,
    "bfloat16": 2,
    "double": 8,
    "int8": 1,
    "uint8": 1,
    "int32": 4,
    "int64": 8,
    "fp8": 1,
}
_OP_ALIASES = {
    "alltoall": "all_to_all",
    "sendrecv": "send_recv",
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "reducescatter": "reduce_scatter",
}


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``collective`` subcommand."""
    p = sub.add_parser("collective", help="simulate an nccl-tests style sweep of one collective")
    p.add_argument("--topology", required=True, help="preset name or YAML file")
    p.add_argument("--op", default="all_reduce", help=f"one of {', '.join(OPS)}")
    p.add_argument("--min-bytes", "-b", default="8", help="smallest size, e.g. 8, 1M, 1GiB")
    p.add_argument("--max-bytes", "-e", default="1G", help="largest size, e.g. 16G")
    p.add_argument("--step-factor", "-f", type=float, default=2.0, help="size multiplier per row")
    p.add_argument(
        "--algo", default="auto", help="auto, ring, tree, rhd, hierarchical, nvls, direct"
    )
    p.add_argument("--protocol", default="auto", help="auto, ll, ll128, simple")
    p.add_argument(
        "--nodes", type=int, help="override the number of servers of a multi-node preset"
    )
    p.add_argument("--gpus", type=int, help="use only the first N GPUs")
    p.add_argument("--network", default="flow", help="flow (max-min sharing) or analytical")
    p.add_argument("--dtype", default="float", help=f"element type: {', '.join(DTYPE_BYTES)}")
    p.add_argument("--root", type=int, default=0, help="root rank of broadcast/reduce")
    p.add_argument(
        "--profile",
        help="calibrated profile (name or YAML file); default: the shipped profile measured on "
        "this topology's hardware; none: the shipped defaults",
    )
    p.add_argument(
        "--force-profile",
        action="store_true",
        help="use --profile even if measured on other hardware",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of ECMP hashing")
    p.add_argument("--json", action="store_true", help="print a JSON list of records")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run the sweep and print a table (or JSON)."""
    from sim.collectives.simulate import CollectiveSetup, simulate_collective, sweep_sizes
    from sim.profile_select import describe, resolve_profile
    from sim.topology.presets import load_topology

    op = _OP_ALIASES.get(args.op, args.op)
    if op not in OPS:
        raise ConfigError(f"--op {args.op!r} is unknown; allowed: {', '.join(OPS)}")
    if args.dtype not in DTYPE_BYTES:
        raise ConfigError(f"--dtype {args.dtype!r} is unknown; allowed: {', '.join(DTYPE_BYTES)}")
    sizes = sweep_sizes(
        parse_bytes(args.min_bytes, "--min-bytes"),
        parse_bytes(args.max_bytes, "--max-bytes"),
        args.step_factor,
    )
    topo = load_topology(args.topology, nodes=args.nodes, seed=args.seed)
    resolved = resolve_profile(args.profile, topo, force=args.force_profile)
    profile = resolved.profile
    info = describe(resolved, topo)
    setup = CollectiveSetup(topo, args.gpus, profile.collectives)
    if op == "send_recv":
        setup = CollectiveSetup(topo, [setup.group[0], setup.group[-1]], profile.collectives)
    if not 0 <= args.root < setup.n:
        raise ConfigError(f"--root {args.root} is out of range; the group has {setup.n} ranks")
    elem = DTYPE_BYTES[args.dtype]
    results = [
        simulate_collective(
            setup,
            op,
            s,
            algorithm=args.algo,
            protocol=args.protocol,
            network=args.network,
            root=args.root,
        )
        for s in sizes
    ]
    if args.json:
        recs = []
        for r in results:
            rec = r.record()
            rec["count"] = int(r.size_bytes // elem)
            rec["dtype"] = args.dtype
            rec["topology"] = topo.name
            rec["profile"] = info
            recs.append(rec)
        print(json.dumps(recs, indent=1, sort_keys=True))
        return 0
    _print_table(topo.name, op, setup, args, results, elem, info)
    return 0


def _print_table(
    name: str,
    op: str,
    setup: CollectiveSetup,
    args: argparse.Namespace,
    results: list,
    elem: int,
    info: dict,
) -> None:
    from sim.profile_select import text_lines

    nodes = len(set(setup.layout.node_of))
    print(
        f"# clustersim collective: {op} on {name}, {setup.n} GPUs ({nodes} server(s)), "
        f"network {args.network}, algo {args.algo}, protocol {args.protocol}"
    )
    for line in text_lines(info):
        print(f"# {line}")
    print(
        f"# {'size':>10} {'count':>13} {'type':>9} {'redop':>7} {'root':>7} {'time':>10} "
        f"{'algbw':>8} {'busbw':>8}  algorithm"
    )
    print(
        f"# {'(B)':>10} {'(elements)':>13} {'':>9} {'':>7} {'':>7} {'(us)':>10} {'(GB/s)':>8} {'(GB/s)':>8}"
    )
    redop = "sum" if op in ("all_reduce", "reduce_scatter", "reduce") else "none"
    root = args.root if op in ("broadcast", "reduce") else -1
    for r in results:
        print(
            f"  {int(r.size_bytes):>10} {int(r.size_bytes // elem):>13} {args.dtype:>9} {redop:>7} {root:>7} "
            f"{r.time_s * 1e6:>10.2f} {r.algbw_Bps / 1e9:>8.2f} {r.busbw_Bps / 1e9:>8.2f}  {r.algorithm}/{r.protocol}"
        )
    avg = sum(r.busbw_Bps for r in results) / len(results) / 1e9
    print(f"# Avg bus bandwidth    : {avg:.3f}")
