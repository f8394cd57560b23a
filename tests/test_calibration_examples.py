"""The calibration recipes (docs/calibration.md, calibrate/examples/) cannot rot: the
Kubernetes manifest is valid and self-consistent, the Slurm script is valid bash with the
right torchrun rendezvous, every ``clustersim`` command in them parses, and both
rendezvous styles they use run here with two local torchrun agents over gloo."""

from __future__ import annotations

import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from calibrate.measurements import load_measurements
from sim.cli import _parser
from tests.helpers import REPO

EXAMPLES = REPO / "calibrate" / "examples"
SLURM = EXAMPLES / "slurm-calibrate.sbatch"
K8S = EXAMPLES / "k8s-calibrate.yaml"
DOC = REPO / "docs" / "calibration.md"


def joined_lines(text: str) -> list[str]:
    """Shell lines, comment markers stripped, backslash continuations joined."""
    bare = "\n".join(re.sub(r"^\s*#+ ?", "", line) for line in text.splitlines())
    return bare.replace("\\\n", " ").splitlines()


def clustersim_commands(text: str) -> list[list[str]]:
    """argv (after ``clustersim``) of every clustersim command line in ``text``; shell
    variables become ``2`` (they stand for counts, names and paths)."""
    out = []
    for line in joined_lines(text):
        if "clustersim " not in line or line.lstrip().startswith(("clustersim:", "- ")):
            continue
        cmd = line[line.index("clustersim ") :].split(" && ")[0]
        cmd = re.sub(r"\$\{?[A-Za-z_][A-Za-z_0-9#/]*\}?", "2", cmd)
        argv = shlex.split(cmd, comments=True)[1:]
        if argv and argv[0] in ("calibrate", "run", "collective"):
            out.append(argv)
    return out


def parses(argv: list[str]) -> bool:
    try:
        _parser(argv).parse_args(argv)
    except SystemExit:
        return False
    return True


def manifest() -> tuple[dict, dict]:
    docs = list(yaml.safe_load_all(K8S.read_text()))
    kinds = {d["kind"]: d for d in docs}
    assert sorted(kinds) == ["Job", "Service"]
    return kinds["Service"], kinds["Job"]


def test_kubernetes_job_runs_one_pod_per_node_with_static_rendezvous_at_pod_0() -> None:
    service, job = manifest()
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    script = container["args"][0].replace("\\\n", " ")
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == int(env["NNODES"])
    assert (
        service["spec"]["clusterIP"] == "None" and pod["subdomain"] == service["metadata"]["name"]
    )
    assert service["spec"]["selector"] == {"job-name": job["metadata"]["name"]}
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == int(env["GPUS_PER_NODE"])
    head = f"{job['metadata']['name']}-0.{service['metadata']['name']}"
    for flag in ('--nnodes="$NNODES"', '--nproc-per-node="$GPUS_PER_NODE"',
                 '--node-rank="$JOB_COMPLETION_INDEX"', f"--master-addr={head}",
                 f"--master-port={service['spec']['ports'][0]['port']}", "--no-python clustersim"):  # fmt: skip
        assert flag in script, flag
    assert "/out/collectives.json" in script and "/out/.copied" in script
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/out", "/dev/shm"} <= mounts


def test_slurm_script_is_valid_bash_with_c10d_rendezvous_on_the_first_node() -> None:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash not found: the Slurm script's syntax is not checked")
    assert subprocess.run([bash, "-n", str(SLURM)], capture_output=True).returncode == 0
    text = SLURM.read_text()
    assert "#SBATCH --ntasks-per-node=1" in text
    torchrun = next(
        line for line in joined_lines(text) if line.startswith("srun") and "torchrun" in line
    )
    for flag in ('--nnodes="$SLURM_JOB_NUM_NODES"', "--rdzv-backend=c10d",
                 '--rdzv-endpoint="$HEAD:$PORT"', '--rdzv-id="$SLURM_JOB_ID"', "--no-python clustersim"):  # fmt: skip
        assert flag in torchrun, flag
    assert "scontrol show hostnames" in text


@pytest.mark.parametrize("path", [SLURM, K8S, DOC], ids=lambda p: p.name)
def test_every_clustersim_command_parses(path: Path) -> None:
    commands = clustersim_commands(path.read_text())
    assert commands, f"no clustersim command found in {path}"
    bad = [" ".join(c) for c in commands if not parses(c)]
    assert not bad, bad
    verbs = {tuple(c[:2]) for c in commands}
    if path != DOC:
        assert ("calibrate", "collectives") in verbs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, timeout_s: float = 60.0) -> None:
    """Return once something listens on 127.0.0.1:``port`` (the rendezvous store)."""
    import time

    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"no rendezvous listening on port {port} after {timeout_s} s")


@pytest.mark.slow
@pytest.mark.parametrize("style", ["static", "c10d"])
def test_two_torchrun_agents_calibrate_as_two_nodes(style: str, tmp_path: Path) -> None:
    """The recipes' launch, here: two torchrun agents (two 'nodes', one rank each) meet at
    the rendezvous the Kubernetes Job (static) or the Slurm script (c10d) uses; rank 0
    writes one file with both ranks' times."""
    port, out = free_port(), tmp_path / "collectives.json"
    tool = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1"]
    cmd = ["--no-python", "clustersim", "calibrate", "collectives", "--backend", "gloo",
           "--ops", "all_reduce", "-b", "1K", "-e", "4K", "--iters", "2", "--warmup", "1",
           "--out", str(out)]  # fmt: skip
    if style == "static":
        agents = [[*tool, f"--node-rank={i}", "--master-addr=127.0.0.1", f"--master-port={port}"]
                  for i in (0, 1)]  # fmt: skip
    else:
        agents = [[*tool, "--rdzv-id=test", "--rdzv-backend=c10d",
                   f"--rdzv-endpoint=127.0.0.1:{port}"]] * 2  # fmt: skip
    bindir = str(Path(sys.executable).parent)
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    procs: list[subprocess.Popen[str]] = []
    try:
        for a in agents:  # the first agent hosts the rendezvous, as the head node does
            procs.append(subprocess.Popen([*a, *cmd], cwd=tmp_path, env=env, text=True,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT))  # fmt: skip
            if len(procs) == 1:
                wait_for_port(port)
        logs = [p.communicate(timeout=240)[0] for p in procs]
    finally:
        for p in procs:  # never leave an agent behind
            if p.poll() is None:
                p.kill()
                p.wait()
    assert all(p.returncode == 0 for p in procs), logs
    m = load_measurements(out)
    assert m.meta.world_size == 2 and [r.n_ranks for r in m.collectives] == [2, 2, 2]
