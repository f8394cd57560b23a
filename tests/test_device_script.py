"""The lent-GPU script (calibrate/scripts/device_h100.sh) and its pieces, on this CPU.

The script runs on a GPU image that has torch and torchvision but neither pydantic nor
simpy, and nothing can be installed there. ``tests/device_stub`` reproduces that here:
its ``sitecustomize`` makes pydantic and simpy unimportable, and its ``torchvision``
stands in for the CUDA-only wheels (tiny models with torchvision's signatures). The slow
test runs the whole script's CPU dry run; the fast ones each piece.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from calibrate.stepjob import parse_config
from sim.errors import CalibrationError

ROOT = Path(__file__).resolve().parents[1]
STUB = ROOT / "tests" / "device_stub"
#: Switches the stub on (tests/device_stub/sitecustomize.py is inert without it).
STUB_ON = {"CLUSTERSIM_DEVICE_STUB": "1"}
SCRIPT = ROOT / "calibrate" / "scripts" / "device_h100.sh"
torch = pytest.importorskip("torch", reason="real runs need torch (clustersim[calibrate])")


def _bare(args: list[str], tmp: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``python args`` as on the GPU image: no pydantic, no simpy, stub torchvision."""
    env = {**os.environ, "PYTHONPATH": f"{STUB}{os.pathsep}{ROOT}", "OUT": str(tmp), **STUB_ON}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)  # fmt: skip


def test_the_stub_hides_pydantic_and_simpy(tmp_path: Path) -> None:
    r = _bare(["-c", "import pydantic"], tmp_path)
    assert r.returncode == 1 and "No module named 'pydantic'" in r.stderr


