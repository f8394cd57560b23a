"""A report a student can read: per study, scaling per model with the ideal line and the
efficiency, where the time goes per point, memory against capacity, a sentence read from
the numbers under each figure, and a glossary."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from sim.report import load_results
from sim.report.captions import (
    StudyPoint,
    breakdown_sentence,
    memory_sentence,
    rate_text,
    scaling_sentence,
    seconds_text,
)
from sim.report.loaders import ResultSet
from sim.report.page import report_html
from sim.report.series import ScalingSeries, facet_key, scaling_series
from sim.report.study import study_points
from sim.studies.grid import sweep_spec
from sim.studies.runner import run_sweep

pytest.importorskip("matplotlib", reason="reports need the [plot] extra")

SIX = ["cluster.topology=h100-ib-ndr,h100-tcp-100g", "cluster.nodes=1,2,4"]
SETS = ["parallel.dp=null", "network=analytical"]


class Figures(HTMLParser):
    """Each <figure>: its kind, whether it was drawn, its panel titles and its sentence."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.figures: list[dict[str, object]] = []
        self._in_finding = False
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "figure":
            self.figures.append({"kind": a.get("data-figure"), "drawn": "skipped" not in
                                 (a.get("class") or ""), "finding": ""})  # fmt: skip
        self._in_finding = tag == "p" and a.get("class") == "finding"

    def handle_data(self, data: str) -> None:
        if self._in_finding:
            self.figures[-1]["finding"] = str(self.figures[-1]["finding"]) + data

    def handle_endtag(self, tag: str) -> None:
        if tag == "p":
            self._in_finding = False


@pytest.fixture(scope="module")
def six(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("six") / "six.csv"
    run_sweep(sweep_spec("llama3-8b-dgx", SIX, SETS), out, progress=False)
    return out


def test_a_six_point_sweep_report_has_scaling_breakdown_and_memory(six: Path) -> None:
    """The issue's test: at least three figures, one of them the stacked breakdown, each
    with a sentence; the glossary is there."""
    html = report_html([load_results(six)])
    figs = Figures(html).figures
    assert [(f["kind"], f["drawn"]) for f in figs] == [
        ("scaling", True),
        ("breakdown", True),
        ("memory", True),
    ]
    assert all(f["finding"] for f in figs)
    assert 'id="glossary"' in html and "<dt>scaling efficiency</dt>" in html


def test_the_breakdown_sentence_quotes_the_rows(six: Path) -> None:
    """At 32 GPUs the biggest part besides compute is read from the rows themselves."""
    rows = load_results(six).records
    top = [r for r in rows if r.ok and r.gpus == 32]
    share, key, row = max(
        (v / r.step_time_s, k, r) for r in top for k, v in r.breakdown.items() if k != "compute"
    )
    sentence = breakdown_sentence(study_points(rows))
    assert sentence.startswith("At 32 GPUs (topology=")
    assert f"is {share:.0%} of the {seconds_text(row.step_time_s)} step" in sentence
    assert key == "dp_comm_exposed" and "exposed DP communication" in sentence


def test_units_fit_the_numbers() -> None:
    assert [seconds_text(x) for x in (2e-6, 0.5, 1.0, 12.34)] == ["2 µs", "500 ms", "1 s", "12.3 s"]
    assert [rate_text(x) for x in (12.0, 1520.0, 3.3e6, 4e9)] == ["12", "1.52k", "3.3M", "4G"]


def _series(
    label: str, gpus: tuple[int, ...], tps: tuple[float, ...], facet: str = ""
) -> ScalingSeries:
    ideal = tuple(tps[0] * g / gpus[0] for g in gpus)
    return ScalingSeries(
        label, gpus, tps, (1.0,) * len(gpus), ideal, (1.0,) * len(gpus), facet=facet
    )


def test_the_scaling_sentence_names_the_best_and_worst_series() -> None:
    s = [_series("ib", (8, 64), (800.0, 6080.0)), _series("tcp", (8, 64), (800.0, 3200.0))]
    assert scaling_sentence(s) == (
        "At 64 GPUs ib keeps 95% of its throughput per GPU at 8 GPUs; tcp keeps 50% at 64 GPUs."
    )
    assert "no scaling" in scaling_sentence([_series("x", (8,), (800.0,))])


def test_the_memory_sentence_counts_what_does_not_fit() -> None:
    gib = 2.0**30

    def point(mem: float, fits: bool) -> StudyPoint:
        return StudyPoint(
            "", "", "x", 8, 1.0, {}, {"activations": mem * gib}, mem * gib, 80 * gib, fits
        )

    text = memory_sentence([point(10.0, True), point(90.0, False)])
    assert text == (
        "The fullest GPU holds 10.0 to 90.0 GiB of 80 GiB; the largest part is activations; "
        "1 point does not fit."
    )


def test_models_get_a_panel_each_and_series_only_their_other_keys() -> None:
    labels = [
        "model.preset=vgg16, parallel.overlap_dp=true",
        "model.preset=resnet50, parallel.overlap_dp=true",
    ]
    assert facet_key(labels) == "model.preset"
    assert facet_key(["topology=a", "topology=b"]) is None  # few series: one panel


def _study_figures(rs: ResultSet) -> tuple[list[ScalingSeries], list[dict[str, object]]]:
    return scaling_series(rs.records), Figures(report_html([rs])).figures


def test_horovod_draws_one_axis_per_model_with_its_one_gpu_baseline(tmp_path: Path) -> None:
    """Horovod's 36 points: three panels (one per model), two series each (overlap on and
    off) that start at the 1-GPU point (a case on another topology, joined to its curve),
    throughput in images/s."""
    out = tmp_path / "horovod.csv"
    run_sweep(sweep_spec("studies/horovod"), out, progress=False)
    series, figs = _study_figures(load_results(out))
    assert [s.facet for s in series] == ["inception-v3"] * 2 + ["resnet101"] * 2 + ["vgg16"] * 2
    assert {s.label for s in series} == {"overlap_dp=true", "overlap_dp=false"}
    assert all(s.gpus == (1, 4, 16, 64, 256, 512) and s.unit == "images/s" for s in series)
    vgg = {s.label: s.efficiency[-1] for s in series if s.facet == "vgg16"}
    assert vgg["overlap_dp=false"] < vgg["overlap_dp=true"] < 1.0
    assert [f["kind"] for f in figs if f["drawn"]] == ["scaling", "breakdown", "memory"]
    html = report_html([load_results(out)])
    for title in ("inception-v3", "resnet101", "vgg16", "throughput (images/s)"):
        assert f"<!-- {title} -->" in html
    assert not re.search(r"<!-- [^>]*horovod\.csv: cluster\.topology=", html)


@pytest.mark.slow
def test_horovod_and_cnn_report_reads_per_model(tmp_path: Path) -> None:
    """The two CNN studies in one report: each its own section, one panel per model."""
    sets = []
    for name in ("horovod", "dp-scaling-cnn"):
        out = tmp_path / f"{name}.csv"
        run_sweep(sweep_spec(f"studies/{name}"), out, progress=False)
        sets.append(load_results(out))
    facets = [sorted({s.facet for s in scaling_series(rs.records)}) for rs in sets]
    assert facets == [["inception-v3", "resnet101", "vgg16"], ["resnet50", "vgg16"]]
    figs = Figures(report_html(sets)).figures
    assert [f["kind"] for f in figs if f["drawn"]] == ["scaling", "breakdown", "memory"] * 2
