"""The lessons cannot rot: every command in docs/lessons/*.md runs, in a fresh folder.

A lesson's commands run in order (a report reads the sweep before it); ``clustersim`` is
run as ``python -m sim`` from this checkout. Every lesson runs in the default (CI) run:
the longest two take 6 s and 10 s on a 2-core machine.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

LESSONS = sorted((REPO / "docs" / "lessons").glob("0*.md"))


def commands(path: Path) -> list[list[str]]:
    """The ``clustersim`` commands of a lesson's bash blocks (continuation lines joined)."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", path.read_text(), flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                out.append(shlex.split(line))
    return out


def test_there_are_five_lessons_each_with_commands() -> None:
    assert len(LESSONS) == 5
    index = (REPO / "docs" / "lessons" / "README.md").read_text()
    for path in LESSONS:
        assert f"({path.name})" in index
        assert commands(path) and all(c[0] == "clustersim" for c in commands(path))


@pytest.mark.parametrize(
    "path",
    [pytest.param(p, id=p.stem) for p in LESSONS],
)
def test_every_command_of_the_lesson_runs(path: Path, tmp_path: Path) -> None:
    if any(c[1] == "report" for c in commands(path)):
        pytest.importorskip("matplotlib", reason="clustersim report needs the [plot] extra")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for argv in commands(path):
        p = subprocess.run([sys.executable, "-m", "sim", *argv[1:]], cwd=tmp_path, env=env,
                           capture_output=True, text=True, check=False, timeout=900)  # fmt: skip
        assert p.returncode == 0, f"{' '.join(argv)}\n{p.stderr}"
        if "--out" in argv:
            assert (tmp_path / argv[argv.index("--out") + 1]).stat().st_size > 0