def test_measurements_are_saved_without_pydantic(tmp_path: Path) -> None:
    """A step job's file written where pydantic is absent loads here, checked."""
    from calibrate.measurements import load_measurements

    out = tmp_path / "s.json"
    r = _bare(["-m", "sim", "calibrate", "step", "--device", "cpu", "--steps", "1",
               "--config", "layers=1,hidden=16,heads=2,ffn_hidden=32,vocab=32,seq=8,batch=2",
               "--out", str(out)], tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert load_measurements(out).steps[0].model["layers"] == 1


def test_cnn_throughput_runs_each_model(tmp_path: Path) -> None:
    out = tmp_path / "cnn.json"
    r = _bare(["-m", "calibrate.cnn", "--device", "cpu", "--batch", "2", "--steps", "1",
               "--warmup", "0", "--out", str(out)], tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert [x["model"] for x in doc["runs"]] == ["resnet50", "vgg16", "inception_v3"]
    assert all(x["images_per_s"] > 0 and x["batch"] == 2 for x in doc["runs"])
    assert doc["runs"][2]["image"] == 299 and doc["torchvision_version"] == "stub"


def test_cnn_refuses_unknown_models(tmp_path: Path) -> None:
    r = _bare(["-m", "calibrate.cnn", "--device", "cpu", "--models", "alexnet", "--out",
               str(tmp_path / "c.json")], tmp_path)  # fmt: skip
    assert r.returncode == 2 and "alexnet" in r.stderr


def test_clocks_stream_writes_windows_and_a_summary(tmp_path: Path) -> None:
    out = tmp_path / "clocks.csv"
    r = _bare(["-m", "calibrate.clocks", "--device", "cpu", "--seconds", "0.3", "--n", "64",
               "--window", "2", "--out", str(out)], tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    lines = out.read_text().splitlines()
    assert lines[0].startswith("kind,t_s,tflops,clocks.sm") and lines[1].startswith("gemm,")
    summary = json.loads(lines[-1].removeprefix("# summary: "))
    assert summary["first_quarter_tflops"] > 0 and "nvidia-smi absent" in summary["note"]


def test_device_env_describes_the_machine(tmp_path: Path) -> None:
    out = tmp_path / "env.json"
    r = _bare(["-m", "calibrate.device_env", "--out", str(out)], tmp_path)
    assert r.returncode == 0, r.stderr
    env = json.loads(out.read_text())
    assert env["torch_version"] == torch.__version__ and env["cuda_available"] is False


def test_step_configs_parse_over_the_defaults() -> None:
    c = parse_config("layers=3, seq=64,dtype=bfloat16", "cuda", True)
    assert (c.layers, c.seq, c.dtype, c.hidden) == (3, 64, "bfloat16", 1024)
    with pytest.raises(CalibrationError, match="expected key=value with key one of layers"):
        parse_config("depth=3")
    with pytest.raises(CalibrationError, match="dtype 'float8' is unknown"):
        parse_config("dtype=float8")


@pytest.mark.slow
def test_the_whole_script_runs_dry_on_a_cpu(tmp_path: Path) -> None:
    """Every piece in the GPU image's conditions, at CPU sizes: none failed, and two files
    come back (the device tool brings at most 8): the log and every measurement, bundled."""
    import tarfile

    env = {**os.environ, "PYTHONPATH": str(STUB), "OUT": str(tmp_path), **STUB_ON}
    r = subprocess.run(["bash", str(SCRIPT), "cpu"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=3000, check=False)  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:]
    assert {p.name for p in tmp_path.iterdir()} == {"log.txt", "measurements.tar.gz"}
    with tarfile.open(tmp_path / "measurements.tar.gz") as tar:
        names = set(tar.getnames())
    steps = {f"step{s}{x}" for s in ("", "-8b", "-70b", "-175b", "-1b")
             for x in (".json", "_trace.json")}  # fmt: skip
    replays = {f"replay{s}.json" for s in ("", "-8b", "-70b", "-175b", "-1b")}
    power = {f"{p}-{s}.json" for p in ("power", "step-power") for s in ("1b", "8b")}
    titan = {"titan-flash.json", "titan-flash_trace.json", "power-titan.json",
             "titan-flash-8.json", "titan-full.json"}  # fmt: skip
    assert names == {"env.json", "compute.json", "clocks.csv", "cnn.json", "duty.json",
                     "duty-idle.json"} | steps | replays | power | titan  # fmt: skip
    log = (tmp_path / "log.txt").read_text()
    assert "== duty-fp8: skipped on cpu" in log and "== duty-idle-fp8: skipped on cpu" in log
    assert "== titan-cudnn: skipped on cpu" in log
    assert all(p.stat().st_size < 16 * 2**20 for p in tmp_path.iterdir())
    assert "device script: 0 piece(s) failed" in (tmp_path / "log.txt").read_text()


def test_the_script_runs_only_the_pieces_named(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(STUB), "OUT": str(tmp_path), **STUB_ON}
    r = subprocess.run(["bash", str(SCRIPT), "cpu", "env", "duty", "nonsense"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    log = (tmp_path / "log.txt").read_text()
    assert r.returncode == 1 and "device script: 1 piece(s) failed" in log
    assert "unknown piece 'nonsense'" in log and "== duty: exit 0" in log
    assert "== step" not in log and "== compute" not in log


def test_duty_sweep_and_replay_run_without_pydantic(tmp_path: Path) -> None:
    """The duty-cycle pieces on the GPU image's conditions: a sweep, and the GEMMs of a
    step trace replayed alone (CPU sizes)."""
    sweep, trace, replay = (tmp_path / n for n in ("d.json", "t.json", "r.json"))
    r = _bare(["-m", "calibrate.duty_cycle", "sweep", "--device", "cpu", "--seconds", "0.2",
               "--n", "64", "--pause", "0", "--duties", "1,0.5", "--out", str(sweep)], tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads(sweep.read_text())
    assert [p["target"] for p in doc["phases"]] == [1.0, 0.5]
    assert [p["k"] for p in doc["phases"]] == [0, 8] and doc["other"] == "memory"
    assert doc["phases"][1]["duty"] < doc["phases"][0]["duty"]
    r = _bare(["-m", "calibrate", "calibrate", "step", "--device", "cpu", "--steps", "1",
               "--trace-steps", "2", "--config",
               "layers=1,hidden=32,heads=2,ffn_hidden=64,vocab=64,seq=16,batch=2",
               "--trace", str(trace), "--out", str(tmp_path / "s.json")], tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = _bare(["-m", "calibrate.duty_cycle", "replay", str(trace), "--device", "cpu", "--iters",
               "16", "--pause", "0", "--out", str(replay)], tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads(replay.read_text())
    assert doc["steps"] == 2 and 0 < doc["duty"] < 1 and doc["gemms"]
    assert all(g["burst_s"] > 0 and g["stream_s"] > 0 and g["in_step_s"] > 0 for g in doc["gemms"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["sweep", "--device", "cpu", "--duties", "1,fast"], "--duties '1,fast': expected numbers"),
        (["sweep", "--device", "cpu", "--duties", "1.5"], "duty 1.5 must be in (0, 1]"),
        (
            ["sweep", "--device", "cpu", "--other", "sleep"],
            "other 'sleep' is unknown; allowed: memory, idle",
        ),
        (["replay", "missing.json", "--device", "cpu"], "missing.json"),
        (["replay", "x.json", "--device", "cpu", "--iters", "4"], "iters 4 must be at least 16"),
    ],
)
def test_duty_cycle_refuses_bad_input_in_one_line(tmp_path: Path, args: list[str],
                                                  message: str) -> None:  # fmt: skip
    r = _bare(["-m", "calibrate.duty_cycle", *args, "--out", str(tmp_path / "o.json")], tmp_path)
    assert r.returncode == 2 and message in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o.json").exists()
