"""The HTML report and single figures: structure, self-containment, valid SVG, determinism."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest

pytest.importorskip(
    "matplotlib", reason="plots need the [plot] extra: pip install 'clustersim[plot]'"
)

from sim.errors import ConfigError
from sim.report import ResultSet, load_results, plot_for, render_report, report_html
from tests.helpers import REPO
from tests.report_inputs import collective_dicts, plan_dicts, run_dicts, sweep_rows

SVG_NS = "{http://www.w3.org/2000/svg}"
XLINK = "{http://www.w3.org/1999/xlink}href"


class Page(HTMLParser):
    """Figures (kind, skipped?, note text), tables (name -> body rows) and every URL attribute."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.figures: list[dict[str, object]] = []
        self.tables: dict[str, list[list[str]]] = {}
        self.urls: list[str] = []
        self.ids: list[str] = []
        self.tags: set[str] = set()
        self._table: str | None = None
        self._in_body = False
        self._cell: list[str] | None = None
        self._figure: dict[str, object] | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.add(tag)
        self.urls += [
            v or "" for k, v in attrs if k in ("src", "href", "xlink:href", "action", "poster")
        ]
        if "id" in a:
            self.ids.append(a["id"] or "")
        if tag == "figure":
            self._figure = {
                "kind": a.get("data-figure"),
                "skipped": "skipped" in (a.get("class") or ""),
                "text": "",
            }
            self.figures.append(self._figure)
        elif tag == "svg" and self._figure is not None:
            self._figure["svg"] = True
        elif tag == "table":
            self._table = a.get("data-table")
            self.tables[self._table or ""] = []
        elif tag == "tbody":
            self._in_body = True
        elif tag == "tr" and self._in_body and self._table is not None:
            self.tables[self._table].append([])
        elif tag == "td" and self._in_body:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None and self._table is not None:
            self.tables[self._table][-1].append("".join(self._cell))
            self._cell = None
        elif tag == "tbody":
            self._in_body = False
        elif tag == "figure":
            self._figure = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        if self._figure is not None:
            self._figure["text"] = str(self._figure["text"]) + data


@pytest.fixture(scope="module")
def files(result_files: list[Path]) -> list[Path]:
    return result_files


@pytest.fixture(scope="module")
def report(report_file: Path) -> Path:
    return report_file


@pytest.fixture(scope="module")
def page(report: Path) -> Page:
    return Page(report.read_text())


def test_every_figure_is_drawn(page: Page) -> None:
    """Runs: breakdown, memory, links; plans: breakdown, memory; the sweep: scaling,
    breakdown and memory per point; collectives."""
    kinds = [(f["kind"], f["skipped"], f.get("svg", False)) for f in page.figures]
    expected = ["breakdown", "memory", "links", "breakdown", "memory", "scaling", "breakdown",
                "memory", "busbw"]  # fmt: skip
    assert kinds == [(k, False, True) for k in expected]


def test_tables_have_one_row_per_record(page: Page, files: list[Path]) -> None:
    t = page.tables
    assert [r[0] for r in t["inputs"]] == [str(p) for p in files]
    assert [r[0] for r in t["runs"]] == [
        "llama3-8b-dgx, 8 GPUs, analytical",
        "llama2-70b-256-ib, 32 GPUs, analytical",
    ]
    assert len(t["breakdown"]) == len(t["memory"]) == len(t["traffic"]) == 2
    assert [r[0] for r in t["plans"]] == [str(i) for i in range(1, len(plan_dicts()) + 1)]
    fits = ["yes" if p["fits"] else "NO" for p in plan_dicts()]
    assert [r[-2] for r in t["plans"]] == fits and fits[0] == "yes" and fits[-1] == "NO"
    assert len(t["sweep"]) == len(sweep_rows())
    failed = [r for r in t["sweep"] if r[-1]]
    assert len(failed) == 2 and all("global_batch" in r[-1] for r in failed)
    assert len(t["collectives"]) == len(collective_dicts()) + len(
        collective_dicts("h100-ib-ndr", 16)
    )
    assert {r[1] for r in t["links"]} == {"nvlink4", "ib-ndr"}


