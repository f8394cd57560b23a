"""benchmarks/fuzz_corpus.py counts outcomes right: the classification of a run, and a
few real cases under its caps."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from fuzz_cases import Case

from tests.helpers import REPO


def _corpus():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "fuzz_corpus", REPO / "benchmarks" / "fuzz_corpus.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fuzz_corpus"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "status, code, out, err, killed, kind",
    [
        (2, 2, "", "clustersim: error: bad\n", False, "clean refusal"),
        (2, 2, "", "usage: clustersim run\nclustersim run: error: argument\n", False, "clean refusal"),
        (2, 0, "ok\n", "", False, "silent accept"),
        (0, 2, "", "clustersim: error: no\n", False, "refused control"),
        (0, 0, "{}", "", False, "valid run"),
        (None, 2, "", "clustersim: error: would take about 50 s\n", False, "big refused"),
        (None, 0, "{}", "", False, "valid run"),
        (2, 1, "", "Traceback (most recent call last):\n  ...\nValueError\n", False, "traceback"),
        (2, -24, "", "", True, "hang"),
        (0, 2, "", "clustersim: error: ... (MemoryError)\n", False, "hang"),
        (2, 2, "", "clustersim: error: a\nb\nc\n", False, "messy"),
        (0, 0, '{"a": NaN}', "", False, "messy"),
    ],
)  # fmt: skip
def test_outcomes_are_classified(
    status: int | None, code: int, out: str, err: str, killed: bool, kind: str
) -> None:
    case = Case("c", ("run", "--json"), status=status)
    assert _corpus().classify(case, code, out, err, killed)[0] == kind


@pytest.mark.slow
def test_real_cases_under_the_caps() -> None:
    """A refusal and a valid run, each its own process under the caps, as the corpus runs them."""
    corpus = _corpus()
    refused = Case("r", ("run", "/nonexistent.yaml"))
    valid = Case("v", ("schema", "profile"), status=0)
    assert corpus.run_case(refused, 20, 3 * 2**30, 200).kind == "clean refusal"
    assert corpus.run_case(valid, 20, 3 * 2**30, 200).kind == "valid run"
