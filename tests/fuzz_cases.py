"""Hostile and careless inputs for tests/test_fuzz.py: files of every format, and argv.

A :class:`Case` is a command line (``{d}`` stands for the test's temporary folder), the
files to write there first (and special files: FIFOs, device nodes, symbolic links,
folders), and the exit status expected: 2 (a user error, one or two lines, no traceback),
0 (valid input; ``--json`` output must then be valid JSON), or None for a valid-looking
big input that must either finish within the limits or be refused up front (either is
right; a hang, a traceback or running out of memory is not).

:func:`all_cases` is the quick suite ``tests/test_fuzz.py`` runs in-process;
:func:`big_cases` adds the inputs that take the simulator to its caps, which only the
corpus runner (``benchmarks/fuzz_corpus.py``, a subprocess per case with a time and
memory cap) runs.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from helpers import SHARED_DATA


@dataclass(frozen=True)
class Case:
    """One hostile (or valid) invocation of ``clustersim``.

    ``special`` maps a name in the folder to what to make there: ``fifo``, ``null`` (a
    character device like /dev/null), ``dir``, or ``link:TARGET`` (a symbolic link).
    """

    id: str
    argv: tuple[str, ...]
    files: Mapping[str, str | bytes] = field(default_factory=dict)
    status: int | None = 2
    special: Mapping[str, str] = field(default_factory=dict)


def materialise(case: Case, folder: Path) -> list[str]:
    """Write the case's files and special files into ``folder``; return its argv."""
    for name, body in case.files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(body, bytes):
            path.write_bytes(body)
        else:
            path.write_text(body, encoding="utf-8")
    for name, what in case.special.items():
        path = folder / name
        if what == "fifo":
            os.mkfifo(path)
        elif what == "dir":
            path.mkdir()
        elif what == "null":
            try:
                os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            except PermissionError:
                path.symlink_to("/dev/null")  # not root: a link to the device itself
        elif what.startswith("link:"):
            path.symlink_to(what.removeprefix("link:"))
        else:
            raise ValueError(f"{case.id}: unknown special file {what!r}")
    return [a.replace("{d}", str(folder)) for a in case.argv]


# --- hostile bodies shared by every YAML format -----------------------------------------

_BOMB = "\n".join(
    [f"a0: &a0 [{', '.join(['lol'] * 9)}]"]
    + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
)
YAML_BODIES: dict[str, str | bytes] = {
    "latin1": "name: caf\xe9\n".encode("latin-1"),
    "utf16": "name: x\n".encode("utf-16"),
    "binary": b"\x7fELF\x02\x01\x01\x00\x00\x00" + bytes(range(256)),
    "empty": "",
    "comment-only": "# nothing here\n",
    "top-list": "- 1\n- 2\n",
    "top-scalar": "42\n",
    "top-string": "just a string\n",
    "deep-flow": "a: " + "[" * 20_000 + "]" * 20_000 + "\n",
    "deep-flow-map": "a: " + "{b: " * 5_000 + "1" + "}" * 5_000 + "\n",
    "deep-block": "".join(" " * i + f"k{i}:\n" for i in range(300)),
    "alias-bomb": _BOMB + "\n",
    "many-aliases": "a: &a 1\nb: [" + ", ".join(["*a"] * 5000) + "]\n",
    "duplicate-key": "name: a\nname: b\n",
    "huge-int": "name: " + "9" * 5000 + "\n",
    "bad-date": "name: 2024-13-45\n",
    "tab-indent": "name:\n\t- x\n",
    "unclosed": "name: [1, 2\n",
    "python-tag": "name: !!python/object/apply:os.system ['true']\n",
    "unhashable-key": "? [a, b]\n: 1\n",
    "nan": "name: .nan\n",
    "bad-merge": "name: 1\n<<: 5\n",
    "colon-garbage": ":::\n- - -\n::\n",
    "nul-in-text": b"name: a\x00b\n",
    "control-char": "name: a\x07b\n",
}

_SCENARIO = """model: {{preset: llama3-8b}}
cluster: {{topology: dgx-h100}}
parallel: {{tp: 1, pp: 1, dp: 8, zero: 3, micro_batch: 1}}
training: {{global_batch: 16, seq_len: 2048}}
network: analytical
{extra}"""
_TOPOLOGY = """name: t
gpu: H100-SXM
nodes: 2
node: {{gpus: 8, fabric: nvswitch, nvlink: nvlink4, pcie: pcie-gen5, pcie_switches: 4,
        nics: 8, nic: ib-ndr{node_extra}}}
network: {{kind: leaf-spine, link: {link}, oversubscription: {over}, nodes_per_leaf: 2}}
"""
_STUDY = """scenario: llama3-8b-dgx
grid: {grid}
"""

_LOG_HEAD = """# Collective test starting: all_reduce_perf
# nThread 1 nGpus 1 minBytes 8 maxBytes 1024 step: 2(factor) warmup iters: 5 iters: 20
#  Rank  0 Group  0 Pid 1 on node1 device  0 [0x1a] NVIDIA H100 80GB HBM3
{ranks}#       size   count  type redop root   time  algbw  busbw #wrong   time  algbw  busbw #wrong
"""
_RANK = "#  Rank  {r} Group  0 Pid {p} on node1 device  {r} [0x1b] NVIDIA H100 80GB HBM3\n"


def nccl_log(rows: list[str], ranks: int = 8) -> str:
    """An nccl-tests all_reduce log with ``ranks`` device lines and the given table rows."""
    extra = "".join(_RANK.format(r=r, p=r + 1) for r in range(1, ranks))
    return _LOG_HEAD.format(ranks=extra) + "".join(f"  {row}\n" for row in rows)


def _row(
    size: int | str, count: int, us: str = "20.00", alg: str = "1.00", bus: str = "1.75"
) -> str:
    return f"{size} {count} float sum -1 {us} {alg} {bus} 0 {us} {alg} {bus} 0"


