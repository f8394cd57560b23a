"""Faults: kills, Ctrl-C, concurrent runs, full disks and special files never lose data.

Each test starts the real command line (``python -m sim``) or calls the writer it checks,
provokes one fault and checks what is left: the output as the user meant it or a
one-line refusal, every row or record finished before the fault still there, no worker
left running, no temporary file left behind.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sim.errors import ConfigError
from sim.files import write_atomic
from sim.locks import output_lock
from tests.helpers import REPO

# 24 points on the flow network, ~0.3 s each on one core (as tests/test_sweep.py's kill test)
SLOW = [
    "gpt2-1gpu",
    "--grid", "cluster.topology=dgx-h100",
    "--grid", "parallel.micro_batch=1,2,4,8",
    "--grid", "parallel.recompute=none,selective,full",
    "--grid", "training.seq_len=1024,512",
    "--set", "parallel.dp=8",
    "--set", "training.global_batch=64",
    "--network", "flow",
    "--no-progress",
]  # fmt: skip
QUICK = ["gpt2-1gpu", "--grid", "parallel.micro_batch=1,2,4,8", "--network", "analytical",
         "--no-progress"]  # fmt: skip


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def _sim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sim", *args], cwd=REPO, capture_output=True, text=True,
        env=_env(), timeout=300,
    )  # fmt: skip


def _start_sweep(out: Path, *extra: str) -> subprocess.Popen[str]:
    """A sweep in its own session with Ctrl-C delivered as a terminal would (not ignored)."""
    return subprocess.Popen(
        [sys.executable, "-m", "sim", "sweep", *SLOW, "--out", str(out), *extra],
        cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip


def _wait_rows(out: Path, rows: int, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        if out.exists() and out.read_text().count("\n") >= rows + 1:  # header + rows
            return
        time.sleep(0.05)
    raise AssertionError(f"no {rows} rows in {out} (exit {proc.poll()})")


def _children(pid: int) -> list[int]:
    text = subprocess.run(["ps", "--ppid", str(pid), "-o", "pid="], capture_output=True, text=True)
    return [int(x) for x in text.stdout.split()]


def _running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (exited, waiting to be reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _gone_within(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(_running(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc (Linux)")


# --- sweeps: Ctrl-C, kill -9, two writers, resume checks -------------------------------


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_ctrl_c_stops_a_sweep_at_once_keeping_its_rows(tmp_path: Path, jobs: str) -> None:
    """Ctrl-C: exit 130 within seconds, one line saying what is kept, no traceback, the
    rows finished so far whole in the file, no worker left; --resume then finishes it."""
    out = tmp_path / "s.csv"
    proc = _start_sweep(out, "--jobs", jobs)
    _wait_rows(out, 3, proc)
    workers = _children(proc.pid)
    os.killpg(proc.pid, signal.SIGINT)  # the terminal sends it to the whole group
    t0 = time.monotonic()
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - t0 < 10
    assert proc.returncode == 130, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    rows = out.read_text().count("\n") - 1
    assert f"{rows} of 24 points are in" in err and "--resume" in err
    assert _gone_within(workers, 5)
    done = _sim("sweep", *SLOW, "--out", str(out), "--resume")
    assert done.returncode == 0, done.stderr
    assert out.read_text().count("\n") == 25


def test_a_killed_sweep_leaves_no_worker_running(tmp_path: Path) -> None:
    """kill -9 of the sweep (no handler runs): its workers notice and end by themselves."""
    out = tmp_path / "s.csv"
    proc = _start_sweep(out, "--jobs", "2")
    _wait_rows(out, 2, proc)
    workers = [p for p in _children(proc.pid) if "spawn_main" in _cmdline(p)]
    assert workers, "no worker processes found"
    proc.kill()
    proc.wait()
    assert _gone_within(workers, 5)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    except FileNotFoundError:
        return ""


def test_a_second_sweep_on_a_locked_out_is_refused_naming_the_holder(tmp_path: Path) -> None:
    """While a run holds --out, a sweep on it exits 2 at once naming the holder's pid."""
    out = tmp_path / "s.csv"
    with output_lock(out, "--out"):
        p = _sim("sweep", *QUICK, "--out", str(out))
    assert p.returncode == 2
    assert f"pid {os.getpid()}" in p.stderr and "another run" in p.stderr
    assert not out.exists()


