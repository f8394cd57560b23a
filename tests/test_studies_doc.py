"""docs/studies.md cannot rot: its commands parse, and the studies and files it names exist."""

from __future__ import annotations

import re
import shlex

import pytest

from sim.cli import _parser
from sim.studies.grid import study_names
from tests.helpers import REPO

DOC = REPO / "docs" / "studies.md"


def commands() -> list[list[str]]:
    blocks = re.findall(r"```bash\n(.*?)```", DOC.read_text(), flags=re.S)
    out = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("#", 1)[0].strip()
            for part in line.split(";"):
                argv = shlex.split(part.split(">", 1)[0])
                if argv and argv[0] == "clustersim":
                    out.append(argv[1:])
    return out


@pytest.mark.parametrize("argv", commands(), ids=lambda a: " ".join(a)[:60])
def test_every_documented_command_parses(argv: list[str]) -> None:
    if argv == ["--version"]:
        return
    args = _parser(argv).parse_args(argv)
    assert callable(args.handler)


def test_named_studies_and_topologies_exist() -> None:
    text = DOC.read_text()
    shipped = set(study_names())
    for name in set(re.findall(r"studies/([a-z0-9-]+)", text)) - {"test_plan"}:
        assert (
            f"studies/{name}" in shipped
            or (REPO / "scenarios" / "studies" / f"{name}.yaml").exists()
        ), name
    topologies = {"p100-pcie-roce-25g", "p100-pcie-1", "h100-sxm-on-pcie-8", "h100-pcie-8"}
    assert topologies <= set(re.findall(r"`([a-z0-9-]+)`", text))
    for topo in topologies:
        assert (REPO / "topologies" / f"{topo}.yaml").exists(), topo