_GOOD_ROWS = [_row(2**k, 2**k // 4, f"{10 + k * 3:.2f}") for k in range(3, 21)]


def _yaml_format_cases() -> list[Case]:
    """Every hostile YAML body, in every YAML file kind the CLI reads."""
    kinds = {
        "scenario": ("s.yaml", ("run", "{d}/s.yaml", "--network", "analytical")),
        "topology": ("t.yaml", ("collective", "--topology", "{d}/t.yaml", "-b", "8", "-e", "8")),
        "profile": (
            "p.yaml",
            (
                "collective",
                "--topology",
                "dgx-h100",
                "--profile",
                "{d}/p.yaml",
                "-b",
                "8",
                "-e",
                "8",
            ),
        ),
        "study": ("st.yaml", ("sweep", "{d}/st.yaml", "--no-progress")),
        "layer-list": ("s.yaml", ("run", "{d}/s.yaml")),
    }
    out = []
    for kind, (name, argv) in kinds.items():
        for body_id, body in YAML_BODIES.items():
            files: dict[str, str | bytes] = {name: body}
            if kind == "layer-list":
                files = {"s.yaml": _layer_scenario("l.yaml"), "l.yaml": body}
            out.append(Case(f"{kind}-{body_id}", argv, files))
    return out


def _layer_scenario(layer_file: str) -> str:
    return (
        f"model: {{layer_list: {layer_file}}}\ncluster: {{topology: dgx-h100}}\n"
        "parallel: {dp: 8}\ntraining: {global_batch: 8, seq_len: 1}\nnetwork: analytical\n"
    )


# --- scenario values (through --set and in files) ----------------------------------------

_BAD_VALUES = {
    "nan": ".nan", "inf": ".inf", "neg": "-1", "zero": "0", "frac": "2.5", "text": "abc",
    "sci-text": "'1e9'", "big": str(2**63), "huge": "1" * 5000, "list": "[1, 2]",
    "map": "{a: 1}", "bool": "true",
}  # fmt: skip
_INT_KEYS = (
    "parallel.tp", "parallel.pp", "parallel.dp", "parallel.micro_batch",
    "parallel.virtual_stages", "training.global_batch", "training.seq_len", "model.layers",
    "model.hidden", "model.heads", "model.vocab",
)  # fmt: skip
_RUN = ("run", "llama3-8b-dgx", "--network", "analytical", "--json")


def _set_cases() -> list[Case]:
    out = []
    for key in _INT_KEYS:
        for vid, value in _BAD_VALUES.items():
            if key.startswith("model.") and vid in ("list", "map"):
                continue  # same reader as the parallel keys; keep the suite short
            out.append(Case(f"set-{key}-{vid}", (*_RUN, "--set", f"{key}={value}")))
    for vid in ("nan", "inf", "neg", "text", "list"):
        out.append(
            Case(f"set-price-{vid}", (*_RUN, "--set", f"price.gpu_hour_usd={_BAD_VALUES[vid]}"))
        )
    others = {
        "layers-1e9": "model.layers=1000000000", "layers-2e63": f"model.layers={2**63}",
        "batch-1e12": "training.global_batch=1000000000000",
        "million-micro": "training.global_batch=1048576", "nodes-1e4": "cluster.nodes=10000",
        "seq-beyond-max": "training.seq_len=1048576", "seed-neg": "seed=-1",
        "seed-huge": f"seed={'7' * 5000}", "dropout-nan": "model.dropout=.nan",
        "dropout-one": "model.dropout=1", "zero-bad": "parallel.zero=7",
        "schedule-bad": "parallel.schedule=zigzag", "precision-bad": "training.precision=fp4",
        "bucket-frac": "parallel.bucket_bytes=-5", "bucket-nan": "parallel.bucket_bytes=.nan",
        "topology-missing": "cluster.topology=/nonexistent/t.yaml",
        "topology-long-name": f"cluster.topology={'x' * 300}.yaml",
        "network-bad": "network=packet", "unknown-key": "parallel.warp=9",
        "no-equals": "parallel.tp", "bad-yaml": "parallel.tp=[1",
        "profile-bad": "profile=nope",
    }  # fmt: skip
    for cid, item in others.items():
        out.append(Case(f"set-{cid}", (*_RUN, "--set", item)))
    return out


def _scenario_file_cases() -> list[Case]:
    bad = {
        "unknown-top": "colour: red\n", "price-neg": "price: {gpu_hour_usd: -3}\n",
        "price-inf": "price: {gpu_hour_usd: .inf}\n", "seed-float": "seed: 1.5\n",
        "nodes-1e5": "", "profile-int": "profile: 5\n",
    }  # fmt: skip
    out = [Case(f"scenario-{k}", ("run", "{d}/s.yaml", "--json"),
                {"s.yaml": _SCENARIO.format(extra=v)}) for k, v in bad.items() if v]  # fmt: skip
    out.append(Case("scenario-valid", ("run", "{d}/s.yaml", "--json"),
                    {"s.yaml": _SCENARIO.format(extra="")}, status=0))  # fmt: skip
    out.append(Case("scenario-missing", ("run", "{d}/none.yaml")))
    out.append(Case("scenario-folder", ("run", "{d}/dir.yaml"), {"dir.yaml/x": "a: 1\n"}))
    out.append(Case("scenario-long-name", ("run", "{d}/" + "n" * 300 + ".yaml")))
    out.append(Case("scenario-preset-unknown", ("run", "no-such-scenario")))
    return out


# --- topologies ----------------------------------------------------------------------------


def _topology_cases() -> list[Case]:
    argv = ("collective", "--topology", "{d}/t.yaml", "-b", "8", "-e", "1K", "--json")
    good = dict(link="ib-ndr", over="1.0", node_extra="")
    variants = {
        "nvlink-as-network": dict(good, link="nvlink4"),
        "pcie-as-network": dict(good, link="pcie-gen5"),
        "over-nan": dict(good, over=".nan"), "over-neg": dict(good, over="-2"),
        "over-zero": dict(good, over="0"), "over-inf": dict(good, over=".inf"),
        "nic-bw-nan": dict(good, node_extra=", nic_bandwidth: nanGb/s"),
        "nic-bw-neg": dict(good, node_extra=", nic_bandwidth: -400Gb/s"),
        "nic-bw-zero": dict(good, node_extra=", nic_bandwidth: 0Gb/s"),
        "nic-bw-unit": dict(good, node_extra=", nic_bandwidth: 400 parsecs"),
        "nic-bw-1P": dict(good, node_extra=", nic_bandwidth: 1P"),
        "link-unknown": dict(good, link="warp-drive"),
    }  # fmt: skip
    out = [
        Case(f"topology-{k}", argv, {"t.yaml": _TOPOLOGY.format(**v)}) for k, v in variants.items()
    ]
    out.append(Case("topology-valid", argv, {"t.yaml": _TOPOLOGY.format(**good)}, status=0))
    text = _TOPOLOGY.format(**good)
    for cid, (old, new) in {
        "gpus-zero": ("gpus: 8", "gpus: 0"), "gpus-frac": ("gpus: 8", "gpus: 7.5"),
        "nodes-1e6": ("nodes: 2", "nodes: 1000000"), "nodes-neg": ("nodes: 2", "nodes: -2"),
        "gpu-unknown": ("H100-SXM", "Z9000"), "nics-zero": ("nics: 8", "nics: 0"),
        "fabric-bad": ("nvswitch", "ethernet"),
    }.items():  # fmt: skip
        out.append(Case(f"topology-{cid}", argv, {"t.yaml": text.replace(old, new)}))
    return out


# --- profiles ------------------------------------------------------------------------------

_PROFILE = "schema: clustersim.profile/1\nname: p\n"


def _profile_cases() -> list[Case]:
    argv = ("collective", "--topology", "dgx-h100", "--profile", "{d}/p.yaml", "-b", "8",
            "-e", "1K", "--network", "analytical", "--json")  # fmt: skip
    bodies = {
        "schema-wrong": "schema: clustersim.profile/0\n",
        "unknown-key": _PROFILE + "colour: red\n",
        "collectives-list": _PROFILE + "collectives: [1, 2]\n",
        "collectives-scalar": _PROFILE + "collectives: 5\n",
        "link-eff-text": _PROFILE + "collectives: {link_efficiency: {nvlink: fast}}\n",
        "link-eff-nan": _PROFILE + "collectives: {link_efficiency: {nvlink: .nan}}\n",
        "link-eff-neg": _PROFILE + "collectives: {link_efficiency: {nvlink: -1}}\n",
        "link-eff-list": _PROFILE + "collectives: {link_efficiency: [1]}\n",
        "latency-neg": _PROFILE + "collectives: {base_latency_us: -5}\n",
        "latency-nan": _PROFILE + "collectives: {base_latency_us: .nan}\n",
        "latency-inf": _PROFILE + "collectives: {base_latency_us: .inf}\n",
        "unknown-section-key": _PROFILE + "collectives: {warp: 1}\n",
        "compute-list": _PROFILE + "compute: [1]\n",
        "hardware-scalar": _PROFILE + "hardware: 5\n",
        "hardware-gpus-frac": _PROFILE + "hardware: {gpu: H100-SXM, gpus: 2.5}\n",
        "hardware-links-list": _PROFILE + "hardware: {gpu: H100-SXM, links: [1]}\n",
        "bars-scalar": _PROFILE + "error_bars: 5\n",
        "bars-nan": _PROFILE + "error_bars: [{what: c, metric: m, value: .nan, cases: 1, source: s}]\n",
        "bars-inf": _PROFILE + "error_bars: [{what: c, metric: m, value: .inf, cases: 1, source: s}]\n",
        "bars-missing": _PROFILE + "error_bars: [{what: c}]\n",
        "provenance-list": _PROFILE + "provenance: [1]\n",
    }  # fmt: skip
    out = [Case(f"profile-{k}", argv, {"p.yaml": v}) for k, v in bodies.items()]
    out.append(Case("profile-unknown-name", (*argv[:4], "no-such-profile", *argv[5:])))
    out.append(Case("profile-valid-none", (*argv[:4], "none", *argv[5:]), status=0))
    return out


# --- nccl-tests logs and measurement files ------------------------------------------------


def _calibrate_cases() -> list[Case]:
    imp = ("calibrate", "import-nccl-tests", "{d}/x.log", "--out", "{d}/m.json")
    logs: dict[str, str | bytes] = {
        "count-zero": nccl_log([_row(1024, 0)]),
        "size-zero": nccl_log([_row(0, 0)]),
        "time-nan": nccl_log([_row(1024, 256, us="nan")]),
        "time-inf": nccl_log([_row(1024, 256, us="inf")]),
        "time-neg": nccl_log([_row(1024, 256, us="-3.0")]),
        "time-zero": nccl_log([_row(1024, 256, us="0")]),
        "size-huge": nccl_log([_row(10**30, 256)]),
        "size-5000-digits": nccl_log([_row("9" * 5000, 256)]),
        "bw-huge": nccl_log([_row(1024, 256, alg="1e400")]),
        "header-only": nccl_log([]),
        "garbage": "hello\nworld\n" * 10,
        "binary": bytes(range(256)) * 4,
        "latin1": nccl_log(_GOOD_ROWS[:3]).replace("node1", "n\xf6de").encode("latin-1"),
        "columns-short": nccl_log(["1024 256 float sum"]),
        "type-bad": nccl_log(["1024 256 quaternion sum -1 1 1 1 0 1 1 1 0"]),
        "empty": "",
    }  # fmt: skip
    out = [Case(f"nccl-log-{k}", imp, {"x.log": v}) for k, v in logs.items() if k != "latin1"]
    # Logs mix encodings (host names, pasted prose): bytes that are not UTF-8 are replaced.
    out.append(Case("nccl-log-latin1", imp, {"x.log": logs["latin1"]}, status=0))
    valid = {"x.log": nccl_log(_GOOD_ROWS[:4])}
    out.append(Case("nccl-log-valid", imp, valid, status=0))
    out.append(Case("nccl-log-missing", imp))
    out.append(Case("nccl-log-out-missing-dir", (*imp[:3], "--out", "{d}/no/dir/m.json"), valid))
    out.append(Case("nccl-log-out-is-dir", (*imp[:3], "--out", "{d}"), valid))
    out.append(Case("nccl-log-out-long", (*imp[:3], "--out", "{d}/" + "m" * 300 + ".json"), valid))
    out.append(Case("nccl-log-out-empty", (*imp[:3], "--out", ""), valid))
    out.append(Case("nccl-log-op-bad", (*imp, "--op", "all_sum"), valid))
    out.append(Case("nccl-log-one-rank", imp, {"x.log": nccl_log(_GOOD_ROWS[:4], ranks=1)}, 0))
    fit = ("calibrate", "fit", "{d}/m.json", "--topology", "dgx-h100", "--out", "{d}/p.yaml")
    meas: dict[str, str | bytes] = {
        "nan": '{"schema": "clustersim.measurements/1", "kind": "collectives", "meta": '
               '{"source": "x", "created": "t"}, "records": [{"time_s": NaN}]}',
        "infinity": '{"schema": "clustersim.measurements/1", "x": Infinity}',
        "huge-int": '{"schema": ' + "9" * 5000 + "}",
        "deep": "[" * 100_000 + "]" * 100_000,
        "not-json": "{schema: 1",
        "top-list": "[1, 2]",
        "schema-wrong": '{"schema": "x"}',
        "records-wrong": '{"schema": "clustersim.measurements/1", "kind": "collectives", '
                         '"meta": {"source": "x", "created": "t"}, "records": 5}',
        "kind-wrong": '{"schema": "clustersim.measurements/1", "kind": "vibes", "meta": {}, '
                      '"records": []}',
        "binary": b"\x00\x01\x02\xff",
        "latin1": '{"schema": "caf\xe9"}'.encode("latin-1"),
        "empty": "",
    }  # fmt: skip
    out += [Case(f"measurements-{k}", fit, {"m.json": v}) for k, v in meas.items()]
    out.append(Case("fit-missing-file", fit))
    out.append(Case("fit-out-missing-dir", (*fit[:5], "--out", "{d}/no/p.yaml")))
    return out


def _fit_log_cases() -> list[Case]:
    """``calibrate fit`` on nccl-tests logs converted first: one rank, few points, bad fit."""
    fit = ("calibrate", "fit", "{d}/m.json", "--topology", "dgx-h100", "--out", "{d}/p.yaml")
    one_rank = _measurement_json(nccl_log(_GOOD_ROWS[:6], ranks=1))
    return [Case("fit-one-rank", fit, {"m.json": one_rank})]


def _measurement_json(log: str) -> str:
    from calibrate.measurements import measurements_to_dict
    from calibrate.nccl_tests import parse_nccl_tests
    from sim.files import dumps_json

    m = parse_nccl_tests(log, "x.log", created="2025-01-01T00:00:00Z")
    return dumps_json(measurements_to_dict(m))


def _calibrate_run_cases() -> list[Case]:
    """``calibrate collectives`` arguments refused before any process starts."""
    base = ("calibrate", "collectives", "--backend", "gloo", "--local", "2", "--ops",
            "all_reduce", "--out", "{d}/c.json")  # fmt: skip
    return [
        Case("coll-step-tiny", (*base, "-f", "1.0000001", "-b", "8", "-e", "16G")),
        Case("coll-step-nan", (*base, "-f", "nan")),
        Case("coll-step-inf", (*base, "-f", "inf")),
        Case("coll-timeout-neg", (*base, "--timeout", "-1")),
        Case("coll-timeout-nan", (*base, "--timeout", "nan")),
        Case("coll-iters-zero", (*base, "--iters", "0")),
        Case("coll-backend-bad", (*base, "--backend", "mpi")),
        Case("coll-op-bad", (*base[:6], "--ops", "all_sum", *base[8:])),
        Case("coll-bytes-bad", (*base, "-b", "lots")),
        Case("coll-bytes-1P-reversed", (*base, "-b", "1P", "-e", "8")),
        Case("coll-out-missing-dir", (*base[:8], "--out", "{d}/no/c.json")),
        Case("coll-out-empty", (*base[:8], "--out", "")),
        Case(
            "coll-resume-wrong-kind",
            (*base, "--resume"),
            {"c.json": _measurement_json(nccl_log(_GOOD_ROWS[:2]))},
        ),
        Case("coll-dtype-bad", (*base, "--dtype", "float128")),
    ]


# --- the other commands --------------------------------------------------------------------


def _collective_cases() -> list[Case]:
    c = ("collective", "--topology", "dgx-h100", "--network", "analytical", "--json")
    bad = {
        "b-1Pi": ("-b", "1Pi", "-e", "2P"), "f-tiny": ("-b", "8", "-e", "16G", "-f", "1.0000001"),
        "f-nan": ("-f", "nan"), "f-inf": ("-f", "inf"), "f-one": ("-f", "1"),
        "f-neg": ("-f", "-2"), "b-frac": ("-b", "8.5", "-e", "16"), "b-neg": ("-b", "-8"),
        "b-text": ("-b", "lots"), "e-1e400": ("-e", "1e400"), "b-gt-e": ("-b", "1M", "-e", "8"),
        "e-5000-digits": ("-e", "9" * 5000), "seed-neg": ("--seed", "-1"),
        "root-out": ("--op", "broadcast", "--root", "99", "-b", "8", "-e", "8"),
        "op-bad": ("--op", "all_sum"), "dtype-bad": ("--dtype", "float128"),
        "gpus-zero": ("--gpus", "0"), "gpus-neg": ("--gpus", "-3"),
        "gpus-too-many": ("--gpus", "9"), "sendrecv-one-gpu": ("--op", "send_recv", "--gpus", "1"),
        "algo-bad": ("--algo", "teleport"), "proto-bad": ("--protocol", "smoke"),
        "links-neg": ("--links", "-1"), "network-bad": ("--network", "packet"),
        "nodes-single-server": ("--nodes", "4"), "plot-missing-dir": ("--plot", "{d}/no/x.png"),
    }  # fmt: skip
    out = [Case(f"collective-{k}", (*c, *v)) for k, v in bad.items()]
    ib = (
        "collective",
        "--topology",
        "h100-ib-ndr",
        "--network",
        "analytical",
        "-b",
        "8",
        "-e",
        "8",
    )
    out.append(Case("collective-nodes-1e5", (*ib, "--nodes", "100000")))
    out.append(Case("collective-nodes-zero", (*ib, "--nodes", "0")))
    out.append(Case("collective-valid-1P", (*c, "-b", "1P", "-e", "2P"), status=0))
    out.append(Case("collective-valid", (*c, "-b", "8", "-e", "64K", "-f", "4"), status=0))
    out.append(
        Case("collective-valid-sendrecv", (*c, "--op", "send_recv", "-b", "8", "-e", "8"), status=0)
    )
    return out


def _run_output_cases() -> list[Case]:
    r = ("run", "llama3-8b-dgx", "--network", "analytical")
    return [
        Case("run-trace-empty", (*r, "--trace", "")),
        Case("run-trace-missing-dir", (*r, "--trace", "{d}/no/t.json")),
        Case("run-trace-is-dir", (*r, "--trace", "{d}")),
        Case("run-trace-long", (*r, "--trace", "{d}/" + "t" * 300 + ".json")),
        Case("run-plot-missing-dir", (*r, "--plot", "{d}/no/p.png")),
        Case("run-links-neg", (*r, "--links", "-1")),
        Case("run-network-bad", ("run", "llama3-8b-dgx", "--network", "packet")),
        Case("run-profile-missing", (*r, "--profile", "{d}/nope.yaml")),
        Case("run-valid-json", (*r, "--json"), status=0),
        Case(
            "run-valid-trace",
            (
                "run",
                "llama3-8b-dgx",
                "--set",
                "training.global_batch=8",
                "--trace",
                "{d}/t.json",
                "--json",
            ),
            status=0,
        ),
    ]


def _other_command_cases() -> list[Case]:
    study_ok = _STUDY.format(grid="{parallel.micro_batch: [1, 2]}")
    return [
        # A point the scenario refuses is a row with its reason, not a failed sweep.
        Case(
            "sweep-grid-frac",
            (
                "sweep",
                "llama3-8b-dgx",
                "--grid",
                "parallel.tp=1,2.5",
                "--network",
                "analytical",
                "--no-progress",
                "--json",
            ),
            status=0,
        ),
        Case(
            "sweep-grid-nan",
            (
                "sweep",
                "llama3-8b-dgx",
                "--grid",
                "price.gpu_hour_usd=.nan",
                "--no-progress",
                "--json",
            ),
        ),
        Case(
            "sweep-grid-huge",
            ("sweep", "llama3-8b-dgx", "--grid", "model.layers=" + "9" * 5000, "--no-progress"),
        ),
        Case("sweep-grid-bad", ("sweep", "llama3-8b-dgx", "--grid", "parallel.tp")),
        Case(
            "sweep-jobs-zero", ("sweep", "llama3-8b-dgx", "--grid", "parallel.tp=1", "--jobs", "0")
        ),
        Case(
            "sweep-out-missing-dir",
            ("sweep", "llama3-8b-dgx", "--grid", "parallel.tp=1", "--out", "{d}/no/s.csv"),
        ),
        Case(
            "sweep-out-bad-type",
            ("sweep", "llama3-8b-dgx", "--grid", "parallel.tp=1", "--out", "{d}/s.xls"),
        ),
        Case(
            "sweep-study-dup",
            ("sweep", "{d}/st.yaml", "--no-progress"),
            {"st.yaml": study_ok + "grid: {}\n"},
        ),
        Case(
            "sweep-study-valid",
            ("sweep", "{d}/st.yaml", "--network", "analytical", "--no-progress", "--json"),
            {"st.yaml": study_ok},
            0,
        ),
        Case("plan-gpus-zero", ("plan", "llama3-8b-dgx", "--gpus", "0")),
        Case("plan-gpus-neg", ("plan", "llama3-8b-dgx", "--gpus", "-8")),
        Case("plan-gpus-huge", ("plan", "llama3-8b-dgx", "--gpus", "100000000")),
        Case(
            "plan-price-nan", ("plan", "llama3-8b-dgx", "--gpus", "8", "--max-usd-per-hour", "nan")
        ),
        Case(
            "plan-price-neg", ("plan", "llama3-8b-dgx", "--gpus", "8", "--max-usd-per-hour", "-1")
        ),
        Case("plan-top-zero", ("plan", "llama3-8b-dgx", "--gpus", "8", "--top", "0")),
        Case("report-missing", ("report", "{d}/none.json", "--out", "{d}/r.html")),
        Case(
            "report-binary",
            ("report", "{d}/r.json", "--out", "{d}/r.html"),
            {"r.json": b"\x00\xff" * 10},
        ),
        Case(
            "report-latin1",
            ("report", "{d}/r.csv", "--out", "{d}/r.html"),
            {"r.csv": "a\ncaf\xe9\n".encode("latin-1")},
        ),
        Case(
            "report-nan-json",
            ("report", "{d}/r.json", "--out", "{d}/r.html"),
            {"r.json": '[{"step_time_s": NaN}]'},
        ),
        Case(
            "report-deep-json",
            ("report", "{d}/r.json", "--out", "{d}/r.html"),
            {"r.json": "[" * 100_000 + "]" * 100_000},
        ),
        Case(
            "report-huge-int",
            ("report", "{d}/r.json", "--out", "{d}/r.html"),
            {"r.json": "[" + "9" * 5000 + "]"},
        ),
        Case("report-type-bad", ("report", "{d}/r.xls", "--out", "{d}/r.html"), {"r.xls": "x"}),
        Case(
            "report-out-missing-dir",
            ("report", "{d}/r.json", "--out", "{d}/no/r.html"),
            {"r.json": "[]"},
        ),
        Case("schema-unknown", ("schema", "vibes")),
        Case("schema-valid", ("schema", "scenario"), status=0),
        Case("topologies-valid", ("topologies",), status=0),
        Case("topologies-show-unknown", ("topologies", "no-such-topology")),
        Case("no-command", ()),
        Case("unknown-command", ("teleport",)),
        Case(
            "calibrate-validate-missing",
            ("calibrate", "validate", "none", "{d}/m.json", "--topology", "dgx-h100"),
        ),
        Case(
            "calibrate-validate-min-bytes",
            (
                "calibrate",
                "validate",
                "none",
                "{d}/m.json",
                "--topology",
                "dgx-h100",
                "--min-bytes",
                "1P",
            ),
            {"m.json": _measurement_json(nccl_log(_GOOD_ROWS[:4]))},
        ),
        Case(
            "calibrate-validate-valid",
            ("calibrate", "validate", "none", "{d}/m.json", "--topology", "dgx-h100", "--json"),
            {"m.json": _measurement_json(nccl_log(_GOOD_ROWS[:4]))},
            0,
        ),
    ]


# --- round two (issue 23): YAML 1.1 surprises, roles, booleans, sizes, JSON, special files --

_COLL = ("collective", "--topology", "{d}/t.yaml", "-b", "8", "-e", "1K", "--network",
         "analytical", "--json")  # fmt: skip
_GOOD_TOPOLOGY = _TOPOLOGY.format(link="ib-ndr", over="1.0", node_extra="")


def _topology_variant(old: str, new: str) -> dict[str, str]:
    text = _GOOD_TOPOLOGY.replace(old, new, 1)
    assert text != _GOOD_TOPOLOGY, old
    return {"t.yaml": text}


def _yaml11_cases() -> list[Case]:
    """YAML 1.1's implicit types (sexagesimal 2:1, yes/no/on/off, octal 010, dates) reach
    the validators as the text written: refused where a number or a bool was meant; 1e9
    and 2e0 are numbers (YAML 1.1 read them as text)."""
    run = ("run", "llama3-8b-dgx", "--network", "analytical", "--json")
    out = [
        Case("yaml11-nodes-sexagesimal", _COLL, _topology_variant("nodes: 2", "nodes: 1:30")),
        Case("yaml11-p2p-no", _COLL, _topology_variant("nics: 8", "p2p: no, nics: 8")),
        Case("yaml11-pxn-on", _COLL, _topology_variant("nodes_per_leaf: 2", "nodes_per_leaf: 2, pxn: on")),
        Case("yaml11-set-sp-yes", (*run, "--set", "parallel.sp=yes")),
        Case("yaml11-set-batch-octal", (*run, "--set", "training.global_batch=010")),
        Case("yaml11-set-batch-ratio", (*run, "--set", "training.global_batch=2:1")),
        Case("yaml11-set-price-2e0", (*run, "--set", "price.gpu_hour_usd=2e0"), status=0),
        Case("yaml11-set-tokens-1e12", (*run, "--set", "training.tokens=1e12"), status=0),
        # every point refused: the sweep exits 2 (its rows keep each reason)
        Case("yaml11-grid-no", ("sweep", "llama3-8b-dgx", "--grid", "parallel.sp=no,off",
                                "--network", "analytical", "--no-progress", "--json")),
        Case("yaml11-profile-date", ("collective", "--topology", "dgx-h100", "--profile",
                                     "{d}/p.yaml", "-b", "8", "-e", "8"),
             {"p.yaml": _PROFILE + "provenance: {created: 2025-01-01}\n"}, status=0),
    ]  # fmt: skip
    return out


def _role_cases() -> list[Case]:
    """Link kinds in a role they cannot play; algorithms whose hardware is absent."""
    pcie_node = "{gpus: 8, fabric: pcie, pcie: pcie-gen5, pcie_switches: 2}"
    out = [
        Case(f"role-{cid}", _COLL, _topology_variant(old, new))
        for cid, (old, new) in {
            "ib-as-nvlink": ("nvlink: nvlink4", "nvlink: ib-ndr"),
            "pcie-as-nvlink": ("nvlink: nvlink4", "nvlink: pcie-gen5"),
            "nvlink-as-pcie": ("pcie: pcie-gen5", "pcie: nvlink4"),
            "roce-as-pcie": ("pcie: pcie-gen5", "pcie: roce-400g"),
            "pcie-as-nic": ("nic: ib-ndr", "nic: pcie-gen5"),
            "nvlink-as-nic": ("nic: ib-ndr", "nic: nvlink4"),
            "inline-roce-as-pcie": ("pcie: pcie-gen5", "pcie: {bandwidth: 50GB/s, latency: 1us, "
                                    "transport: roce}"),
        }.items()
    ]  # fmt: skip
    bridges = {
        "t.yaml": f"name: b\ngpu: H100-PCIe\nnode: {pcie_node[:-1]}, nvlink_bridges: roce-400g}}\n"
    }
    out.append(Case("role-roce-as-bridge", _COLL, bridges))
    override = _GOOD_TOPOLOGY + "overrides: [{match: 'n*.gpu0<->n*.nvswitch', kind: ib-ndr}]\n"
    out.append(Case("role-override-nvlink-to-ib", _COLL, {"t.yaml": override}))
    coll = ("collective", "-b", "8", "-e", "8", "--network", "analytical")
    out += [
        Case("algo-nvls-on-pcie", (*coll, "--topology", "h100-pcie-8", "--algo", "nvls")),
        Case("algo-nvls-tree-on-pcie", (*coll, "--topology", "h100-pcie-8", "--algo", "nvlstree")),
        Case("algo-collnet-without-sharp", (*coll, "--topology", "h100-ib-ndr", "--nodes", "2",
                                            "--algo", "collnet")),
        Case("algo-nvls-on-a100", (*coll, "--topology", "a100-ib-hdr", "--nodes", "1",
                                   "--algo", "nvls")),
        Case("algo-nvls-on-dgx-valid", (*coll, "--topology", "dgx-h100", "--algo", "nvls"),
             status=0),
        Case("algo-exclude-nvls-on-pcie-valid", (*coll, "--topology", "h100-pcie-8", "--algo",
                                                 "^nvls"), status=0),
        Case("algo-nccl-nvls-on-pcie", ("run", "llama3-8b-dgx", "--network", "analytical",
                                        "--set", "cluster.topology=h100-pcie-8",
                                        "--set", "parallel.nccl_algo=nvls")),
    ]  # fmt: skip
    return out


def _boolean_cases() -> list[Case]:
    """Booleans are never numbers, in any file."""
    out = [
        Case(f"bool-topology-{cid}", _COLL, _topology_variant(old, new))
        for cid, (old, new) in {
            "nodes": ("nodes: 2", "nodes: true"),
            "gpus": ("gpus: 8", "gpus: true"),
            "nic-bandwidth": ("nic: ib-ndr", "nic: ib-ndr, nic_bandwidth: true"),
            "oversubscription": ("oversubscription: 1.0", "oversubscription: true"),
            "nodes-per-leaf": ("nodes_per_leaf: 2", "nodes_per_leaf: false"),
            "inline-bandwidth": ("nic: ib-ndr", "nic: {kind: ib-ndr, bandwidth: true}"),
        }.items()
    ]  # fmt: skip
    fit = ("calibrate", "fit", "{d}/m.json", "--topology", "dgx-h100", "--out", "{d}/p.yaml")
    m = _measurement_json(nccl_log(_GOOD_ROWS[:4])).replace('"n_ranks": 8', '"n_ranks": true')
    out.append(Case("bool-measurement-n-ranks", fit, {"m.json": m}))
    prof = ("collective", "--topology", "dgx-h100", "--profile", "{d}/p.yaml", "-b", "8", "-e", "8")
    out.append(Case("bool-profile-chunk-bytes", prof,
                    {"p.yaml": _PROFILE + "collectives: {pipeline: {chunk_bytes: true}}\n"}))  # fmt: skip
    return out


def _size_cases() -> list[Case]:
    """Byte sizes are whole bytes and at least 1 (a bucket: 1 KiB)."""
    run = ("run", "llama3-8b-dgx", "--network", "analytical", "--json")
    out = [
        Case(f"size-bucket-{cid}", (*run, "--set", f"parallel.bucket_bytes={v}"))
        for cid, v in {"1.5": "1.5", "0.5": "0.5", "tiny": "1.0e-300", "bare-25": "25",
                       "half-KB": "0.5KB"}.items()
    ]  # fmt: skip
    out.append(
        Case("size-bucket-25MB-valid", (*run, "--set", "parallel.bucket_bytes=25MB"), status=0)
    )
    prof = ("collective", "--topology", "dgx-h100", "--profile", "{d}/p.yaml", "-b", "8", "-e", "8")
    for cid, body in {
        "chunk-0.3": "collectives: {pipeline: {chunk_bytes: 0.3}}\n",
        "chunk-1.5": "collectives: {pipeline: {chunk_bytes: 1.5}}\n",
        "slice-0.5": "collectives: {channels: {slice_bytes: 0.5}}\n",
    }.items():
        out.append(Case(f"size-profile-{cid}", prof, {"p.yaml": _PROFILE + body}))
    coll = ("calibrate", "collectives", "--backend", "gloo", "--local", "2", "--ops",
            "all_reduce", "--out", "{d}/c.json")  # fmt: skip
    out.append(Case("size-calibrate-b-1.5", (*coll, "-b", "1.5", "-e", "8")))
    out.append(Case("size-calibrate-e-0.5", (*coll, "-b", "1", "-e", "0.5")))
    out.append(Case("size-collective-1.5", ("collective", "--topology", "dgx-h100", "-b", "1.5")))
    return out


def _measurement(kind: str = "collectives", records: str = "[]") -> str:
    head = '{"schema": "clustersim.measurements/1", "kind": "' + kind + '", '
    return head + '"meta": {"source": "x", "created": "t"}, "records": ' + records + "}"


def _json_cases() -> list[Case]:
    """JSON files are as strict as YAML ones: duplicate keys, unknown dtypes, no records."""
    fit = ("calibrate", "fit", "{d}/m.json", "--topology", "dgx-h100", "--out", "{d}/p.yaml")
    good = _measurement_json(nccl_log(_GOOD_ROWS[:4]))
    dup = good.replace('"kind": "collectives"', '"kind": "compute", "kind": "collectives"', 1)
    float128 = good.replace('"dtype": "float32"', '"dtype": "float128"', 1)
    compute = _measurement("compute", "[]")
    comp_dtype = _measurement("compute", '[{"op": "gemm", "shape": [8, 8, 8], "dtype": "float99", '
                              '"flops": 1024.0, "bytes": 384.0, "time_s": 1e-6, "time_spread_s": '
                              'null, "achieved_flops_per_s": 1e9, "achieved_Bps": 1e8, "iters": 10, '
                              '"device": "cpu"}]')  # fmt: skip
    one = _measurement_json(nccl_log(_GOOD_ROWS[:6], ranks=1)).replace('"backend": "nccl"',
                                                                      '"backend": "gloo"')  # fmt: skip
    out = [
        Case("json-measurement-duplicate-key", fit, {"m.json": dup}),
        Case("json-measurement-unknown-dtype", fit, {"m.json": float128}),
        Case("json-compute-no-records", fit, {"m.json": compute}),
        Case("json-compute-unknown-dtype", fit, {"m.json": comp_dtype}),
        Case("json-gloo-one-rank", ("calibrate", "fit", "{d}/m.json", "--topology", "cpu-host",
                                    "--out", "{d}/p.yaml"), {"m.json": one}),
        Case("json-report-duplicate-key", ("report", "{d}/r.json", "--out", "{d}/r.html"),
             {"r.json": '[{"gpus": 8, "gpus": 16, "reason": "x"}]'}),
        Case("json-profile-duplicate-key", ("collective", "--topology", "dgx-h100", "--profile",
                                            "{d}/p.json", "-b", "8", "-e", "8"),
             {"p.json": '{"schema": "clustersim.profile/1", "name": "a", "name": "b"}'}),
        Case("json-profile-vector-dtype", ("collective", "--topology", "dgx-h100", "--profile",
                                           "{d}/p.yaml", "-b", "8", "-e", "8"),
             {"p.yaml": _PROFILE + "compute: {vector_dtype: fp64}\n"}),
    ]  # fmt: skip
    same = json.loads(_measurement_json(nccl_log(_GOOD_ROWS[:8], ranks=2)))
    for r in same["records"]:
        r.update(size_bytes=1024, count=256)
    out.append(Case("json-fit-one-size", ("calibrate", "fit", "{d}/m.json", "--topology",
                                          "cpu-host", "--out", "{d}/p.yaml", "--force"),
                    {"m.json": json.dumps(same)}))  # fmt: skip
    jsonl = '{"point": 0, "point": 1}\n'
    out.append(Case("json-sweep-resume-duplicate-key",
                    ("sweep", "gpt2-1gpu", "--grid", "parallel.micro_batch=1,2", "--network",
                     "analytical", "--no-progress", "--out", "{d}/s.jsonl", "--resume"),
                    {"s.jsonl": jsonl}))  # fmt: skip
    return out


def _calibrate_data_cases() -> list[Case]:
    """Counts >= 1, --local >= 2, and measurement files never silently replaced."""
    good = _measurement_json(nccl_log(_GOOD_ROWS[:4]))
    fit = ("calibrate", "fit", "{d}/m.json", "--topology", "dgx-h100", "--out", "{d}/p.yaml")
    coll = ("calibrate", "collectives", "--backend", "gloo", "--ops", "all_reduce",
            "-b", "1K", "-e", "1K", "--iters", "1", "--warmup", "0")  # fmt: skip
    imp = ("calibrate", "import-nccl-tests", "{d}/x.log", "--out", "{d}/m.json")
    log = {"x.log": nccl_log(_GOOD_ROWS[:4])}
    return [
        Case("cal-fit-gpus-zero", (*fit, "--gpus", "0"), {"m.json": good}),
        Case("cal-fit-nodes-zero", (*fit, "--nodes", "0"), {"m.json": good}),
        Case("cal-fit-nodes-neg", (*fit, "--nodes", "-1"), {"m.json": good}),
        Case("cal-fit-out-is-measurements", (*fit[:5], "--out", "{d}/m.json"), {"m.json": good}),
        Case("cal-local-one", (*coll, "--local", "1", "--out", "{d}/c.json")),
        Case("cal-local-zero", (*coll, "--local", "0", "--out", "{d}/c.json")),
        Case("cal-repeats-zero", (*coll, "--local", "2", "--repeats", "0", "--out", "{d}/c.json")),
        Case("cal-out-exists", (*coll, "--local", "2", "--out", "{d}/m.json"), {"m.json": good}),
        Case("cal-compute-out-exists", ("calibrate", "compute", "--device", "cpu", "--quick",
                                        "--out", "{d}/m.json"), {"m.json": good}),
        Case("cal-compute-statistic-mean", ("calibrate", "compute", "--device", "cpu", "--quick",
                                            "--statistic", "mean", "--out", "{d}/m.json")),
        Case("cal-compute-statistic-before-out", ("calibrate", "compute", "--device", "cpu",
                                                  "--statistic", "p10", "--out", "{d}/m.json"),
             {"m.json": good}),
        Case("cal-step-statistic-empty", ("calibrate", "step", "--device", "cpu", "--quick",
                                          "--statistic", "", "--out", "{d}/s.json")),
        Case("cal-import-out-exists", imp, {**log, "m.json": good}),
        Case("cal-import-out-exists-force", (*imp, "--force"), {**log, "m.json": good}, status=0),
        Case("cal-fit-trace-huge-int", (*fit[:2], "{d}/t.json", *fit[3:]),
             {"t.json": '{"traceEvents": [{"ph": "X", "dur": ' + "9" * 5000 + "}]}"}),
        Case("cal-fit-trace-nan", (*fit[:2], "{d}/t.json", *fit[3:]),
             {"t.json": '{"traceEvents": [{"ph": "X", "dur": NaN}]}'}),
        Case("cal-resume-other-ranks", (*coll, "--local", "2", "--resume", "--out", "{d}/m.json"),
             {"m.json": good.replace('"backend": "nccl"', '"backend": "gloo"')}),
    ]  # fmt: skip


def _special_file_cases() -> list[Case]:
    """Inputs that are not regular files; outputs that are devices, FIFOs, links, folders."""
    run = ("run", "gpt2-1gpu", "--network", "analytical")
    log = nccl_log(_GOOD_ROWS[:4])
    return [
        Case("special-scenario-fifo", ("run", "{d}/s.yaml"), special={"s.yaml": "fifo"}),
        Case("special-scenario-dev-zero", ("run", "/dev/zero")),
        Case("special-log-dev-zero", ("calibrate", "import-nccl-tests", "/dev/zero", "--out",
                                      "{d}/m.json")),
        Case("special-log-dev-urandom", ("calibrate", "import-nccl-tests", "/dev/urandom",
                                         "--out", "{d}/m.json")),
        Case("special-log-fifo", ("calibrate", "import-nccl-tests", "{d}/x.log", "--out",
                                  "{d}/m.json"), special={"x.log": "fifo"}),
        Case("special-fit-dev-zero", ("calibrate", "fit", "/dev/zero", "--topology", "dgx-h100",
                                      "--out", "{d}/p.yaml")),
        Case("special-fit-dev-urandom", ("calibrate", "fit", "/dev/urandom", "--topology",
                                         "dgx-h100", "--out", "{d}/p.yaml")),
        Case("special-report-fifo", ("report", "{d}/r.json", "--out", "{d}/r.html"),
             special={"r.json": "fifo"}),
        Case("special-trace-fifo-no-reader", (*run, "--trace", "{d}/f"), special={"f": "fifo"}),
        Case("special-trace-dev-null", (*run, "--trace", "/dev/null"), status=0),
        Case("special-trace-null-node", (*run, "--trace", "{d}/n"), special={"n": "null"},
             status=0),
        Case("special-trace-symlink", (*run, "--trace", "{d}/link.json"),
             special={"link.json": "link:real.json"}, status=0),
        Case("special-trace-dangling-link-dir", (*run, "--trace", "{d}/link.json"),
             special={"link.json": "link:nodir/real.json"}),
        Case("special-sweep-out-dev-null", ("sweep", "gpt2-1gpu", "--grid",
                                            "parallel.micro_batch=1,2", "--network", "analytical",
                                            "--no-progress", "--out", "/dev/null")),
        Case("special-sweep-out-dir", ("sweep", "gpt2-1gpu", "--grid", "parallel.micro_batch=1",
                                       "--no-progress", "--out", "{d}/o.csv"),
             special={"o.csv": "dir"}),
        Case("special-parts-dev-zero", ("compare", "gpt2-1gpu", "--variant", "a: seed=1",
                                        "--variant", "b: seed=2", "--parts", "/dev/zero")),
        Case("special-parts-fifo", ("compare", "gpt2-1gpu", "--variant", "a: seed=1",
                                    "--variant", "b: seed=2", "--parts", "{d}/p.yaml"),
             special={"p.yaml": "fifo"}),
        Case("special-step-trace-dir", ("calibrate", "step", "--device", "cpu", "--quick",
                                        "--out", "{d}/s.json", "--trace", "{d}/t"),
             special={"t": "dir"}),
        Case("special-step-trace-exists", ("calibrate", "step", "--device", "cpu", "--quick",
                                           "--out", "{d}/s.json", "--trace", "{d}/t.json"),
             {"t.json": "{}"}),
        Case("special-import-out-fifo", ("calibrate", "import-nccl-tests", "{d}/x.log", "--out",
                                         "{d}/f"), {"x.log": log}, special={"f": "fifo"}),
    ]  # fmt: skip


def _log_cases() -> list[Case]:
    """nccl-tests logs with absurd numbers and lines."""
    imp = ("calibrate", "import-nccl-tests", "{d}/x.log", "--out", "{d}/m.json")
    log = nccl_log(_GOOD_ROWS[:4])
    row = log.splitlines()[-1]
    return [
        Case("log-rank-prefix-4400-digits", imp, {"x.log": log + "9" * 4400 + ": " + row + "\n"}),
        Case("log-device-rank-300-digits", imp,
             {"x.log": log.replace("#  Rank  1 Group", "#  Rank  " + "7" * 300 + " Group")}),
        Case("log-5MB-line-valid", imp, {"x.log": log + "x" * 5_000_000 + "\n"}, status=0),
        Case("log-5MB-letters-before-perf", imp,
             {"x.log": log.replace("# nThread", "a" * 5_000_000 + "_perf\n# nThread")},
             status=0),
    ]  # fmt: skip


def _sweep_hygiene_cases() -> list[Case]:
    sweep = ("sweep", "gpt2-1gpu", "--network", "analytical", "--no-progress")
    values = ",".join(str(v) for v in range(1, 1001))
    return [
        Case("sweep-jobs-1000-capped", (*sweep, "--grid", "parallel.micro_batch=1,2", "--jobs",
                                        "1000", "--json"), status=0),
        Case("sweep-grid-million", (*sweep, "--grid", f"training.global_batch={values}",
                                    "--grid", f"seed={values}")),
        Case("sweep-jobs-text", (*sweep, "--grid", "parallel.micro_batch=1", "--jobs", "1e3")),
    ]  # fmt: skip


def _number_option_cases() -> list[Case]:
    """Numbers an option refuses by argparse: years that are not finite and > 0, ports."""
    cmp = ("compare", "gpt2-1gpu", "--variant", "a: seed=1", "--variant", "b: seed=2",
           "--network", "analytical", "--lifetime-years")  # fmt: skip
    show = ("topologies", "--show", "h100-ib-ndr", "--lifetime-years")
    out = [Case(f"compare-lifetime-{v}", (*cmp, v)) for v in ("nan", "-1", "0", "inf")]
    out += [Case(f"topologies-lifetime-{v}", (*show, v)) for v in ("nan", "0", "-inf")]
    out += [Case(f"explore-port-{v}", ("explore", "--no-browser", "--port", v))
            for v in ("-1", "65536", "99999999999999999999")]  # fmt: skip
    return out


def _cap_cases() -> list[Case]:
    """Counts whose cost the input decides: refused up front when too big (quick ones)."""
    run = ("run", "llama3-8b-dgx", "--network", "analytical")
    return [
        Case("cap-samples-1e9", (*run, "--set", "variability.compute_cv=0.03",
                                 "--samples", "1000000000")),
        Case("cap-samples-text", (*run, "--samples", "1e9")),
        Case("cap-simulate-runs-1e9", (*run, "--set", "training.tokens=1e12",
                                       "--set", "reliability.simulate_runs=1000000000")),
        Case("cap-tokens-1e16-interval-1", (*run, "--set", "training.tokens=1e16",
                                            "--set", "reliability.interval=1",
                                            "--set", "reliability.simulate_runs=2")),
        Case("cap-powersgd-rank-1e9", (*run, "--set", "parallel.zero=1", "--set",
                                       "parallel.grad_compression=powersgd",
                                       "--set", "parallel.powersgd_rank=1000000000")),
        Case("cap-powersgd-rank-above-hidden", (*run, "--set", "parallel.zero=1", "--set",
                                                "parallel.grad_compression=powersgd",
                                                "--set", "parallel.powersgd_rank=2048")),
        Case("cap-sync-every-1e15", (*run, "--set", "parallel.zero=0",
                                     "--set", "parallel.sync_every=1000000000000000")),
        Case("cap-collective-e-1e30", ("collective", "--topology", "dgx-h100", "-b", "1e30",
                                       "-e", "1e30")),
    ]  # fmt: skip


def all_cases() -> list[Case]:
    """Every case of the suite, ids unique."""
    cases = (
        _yaml_format_cases() + _set_cases() + _scenario_file_cases() + _topology_cases()
        + _profile_cases() + _calibrate_cases() + _fit_log_cases() + _calibrate_run_cases()
        + _collective_cases() + _run_output_cases() + _other_command_cases()
        + _yaml11_cases() + _role_cases() + _boolean_cases() + _size_cases() + _json_cases()
        + _calibrate_data_cases() + _special_file_cases() + _log_cases()
        + _sweep_hygiene_cases() + _number_option_cases() + _cap_cases()
    )  # fmt: skip
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    return cases


SHARED_LOG = SHARED_DATA / "nccl-tests" / "dgx-h100-1node-8gpu-all_reduce.txt"


def _big_run(cid: str, *sets: str, network: str = "analytical") -> Case:
    argv = ("run", "gpt3-175b-1024", "--network", network, "--json")
    return Case(cid, (*argv, *(x for item in sets for x in ("--set", item))), status=None)


def big_cases() -> list[Case]:
    """Valid-looking inputs at the simulator's scale limits: each must finish within the
    corpus's time and memory caps or be refused up front with an estimate (status None:
    either is right). Too slow for the in-process suite; the corpus runner runs them."""
    ib = ("collective", "--topology", "h100-ib-ndr", "--json")
    dp = ("run", "llama3-8b-dgx", "--network", "flow", "--set", "cluster.topology=h100-ib-ndr")
    return [
        _big_run("big-step-80k-analytical", "cluster.nodes=10000", "parallel.dp=1250",
                 "training.global_batch=120000"),
        _big_run("big-step-16k-3tier-analytical", "cluster.topology=h100-ib-ndr-3tier",
                 "cluster.nodes=2048", "parallel.dp=256", "training.global_batch=24576"),
        _big_run("big-step-16k-analytical", "cluster.nodes=2048", "parallel.dp=256",
                 "training.global_batch=24576"),
        _big_run("big-step-16k-flow", "cluster.nodes=2048", "parallel.dp=256",
                 "training.global_batch=24576", network="flow"),
        Case("big-dp-32k-flow", (*dp, "--set", "cluster.nodes=4096", "--set", "parallel.dp=32768",
                                 "--set", "training.global_batch=32768"), status=None),
        Case("big-collective-80k-1KiB", (*ib, "--nodes", "10000", "-b", "1K", "-e", "1K"),
             status=None),
        Case("big-collective-80k-1KiB-analytical", (*ib, "--nodes", "10000", "-b", "1K", "-e",
                                                    "1K", "--network", "analytical"), status=None),
        Case("big-collective-131k-1GiB", (*ib, "--nodes", "16384", "-b", "1G", "-e", "1G"),
             status=None),
        Case("big-collective-4k-sweep", (*ib, "--nodes", "512", "-b", "8", "-e", "1G"),
             status=None),
        Case("big-reliability-405b", ("run", "llama3-405b-16k", "--network", "analytical",
                                      "--set", "reliability.simulate_runs=100"), status=None),
        Case("big-plan-131k", ("plan", "gpt3-175b-1024", "--gpus", "131072", "--top", "3"),
             status=None),
        Case("big-topologies-show-131k-3tier", ("topologies", "--show", "h100-ib-ndr-3tier",
                                                "--nodes", "16384"), status=None),
        Case("big-compare-80k", ("compare", "gpt3-175b-1024", "--set", "cluster.nodes=10000",
                                 "--set", "parallel.dp=1250", "--set",
                                 "training.global_batch=120000", "--variant", "a: seed=1",
                                 "--variant", "b: seed=2", "--network", "analytical"),
             status=None),
        Case("big-chakra-export-80k", ("chakra", "export", "gpt3-175b-1024", "--set",
                                       "cluster.nodes=10000", "--set", "parallel.dp=1250",
                                       "--set", "training.global_batch=120000", "--out",
                                       "{d}/x"), status=None),
        Case("big-sweep-80k-points", ("sweep", "gpt3-175b-1024", "--grid", "cluster.nodes=1000,10000",
                                      "--network", "analytical", "--set", "parallel.dp=null",
                                      "--set", "training.global_batch=122880", "--no-progress",
                                      "--json"), status=None),
    ]  # fmt: skip
