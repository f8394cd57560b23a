"""The report in a real browser: headless Chromium renders every figure, with no error.

Skipped, with the reason, where no Chromium is installed (``apt-get install chromium``;
``.ci/run`` installs it where it can).
"""

from __future__ import annotations

from io import BytesIO
from pathlib import Path

import pytest

from tests.browser import find_browser, render_page

BROWSER = find_browser()
pytestmark = pytest.mark.skipif(
    BROWSER is None,
    reason="no Chromium installed (apt-get install chromium): report not rendered in a browser",
)

# Every drawn figure: its size on the page, how many shapes it has, and any <use> whose
# target is missing (a broken id would draw nothing without an error).
CHECK_FIGURES = """
Array.from(document.querySelectorAll('figure[data-figure]')).map(f => {
  const svg = f.querySelector('svg');
  const box = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
  const uses = svg ? Array.from(svg.querySelectorAll('use')) : [];
  return {
    kind: f.dataset.figure,
    skipped: f.classList.contains('skipped'),
    width: box.width,
    height: box.height,
    shapes: svg ? svg.querySelectorAll('path, use, image, rect').length : 0,
    unresolved: uses.filter(u => !document.getElementById(
      (u.getAttribute('xlink:href') || u.getAttribute('href') || '#').slice(1))).length,
  };
})
"""


def _broken(figures: list[dict[str, object]]) -> list[str]:
    """Figures that did not render: no size, (almost) nothing drawn, or dangling references."""
    return [
        f"{f['kind']}: {f}"
        for f in figures
        if not f["skipped"]
        and (f["width"] < 300 or f["height"] < 150 or f["shapes"] < 50 or f["unresolved"])  # type: ignore[operator]
    ]


def _colours(png: bytes) -> int:
    from PIL import Image

    return len(Image.open(BytesIO(png)).convert("RGB").getcolors(1 << 20) or [])


def test_report_renders_without_errors(report_file: Path, tmp_path: Path) -> None:
    """No console error, nothing fetched from outside, every figure drawn, a painted page."""
    assert BROWSER is not None
    page = render_page(BROWSER, report_file, CHECK_FIGURES)
    assert page.problems == []
    assert all(u.startswith(("file:", "data:")) for u in page.requests), page.requests
    figures = page.check
    assert [f["kind"] for f in figures] == [
        "breakdown",
        "memory",
        "links",
        "breakdown",
        "memory",
        "scaling",
        "breakdown",
        "memory",
        "busbw",
    ]
    assert _broken(figures) == []
    shot = tmp_path / "report.png"
    shot.write_bytes(page.screenshot_png)
    assert page.screenshot_png.startswith(b"\x89PNG") and _colours(page.screenshot_png) > 100


def test_the_check_catches_a_broken_page(tmp_path: Path) -> None:
    """The same check fails a page with an exception, a blocked fetch and empty figures.

    The page's policy blocks the image before any request leaves the machine.
    """
    assert BROWSER is not None
    bad = tmp_path / "bad.html"
    bad.write_text(
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>bad</title>'
        '<meta http-equiv="Content-Security-Policy" content="img-src data:; script-src \'unsafe-inline\'">'
        "</head><body>"
        '<figure data-figure="scaling"><svg viewBox="0 0 10 10"></svg></figure>'
        '<figure data-figure="busbw"><svg viewBox="0 0 10 10"><use href="#nowhere"/></svg></figure>'
        '<img src="http://127.0.0.1:9/x.png"><script>throw new Error("boom")</script></body></html>'
    )
    page = render_page(BROWSER, bad, CHECK_FIGURES)
    assert any("boom" in p for p in page.problems)
    assert any("violates the following Content Security Policy" in p for p in page.problems)
    assert "http://127.0.0.1:9/x.png" in page.requests
    assert [b.split(":")[0] for b in _broken(page.check)] == ["scaling", "busbw"]
