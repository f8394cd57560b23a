"""``clustersim collective``: an nccl-tests look-alike on the simulator.

The simulator is imported inside :func:`run` (only the light op list is needed for the
parser), so ``clustersim collective --help`` starts fast.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from sim.cli import long_lived
from sim.cli.outputs import Heartbeat, check_plot_path, count
from sim.collectives.schedule import OPS
from sim.errors import ConfigError
from sim.units import parse_bytes

if TYPE_CHECKING:
    from sim.collectives.simulate import CollectiveResult, CollectiveSetup

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
        "--algo",
        default="auto",
        help="auto (NCCL's algorithms), a name, or an NCCL_ALGO-style list: ring,tree or ^nvls "
        "(ring, tree, nvls, nvls_tree, collnet, direct; rhd and hierarchical only by name)",
    )
    p.add_argument("--protocol", default="auto", help="auto, ll, ll128, simple, or a list: ^ll")
    p.add_argument(
        "--nodes", type=count(1), help="override the number of servers of a multi-node preset"
    )
    p.add_argument("--gpus", type=count(1), help="use only the first N GPUs")
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
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print a JSON list of records")
    out.add_argument("--csv", action="store_true", help="print records as CSV, a row per size")
    p.add_argument("--plot", metavar="FILE", help="draw busbw by size (.png or .svg; [plot] extra)")
    p.add_argument(
        "--links", type=count(0), metavar="N", default=0,
        help="after the table, the N busiest links at the largest size (utilisation, bytes)",
    )  # fmt: skip
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run the sweep and print a table (or JSON)."""
    with long_lived():  # the simulator's modules
        from sim.budget import check_estimate, cluster_shape, estimate_collective
        from sim.collectives.algorithms import check_hardware
        from sim.collectives.simulate import CollectiveSetup, simulate_collective, sweep_sizes
        from sim.files import dumps_json
        from sim.network import backend
        from sim.profile_select import describe, resolve_profile
        from sim.studies.files import csv_text
        from sim.topology.presets import load_topology
    op = _OP_ALIASES.get(args.op, args.op)
    if op not in OPS:
        raise ConfigError(f"--op {args.op!r} is unknown; allowed: {', '.join(OPS)}")
    if args.dtype not in DTYPE_BYTES:
        raise ConfigError(f"--dtype {args.dtype!r} is unknown; allowed: {', '.join(DTYPE_BYTES)}")
    sizes = sweep_sizes(
        _whole_bytes(args.min_bytes, "--min-bytes"),
        _whole_bytes(args.max_bytes, "--max-bytes"),
        args.step_factor,
    )
    if args.seed < 0:
        raise ConfigError(f"--seed {args.seed}: must be an integer >= 0")
    if args.nodes is not None and args.nodes < 1:
        raise ConfigError(f"--nodes {args.nodes}: must be an integer >= 1")
    if args.gpus is not None and args.gpus < (2 if op == "send_recv" else 1):
        raise ConfigError(
            f"--gpus {args.gpus}: {op} needs at least {2 if op == 'send_recv' else 1}"
        )
    if args.plot:
        check_plot_path(args.plot)
    gpus, tiers = cluster_shape(args.topology, args.nodes)
    network = backend(args.network, "--network").name
    check_estimate(estimate_collective(args.gpus or gpus, tiers, len(sizes), network, op))
    with long_lived():  # the cluster and its profile
        topo = load_topology(args.topology, nodes=args.nodes, seed=args.seed)
        check_hardware(args.algo, topo, "--algo")
        resolved = resolve_profile(args.profile, topo, force=args.force_profile)
        profile = resolved.profile
        info = describe(resolved, topo)
        setup = CollectiveSetup(topo, args.gpus, profile.collectives)
    if op == "send_recv":
        if setup.n < 2:
            raise ConfigError(f"--op send_recv needs 2 GPUs; {topo.name} has {setup.n}")
        setup = CollectiveSetup(topo, [setup.group[0], setup.group[-1]], profile.collectives)
    if not 0 <= args.root < setup.n:
        raise ConfigError(f"--root {args.root} is out of range; the group has {setup.n} ranks")
    elem = DTYPE_BYTES[args.dtype]
    if args.links < 0:
        raise ConfigError(f"--links {args.links}: must be a number of links >= 1")

    def record(r: CollectiveResult) -> dict[str, object]:
        rec = r.record()
        rec.update(count=int(r.size_bytes // elem), dtype=args.dtype, topology=topo.name)
        if args.csv:  # one flat row of fixed columns: per-scope wire bytes stay in --json
            rec.pop("wire_bytes_by_scope", None)
        else:
            rec["profile"] = info
        return rec

    results: list[CollectiveResult] = []
    emit = _Table(topo.name, op, setup, args, elem, info) if not (args.json or args.csv) else None
    beat = Heartbeat(f"simulating {op} on {setup.n:,} GPUs ({args.network} network)")
    with beat:
        for s in sizes:  # each row is printed as soon as it is computed
            r = simulate_collective(
                setup, op, s, algorithm=args.algo, protocol=args.protocol, network=args.network,
                root=args.root,
            )  # fmt: skip
            results.append(r)
            if emit is not None:
                emit.row(r)
            elif args.csv:
                rec = record(r)
                sys.stdout.write(csv_text([rec], list(rec), header=len(results) == 1))
                sys.stdout.flush()
            beat.touch()
    if emit is not None:
        emit.close(results)
        if args.links:
            print(_busiest(setup, op, results[-1], args))
    if args.json:
        print(dumps_json([record(r) for r in results], indent=1, sort_keys=True))
    if args.plot:
        from sim.cli.outputs import plot

        plot([record(r) for r in results], None, args.plot)
    return 0


#: Largest message (bytes): 8 PiB, where sizes in floating point stop being exact (2^53).
MAX_MESSAGE_BYTES = 2**53


def _whole_bytes(text: str, option: str) -> float:
    """A size in whole bytes (``8``, ``1M``, ``1.5KB``); fractions of a byte are refused,
    and so are sizes above :data:`MAX_MESSAGE_BYTES`."""
    size = parse_bytes(text, option)
    if size != int(size):
        raise ConfigError(f"{option} {text!r} is {size:g} bytes; sizes are whole bytes")
    if size > MAX_MESSAGE_BYTES:
        raise ConfigError(
            f"{option} {text!r} is {size:.3g} bytes; the largest message is 8 PiB (2^53 bytes)"
        )
    return size


def _busiest(setup: Any, op: str, r: CollectiveResult, args: argparse.Namespace) -> str:
    """The busiest links and the tiers of ``r``'s collective, replayed on its network
    alone (recording per-link rates on the flow network)."""
    from sim.cli.outputs import busiest_text, tiers_text
    from sim.collectives.simulate import replay_on_network
    from sim.linkstats import link_stats, tier_rows

    _, _, _, sched, _ = setup.tune(op, r.size_bytes, r.algorithm, r.protocol, args.root)
    time_s, net = replay_on_network(setup, sched, r.protocol, r.size_bytes, args.network,
                                    record=True)  # fmt: skip
    samples = getattr(net, "samples", [])
    topo = getattr(net, "topology", setup.topology)  # the capacities the network ran
    stats = link_stats(topo, samples, net.link_bytes, {}, time_s,
                       getattr(net, "flow_counts", None) if samples else None)  # fmt: skip
    text = tiers_text(tier_rows(stats, topo, {}), time_s)
    if not samples:
        text += "\n(peak and time near capacity need the flow network: --network flow)"
    text += "\n" + busiest_text(stats.rows, args.links)
    return f"# at {int(r.size_bytes)} B, {r.algorithm}/{r.protocol}\n" + "\n".join(
        f"# {line}" for line in text.splitlines()
    )


class _Table:
    """The nccl-tests style table, printed a row at a time."""

    def __init__(
        self,
        name: str,
        op: str,
        setup: CollectiveSetup,
        args: argparse.Namespace,
        elem: int,
        info: dict[str, Any],
    ) -> None:
        from sim.profile_select import text_lines

        self.op, self.args, self.elem = op, args, elem
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
            f"# {'(B)':>10} {'(elements)':>13} {'':>9} {'':>7} {'':>7} {'(us)':>10} {'(GB/s)':>8} {'(GB/s)':>8}",
            flush=True,
        )
        self.redop = "sum" if op in ("all_reduce", "reduce_scatter", "reduce") else "none"
        self.root = args.root if op in ("broadcast", "reduce") else -1

    def row(self, r: CollectiveResult) -> None:
        a, elem = self.args, self.elem
        print(
            f"  {int(r.size_bytes):>10} {int(r.size_bytes // elem):>13} {a.dtype:>9} {self.redop:>7} {self.root:>7} "
            f"{r.time_s * 1e6:>10.2f} {r.algbw_Bps / 1e9:>8.2f} {r.busbw_Bps / 1e9:>8.2f}  {r.algorithm}/{r.protocol}",
            flush=True,
        )

    def close(self, results: list[CollectiveResult]) -> None:
        avg = sum(r.busbw_Bps for r in results) / len(results) / 1e9
        print(f"# Avg bus bandwidth    : {avg:.3f}")
