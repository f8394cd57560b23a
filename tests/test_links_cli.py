"""``--links N`` on ``run`` and ``collective``: the busiest links of a design, with what uses them."""

from __future__ import annotations

import re

import pytest

from sim.cli import main


def test_collective_lists_the_busiest_links_at_the_largest_size(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["collective", "--topology", "h100-ib-ndr", "--nodes", "2", "-b", "1M", "-e", "1G",
            "-f", "1024", "--network", "analytical", "--links", "3"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "# at 1073741824 B" in out and "busiest links (3 of " in out
    utils = [float(u) for u in re.findall(r"(\d+\.\d)%", out.split("busiest links")[1])]
    assert len(utils) == 3 and utils == sorted(utils, reverse=True) and 0 < utils[0] <= 100


def test_run_names_the_collectives_on_each_busy_link(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "llama2-70b-256-roce", "--links", "4"]) == 0
    text = capsys.readouterr().out.split("busiest links")[1]
    rows = [line for line in text.splitlines()[1:] if "->" in line]
    assert len(rows) == 4 and all("GB" in r and "(" in r for r in rows)
    assert any("dp " in r or "pp send" in r for r in rows)


def test_links_on_the_analytical_network_is_refused_with_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["run", "llama3-8b-dgx", "--links", "3", "--network", "analytical"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--links" in err and "--network flow" in err
    with pytest.raises(SystemExit) as stop:  # a count: argparse refuses it
        main(["collective", "--topology", "dgx-h100", "--links", "-1"])
    assert stop.value.code == 2
    assert "argument --links: -1 is not allowed" in capsys.readouterr().err
