"""clustersim explore: the controls' state, the JSON it serves, and the page in a real
headless Chromium driven by WebDriver (Debian's chromium and chromium-driver, selenium).

The browser test skips, saying why, where Chromium, its driver, selenium or plotly is
missing (``.ci/run`` installs them where it can). ``CLUSTERSIM_EXPLORE_SHOT=FILE`` keeps
its screenshot after the control change (docs/images/explore.png was made so).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sim import load_scenario
from sim.errors import ConfigError
from sim.explore.api import evaluate
from sim.explore.state import ExploreState
from sim.training.step import simulate_step

plotly = pytest.importorskip("plotly", reason="the explorer needs the [explore] extra (plotly)")


def test_a_view_is_the_simulators_step() -> None:
    """The page's numbers are simulate_step's for the same scenario (analytical network)."""
    out = evaluate(ExploreState("llama3-8b-dgx", zero=1, mb=2))
    sc = load_scenario("llama3-8b-dgx", ["parallel.zero=1", "parallel.micro_batch=2"])
    want = simulate_step(sc, "analytical")
    assert out["result"]["step_time_s"] == want.step_time_s
    assert out["result"]["breakdown"] == want.breakdown
    assert out["hbm_bytes"] == 80e9 and out["throughput_unit"] == "tokens/s"


def test_the_timeline_has_every_pass_of_every_stage() -> None:
    """PP 4: four stages, each a forward and a backward pass per micro-batch, in order,
    inside the step."""
    out = evaluate(ExploreState("llama2-70b-256-ib", gpus=32, dp="auto"))
    r = out["result"]
    lines = out["timeline"]
    assert [line["stage"] for line in lines] == [0, 1, 2, 3]
    m = r["plan"]["micro_batches"]
    for line in lines:
        kinds = [p["kind"] for p in line["passes"]]
        assert kinds.count("F") == kinds.count("B") == m
        starts = [p["start_s"] for p in line["passes"]]
        assert starts == sorted(starts)
        assert all(0 <= p["start_s"] < p["end_s"] <= r["step_time_s"] for p in line["passes"])


def test_gpus_and_fabric_resize_the_cluster() -> None:
    out = evaluate(ExploreState("llama3-8b-dgx", gpus=32, fabric="h100-ib-ndr", dp="auto"))
    assert out["result"]["gpus"] == 32 and out["result"]["plan"]["dp"] == 32
    assert out["result"]["link_bytes_by_scope"]["net"] > 0


def test_a_study_opens_on_its_base_scenario() -> None:
    out = evaluate(ExploreState("studies/horovod"))
    assert out["throughput_unit"] == "images/s" and out["timeline"] == []


def test_bad_controls_name_themselves() -> None:
    with pytest.raises(ConfigError, match="tp: 'two' is not a whole number"):
        ExploreState.from_query({"tp": ["two"]})
    with pytest.raises(ConfigError, match="speed: unknown control"):
        ExploreState.from_query({"speed": ["1"]})
    with pytest.raises(ConfigError, match="give a multiple of 8"):
        evaluate(ExploreState("llama3-8b-dgx", gpus=12, fabric="h100-ib-ndr"))


def test_the_state_round_trips_through_the_url() -> None:
    from urllib.parse import parse_qs

    s = ExploreState("llama3-8b-dgx", gpus=16, fabric="h100-ib-ndr", tp=2, dp="auto", seq=4096)
    assert ExploreState.from_query(parse_qs(s.query())) == s


@pytest.mark.parametrize("port", [-1, 65536, 10**20])
def test_make_server_refuses_a_port_out_of_range(port: int) -> None:
    """Refused by name and range, not an OverflowError from the socket layer."""
    from sim.explore.server import make_server

    with pytest.raises(ConfigError, match=r"--port .*allowed: 0 to 65535"):
        make_server(port)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    from sim.explore.server import make_server

    srv = make_server(0)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/"
    srv.shutdown()
    srv.server_close()


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=60) as reply:
        return reply.read()


def test_the_server_serves_the_page_plotly_and_json(server: str) -> None:
    assert b'<script src="/static/plotly.min.js">' in _get(server)
    js = _get(server + "static/plotly.min.js")
    assert len(js) > 1_000_000 and b"plotly" in js[:2000].lower()
    opts = json.loads(_get(server + "api/options"))
    assert "llama3-8b-dgx" in opts["scenarios"] and "studies/horovod" in opts["studies"]
    err = json.loads(_get(server + "api/step?scenario=llama3-8b-dgx&tp=0"))
    assert err == {"error": "tp: 0 must be at least 1"}


def _driver() -> Any:
    """A headless Chromium under WebDriver, or skip saying what is missing."""
    webdriver = pytest.importorskip(
        "selenium.webdriver", reason="selenium not installed (the [test] extra)"
    )
    browser = next(
        (
            shutil.which(b)
            for b in ("chromium", "chromium-browser", "google-chrome")
            if shutil.which(b)
        ),
        None,
    )
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        pytest.skip(
            "no Chromium and chromium-driver (apt-get install chromium chromium-driver): explorer not driven"
        )
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1400,1400", "--hide-scrollbars"):  # fmt: skip
        options.add_argument(flag)
    options.binary_location = browser
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=options)


def _wait_updated(drv: Any, after: int, timeout_s: float = 60.0) -> int:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        n = drv.execute_script("return Number(document.body.dataset.updated || 0)")
        if n > after:
            return int(n)
        time.sleep(0.02)
    raise AssertionError("the page did not update")


def test_a_control_change_updates_the_step_in_the_browser(server: str, tmp_path: Path) -> None:
    """Open a shared view, change TP: the step time, the breakdown and the URL follow, fast,
    with no console error and nothing fetched from anywhere but this server."""
    drv = _driver()
    try:
        drv.get(server + "?scenario=llama3-8b-dgx&fabric=h100-ib-ndr&gpus=16&dp=auto")
        first = _wait_updated(drv, 0)
        step_before = drv.find_element("id", "step-time").text
        parts_before = json.loads(
            drv.find_element("id", "breakdown").get_attribute("data-breakdown")
        )
        assert drv.find_element("id", "gpus").get_attribute("value") == "16"
        assert drv.find_elements("css selector", "#breakdown .bars path, #breakdown g.trace")
        tp = drv.find_element("id", "tp")
        tp.clear()
        t0 = time.monotonic()
        tp.send_keys("2")
        _wait_updated(drv, first)
        took = time.monotonic() - t0
        step_after = drv.find_element("id", "step-time").text
        parts_after = json.loads(
            drv.find_element("id", "breakdown").get_attribute("data-breakdown")
        )
        assert drv.find_element("id", "error").text == ""
        assert step_after != step_before and parts_after != parts_before
        assert parts_after["tp_comm_exposed"] > 0 == parts_before["tp_comm_exposed"]
        assert "tp=2" in drv.current_url and "gpus=16" in drv.current_url
        want = evaluate(
            ExploreState("llama3-8b-dgx", gpus=16, fabric="h100-ib-ndr", dp="auto", tp=2)
        )
        assert float(step_after.split()[0]) == pytest.approx(
            want["result"]["step_time_s"], rel=1e-3
        )
        assert took < 10.0  # a bound on a shared test machine; the page answers in ~0.1-0.5 s
        stages = drv.find_elements("css selector", "#timeline g.trace")
        assert len(stages) == 2  # forward and backward
        urls = drv.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name)"
        )
        assert urls and all(u.startswith((server, "data:")) for u in urls), urls
        errors = [e for e in drv.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == []
        shot = Path(os.environ.get("CLUSTERSIM_EXPLORE_SHOT") or tmp_path / "explore.png")
        drv.save_screenshot(str(shot))
        assert shot.read_bytes().startswith(b"\x89PNG")
    finally:
        drv.quit()
