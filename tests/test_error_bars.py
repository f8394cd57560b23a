"""Error bars that say what they cover (issue 21, part 7).

A RoCE run's collectives error bar comes from an 8-GPU NVLink log: the text says it covers
NVLink, and flags the network as uncalibrated; the compute model's error bar (its
validation on published step tables) is in the text output, with the share of the step
it covers.
"""

from __future__ import annotations

import pytest

from sim.cli import main


def _text(argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert main(argv) == 0
    return [x.lstrip("# ") for x in capsys.readouterr().out.splitlines() if "error bar" in x]


def test_a_roce_run_does_not_pass_an_nvlink_error_bar_off_as_the_network(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bars = _text(["run", "llama2-70b-256-roce", "--network", "analytical"], capsys)
    (coll,) = [b for b in bars if "collectives" in b]
    assert "covers nvlink (nvlink4), measured on 8 GPUs in 1 server(s)" in coll
    assert "net" not in coll.split("covers", 1)[1]
    assert any(
        b.startswith("error bar        network (roce-400g): none, UNCALIBRATED") for b in bars
    )


def test_the_compute_error_bar_is_in_the_text_with_its_share_of_the_step(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bars = _text(["run", "llama2-70b-256-ib", "--network", "analytical"], capsys)
    (comp,) = [b for b in bars if b.startswith("error bar        compute")]
    assert "±2.27% mean, ±13.8% max over 59 published step rows" in comp
    assert "covers the compute" in comp and "% of this step" in comp
    (coll,) = [b for b in bars if "collectives" in b]
    assert "covers net (ib-ndr), nvlink (nvlink4)" in coll
    assert not any("network" in b and "UNCALIBRATED" in b for b in bars)


def test_an_estimated_gpu_has_no_compute_error_bar(capsys: pytest.CaptureFixture[str]) -> None:
    bars = _text(["run", "gpt2-1gpu", "--network", "analytical", "--set",
                  "cluster.topology=h100-pcie-8", "--set", "parallel.dp=8",
                  "--set", "training.global_batch=64", "--profile", "none"], capsys)  # fmt: skip
    assert any("compute: none" in b and "estimates" in b for b in bars)
    assert any("UNCALIBRATED" in b for b in bars)


def test_collective_text_names_the_links_its_error_bar_covers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bars = _text(["collective", "--topology", "h100-roce-400g", "--nodes", "2", "-b", "1M",
                  "-e", "1M", "--network", "analytical"], capsys)  # fmt: skip
    assert any("covers nvlink (nvlink4)" in b for b in bars)
    assert any(
        b.startswith("error bar        network (roce-400g): none, UNCALIBRATED") for b in bars
    )