def test_step_time_shares_in_the_table_match_the_record(page: Page) -> None:
    run = run_dicts()[0]
    row = page.tables["breakdown"][0]
    share = run["breakdown"]["compute"] / run["step_time_s"]
    assert row[1] == f"{run['breakdown']['compute']:.4g} ({share:.1%})"


def test_nothing_is_fetched(report: Path, page: Page) -> None:
    """Only in-page anchors and data: URLs; no script, stylesheet link, frame or @import."""
    text = report.read_text()
    assert page.urls and all(u.startswith(("#", "data:")) for u in page.urls)
    assert not page.tags & {"script", "link", "iframe", "object", "embed"}
    assert "@import" not in text and not re.search(r"url\((?!#)", text)
    assert 'http-equiv="Content-Security-Policy" content="default-src \'none\'' in text


def test_svgs_are_valid_and_self_referencing(report: Path, page: Page) -> None:
    """Each inline SVG is well-formed XML whose references resolve inside it; ids are unique."""
    svgs = re.findall(r"<svg\b.*?</svg>", report.read_text(), flags=re.S)
    assert len(svgs) == sum(1 for f in page.figures if not f["skipped"])
    for svg in svgs:
        root = ET.fromstring(svg)
        assert root.tag == f"{SVG_NS}svg" and len(root.get("viewBox", "").split()) == 4
        ids = {e.get("id") for e in root.iter() if e.get("id")}
        refs = {e.get(XLINK, "")[1:] for e in root.iter() if e.get(XLINK, "").startswith("#")}
        refs |= set(re.findall(r"url\(#([^)]+)\)", svg))
        assert refs <= ids
        assert sum(1 for e in root.iter() if e.tag in (f"{SVG_NS}path", f"{SVG_NS}use")) > 50
    assert len(page.ids) == len(set(page.ids))


def test_figures_carry_their_labels(report: Path) -> None:
    """Glyphs are paths, but matplotlib keeps each text as a comment: check the labels drawn."""
    text = report.read_text()
    for label in ("llama3-8b-dgx, 8 GPUs, analytical", "compute", "HBM capacity", "#1 tp=4 pp=4 dp=2",
                  "topology=h100-tcp-100g, zero=3", "ideal: linear scaling from the smallest point",
                  "nvls/simple", "exposed DP communication", "the GPU's memory (HBM)",
                  "Link utilisation (busiest 40 of 128 links)"):  # fmt: skip
        assert f"<!-- {label} -->" in text, label