def test_two_sweeps_started_together_on_one_out_do_not_mix(tmp_path: Path) -> None:
    """Two different sweeps on one file: one writes all its rows, the other is refused
    (held, or the file exists by then); never both "rows written" with rows lost."""
    out = tmp_path / "s.csv"
    first = _start_sweep(out)
    other = [*QUICK, "--out", str(out)]
    second = subprocess.Popen(
        [sys.executable, "-m", "sim", "sweep", *other], cwd=REPO, env=_env(),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    codes = sorted([first.wait(timeout=300), second.wait(timeout=300)])
    assert codes == [0, 2]
    lines = out.read_text().splitlines()
    winner_rows = 24 if first.returncode == 0 else 4
    assert len(lines) == winner_rows + 1
    assert not list(tmp_path.glob(".*.lock"))


def test_the_lock_is_released_when_its_holder_dies(tmp_path: Path) -> None:
    """A stale lock file (its holder was killed) does not block the next run."""
    out = tmp_path / "s.csv"
    proc = _start_sweep(out)
    _wait_rows(out, 1, proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    with output_lock(out, "--out"):  # flock died with its holder
        pass


def test_resume_refuses_a_damaged_row_naming_it(tmp_path: Path) -> None:
    """A short row in the middle of the file (not a cut last line) is named, not read as
    blank metrics; so is a row whose metrics are not a row's."""
    out = tmp_path / "s.csv"
    assert _sim("sweep", *QUICK, "--out", str(out)).returncode == 0
    lines = out.read_text().splitlines()
    short = [*lines[:2], lines[2].rsplit(",", 3)[0], *lines[3:4]]
    out.write_text("\n".join(short) + "\n")
    p = _sim("sweep", *QUICK, "--out", str(out), "--resume")
    assert p.returncode == 2 and "line 3 has" in p.stderr
    width = len(lines[0].split(","))  # a row of the file's width whose metrics are blank
    blank = [*lines[:2], ",".join(lines[2].split(",")[:3]) + "," * (width - 3), *lines[3:4]]
    out.write_text("\n".join(blank) + "\n")
    p = _sim("sweep", *QUICK, "--out", str(out), "--resume")
    assert p.returncode == 2 and "row 2 (point 1) is damaged" in p.stderr, p.stderr


def test_resume_refuses_two_different_rows_of_one_point(tmp_path: Path) -> None:
    """The same point twice with different metrics (two sweeps wrote it) is refused; the
    same row twice is kept once."""
    out = tmp_path / "s.jsonl"
    assert _sim("sweep", *QUICK, "--out", str(out)).returncode == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    twice = [*rows[:2], rows[1]]
    out.write_text("".join(json.dumps(r) + "\n" for r in twice))
    assert _sim("sweep", *QUICK, "--out", str(out), "--resume").returncode == 0
    other = {**rows[1], "step_time_s": rows[1]["step_time_s"] * 2}
    out.write_text("".join(json.dumps(r) + "\n" for r in [*rows[:2], other]))
    p = _sim("sweep", *QUICK, "--out", str(out), "--resume")
    assert p.returncode == 2 and "point 1 is written twice" in p.stderr


def test_jobs_are_capped_at_the_cpus(tmp_path: Path) -> None:
    """--jobs 1000 on a small machine starts at most one worker per CPU, and says so."""
    from sim.studies.workers import usable_cpus

    p = _sim("sweep", *QUICK, "--jobs", "1000")
    assert p.returncode == 0, p.stderr
    assert f"--jobs 1000 capped at {usable_cpus()}" in p.stderr


def test_a_huge_grid_is_refused_before_listing_its_points() -> None:
    """10^6 points: refused in well under a second, naming the cap."""
    from sim.studies.grid import sweep_spec
    from sim.studies.runner import run_sweep

    values = ",".join(str(v) for v in range(1, 1001))
    spec = sweep_spec("gpt2-1gpu", [f"training.global_batch={values}", f"seed={values}"])
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match="1,000,000 points; at most 100,000"):
        run_sweep(spec, progress=False)
    assert time.monotonic() - t0 < 1.0


# --- outputs: special files and full disks ----------------------------------------------


def test_a_device_node_output_is_written_through_not_replaced(tmp_path: Path) -> None:
    """``--trace n`` where ``n`` is a copy of /dev/null: still a device afterwards."""
    node = tmp_path / "n"
    try:
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("mknod needs root")
    p = _sim("run", "gpt2-1gpu", "--network", "analytical", "--trace", str(node))
    assert p.returncode == 0, p.stderr
    assert stat.S_ISCHR(node.stat().st_mode)
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_fifo_output_without_reader_is_refused_and_kept(tmp_path: Path) -> None:
    """A FIFO nobody reads: one line, the FIFO is still there (not replaced, no hang)."""
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    p = _sim("run", "gpt2-1gpu", "--network", "analytical", "--trace", str(fifo))
    assert p.returncode == 2 and "FIFO with no reader" in p.stderr
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_a_fifo_with_a_reader_gets_the_output(tmp_path: Path) -> None:
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    time.sleep(0.2)  # cat opens the FIFO
    write_atomic(fifo, "hello\n", "--trace")
    assert reader.communicate(timeout=10)[0] == b"hello\n"
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_a_symlink_output_replaces_its_target_and_keeps_the_link(tmp_path: Path) -> None:
    target = tmp_path / "real.json"
    target.write_text("old\n")
    link = tmp_path / "latest.json"
    link.symlink_to(target.name)
    write_atomic(link, "new\n", "--out")
    assert link.is_symlink() and target.read_text() == "new\n"


@pytest.mark.parametrize("kind", ["folder", "socket"])
def test_outputs_that_cannot_hold_a_file_are_refused(tmp_path: Path, kind: str) -> None:
    import socket

    path = tmp_path / "x"
    if kind == "folder":
        path.mkdir()
    else:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
    with pytest.raises(ConfigError, match=f"is a {kind}"):
        write_atomic(path, "x", "--out")


@pytest.mark.parametrize("reader", ["/dev/zero", "fifo", "folder"])
def test_inputs_that_are_not_regular_files_are_refused_by_what_they_are(
    tmp_path: Path, reader: str
) -> None:
    """A FIFO or /dev/zero as an input: refused at once, named as what it is (it was
    'not found', or read until memory ran out)."""
    path = Path(reader)
    words = {"/dev/zero": "a character device", "fifo": "a FIFO", "folder": "a folder"}[reader]
    if reader == "fifo":
        path = tmp_path / "f"
        os.mkfifo(path)
    elif reader == "folder":
        path = tmp_path
    for argv in (
        ["run", str(path)],
        ["calibrate", "import-nccl-tests", str(path), "--out", str(tmp_path / "m.json")],
        [
            "calibrate",
            "fit",
            str(path),
            "--topology",
            "dgx-h100",
            "--out",
            str(tmp_path / "p.yaml"),
        ],
    ):
        p = _sim(*argv)
        assert p.returncode == 2 and words in p.stderr, (argv, p.stderr)


def test_a_full_disk_during_a_sweep_keeps_the_rows_already_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills after two rows: the sweep fails with one line, the two rows stay,
    and --resume finishes it once there is room."""
    from sim.studies import files
    from sim.studies.grid import sweep_spec
    from sim.studies.runner import run_sweep

    spec = sweep_spec("gpt2-1gpu", ["parallel.micro_batch=1,2,4,8", "network=analytical"])
    out = tmp_path / "s.csv"
    real = files.RowFile.append
    calls = {"n": 0}

    class FullDisk:
        def write(self, text: str) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def close(self) -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def append(self: files.RowFile, row: dict) -> None:
        calls["n"] += 1
        if calls["n"] == 3:  # the disk fills: the open stream's writes fail from now on
            self._file.close()  # type: ignore[union-attr]
            self._file = FullDisk()  # type: ignore[assignment]
        real(self, row)

    monkeypatch.setattr(files.RowFile, "append", append)
    with pytest.raises(ConfigError, match=r"cannot write a row \(No space left on device"):
        run_sweep(spec, out, progress=False)
    assert out.read_text().count("\n") == 3
    monkeypatch.setattr(files.RowFile, "append", real)
    rows = run_sweep(spec, out, resume=True, progress=False)
    assert [r["point"] for r in rows] == [0, 1, 2, 3]
    assert not list(tmp_path.glob(".*"))


# --- calibration: a killed run keeps its records -----------------------------------------


@pytest.mark.slow
def test_a_killed_calibration_keeps_its_records_and_resume_finishes_it(tmp_path: Path) -> None:
    """kill -9 of a real gloo run (2 ranks) after some sizes: --out holds them whole (it
    is rewritten atomically per size), and --resume measures only the rest."""
    pytest.importorskip("torch")
    from calibrate.measurements import load_measurements

    out = tmp_path / "c.json"
    argv = ["calibrate", "collectives", "--backend", "gloo", "--local", "2", "--ops",
            "all_reduce", "-b", "1K", "-e", "16M", "--iters", "3", "--warmup", "0"]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "sim", *argv, "--out", str(out)], cwd=REPO, env=_env(),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 240
    seen = 0
    while time.monotonic() < deadline and proc.poll() is None:
        if out.exists():
            seen = len(load_measurements(out).records)
            if seen >= 2:
                break
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert seen >= 2, "the run ended before it could be killed mid-way"
    kept = load_measurements(out).records
    assert len(kept) >= seen
    p = _sim(*argv, "--out", str(out), "--resume")
    assert p.returncode == 0, p.stderr
    done = load_measurements(out).records
    assert len(done) == 15  # 1 KiB .. 16 MiB
    assert set(kept) <= set(done)