def test_same_inputs_same_bytes(files: list[Path], tmp_path: Path) -> None:
    """A second process (another hash seed) writes a byte-identical report.

    Inputs: the run with link rows (heatmap: an embedded image) and the sweep.
    """
    subset = [p for p in files if p.name in ("run-8b.json", "sweep.csv")]
    here = render_report([load_results(p) for p in subset], tmp_path / "here.html")
    there = tmp_path / "there.html"
    code = (
        "import sys; from sim.report import load_results, render_report\n"
        "render_report([load_results(p) for p in sys.argv[2:]], sys.argv[1])"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    subprocess.run(
        [sys.executable, "-c", code, str(there), *map(str, subset)], check=True, cwd=REPO, env=env
    )
    assert there.read_bytes() == here.read_bytes()


def test_links_heatmap_skipped_with_a_note_when_absent() -> None:
    page = Page(report_html([ResultSet.from_dicts([run_dicts()[0]], source="run.json")]))
    links = [f for f in page.figures if f["kind"] == "links"]
    assert len(links) == 1 and links[0]["skipped"] and not links[0].get("svg")
    assert "Per-link utilisation heatmap not shown: no per-link utilisation" in str(
        links[0]["text"]
    )
    assert "links" not in page.tables


def test_single_size_sweep_notes_why_there_is_no_curve() -> None:
    rows = [r for r in sweep_rows() if r.get("nodes") == 1]
    page = Page(report_html([ResultSet.from_dicts(rows, source="s.csv")]))
    scaling, breakdown, memory = page.figures
    assert scaling["skipped"] and "no series has two GPU counts" in str(scaling["text"])
    assert not breakdown["skipped"] and not memory["skipped"]


def test_report_needs_inputs(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="at least one result file"):
        render_report([], tmp_path / "r.html")


def test_report_into_a_missing_folder(tmp_path: Path) -> None:
    rs = ResultSet.from_dicts(list(collective_dicts()))
    with pytest.raises(ConfigError, match="does not exist"):
        render_report([rs], tmp_path / "nope" / "r.html")


@pytest.mark.parametrize(
    ("records", "kind", "suffix"),
    [
        (lambda: [run_dicts()[0]], None, ".svg"),
        (lambda: list(plan_dicts()), "memory", ".png"),
        (lambda: list(sweep_rows()), None, ".png"),
        (lambda: list(collective_dicts()), None, ".svg"),
    ],
)
def test_plot_for_writes_one_deterministic_image(records, kind, suffix, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """From plain dicts, as the CLI has them; same call, same bytes."""
    a = plot_for(records(), kind, tmp_path / f"a{suffix}")
    b = plot_for(records(), kind, tmp_path / f"b{suffix}")
    data = a.read_bytes()
    assert data == b.read_bytes()
    if suffix == ".png":
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
    else:
        assert ET.fromstring(data[data.index(b"<svg") :]).tag == f"{SVG_NS}svg"
        assert b"Date" not in data and b"matplotlib.org" not in data


@pytest.mark.parametrize(
    ("records", "kind", "path", "message"),
    [
        (lambda: [run_dicts()[0]], None, "x.pdf", "unknown image type 'pdf'; allowed: .png, .svg"),
        (
            lambda: [run_dicts()[0]],
            "busbw",
            "x.svg",
            "figure 'busbw' needs collective results; got run",
        ),
        (
            lambda: [run_dicts()[0]],
            "pie",
            "x.svg",
            "figure 'pie' is unknown; allowed: scaling, breakdown",
        ),
        (lambda: [run_dicts()[0]], "links", "x.svg", "no per-link utilisation in these results"),
        (lambda: list(collective_dicts()), None, "no/x.svg", "does not exist"),
    ],
)
def test_plot_for_errors(records, kind, path, message, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match=re.escape(message)):
        plot_for(records(), kind, tmp_path / path)
    assert not any(tmp_path.iterdir())


def test_plot_for_accepts_loaded_sets(files: list[Path], tmp_path: Path) -> None:
    """Several sweep files in one scaling figure: series are named by their file."""
    sweep = next(p for p in files if p.suffix == ".csv")
    other = tmp_path / "other.jsonl"
    other.write_text("\n".join(json.dumps(r) for r in sweep_rows()[:6]))
    out = plot_for([load_results(sweep), load_results(other)], "scaling", tmp_path / "s.svg")
    assert f"<!-- {other} -->" in out.read_text()  # one fabric: the file is one series


def test_long_plan_lists_chart_the_best_only() -> None:
    """15 candidates: all in the table, the best 12 in the bar charts (and the caption says so)."""
    base = plan_dicts()
    plans = [{**base[i % len(base)], "parallel": {"tp": i, "pp": 1}} for i in range(15)]
    html = report_html([ResultSet.from_dicts(plans, source="p.json")])
    page = Page(html)
    assert len(page.tables["plans"]) == 15
    assert "<!-- #12 tp=11 -->" in html and "<!-- #13 tp=12 -->" not in html
    captions = [str(f["text"]) for f in page.figures]
    assert all("of the best 12 of 15 candidates" in c for c in captions)


def test_run_notes_and_a_breakdown_that_does_not_add_up_are_shown() -> None:
    run = dict(run_dicts()[0])
    run["breakdown"] = {**run["breakdown"], "compute": run["breakdown"]["compute"] / 2}
    run["notes"] = ["ZeRO-3 gathers overlap compute"]
    html = report_html([ResultSet.from_dicts([run], source="r.json")])
    label = "llama3-8b-dgx, 8 GPUs, analytical"
    assert f"<li>{label}: ZeRO-3 gathers overlap compute</li>" in html
    total, step = sum(run["breakdown"].values()), run["step_time_s"]
    assert (
        f"<li>{label}: the breakdown sums to {total:.4g} s but the step time is {step:.4g} s</li>"
        in html
    )
