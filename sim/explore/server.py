"""The explorer's local web server (standard library): the page, its script, plotly's
bundled ``plotly.min.js`` and two JSON endpoints, on ``127.0.0.1`` only.

- ``GET /`` the page; ``/static/explore.js``, ``/static/explore.css`` its script and style;
  ``/static/plotly.min.js`` from the installed plotly package (nothing from the network).
- ``GET /api/options`` the controls' choices; ``GET /api/step?QUERY`` one simulated step
  (:func:`sim.explore.api.evaluate`), or ``{"error": ...}`` naming the bad control.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from sim.errors import ClusterSimError
from sim.report.backend import MissingExtraError

__all__ = ["make_server", "plotly_js"]

_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}


def plotly_js() -> Path:
    """Path of plotly's bundled ``plotly.min.js`` (the ``[explore]`` extra)."""
    try:
        import plotly
    except ImportError:
        raise MissingExtraError(
            "clustersim explore needs plotly: pip install 'clustersim[explore]'"
        ) from None
    path = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    if not path.is_file():
        raise MissingExtraError(f"plotly {plotly.__version__} has no bundled plotly.min.js")
    return path


class _Handler(BaseHTTPRequestHandler):
    server_version = "clustersim-explore"
    lock = threading.Lock()  # one simulation at a time: the simulator's caches are not shared-safe

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        routes: dict[str, Callable[[str], None]] = {
            "/": lambda _q: self._static("index.html"),
            "/api/options": lambda _q: self._json(_options()),
            "/api/step": self._step,
        }
        if url.path in routes:
            routes[url.path](url.query)
        elif url.path == "/static/plotly.min.js":
            self._send(plotly_js().read_bytes(), "text/javascript")
        elif url.path.startswith("/static/") and url.path.count("/") == 2:
            self._static(url.path.removeprefix("/static/"))
        else:
            self.send_error(HTTPStatus.NOT_FOUND)

    def _step(self, query: str) -> None:
        from sim.explore.api import evaluate
        from sim.explore.state import ExploreState

        try:
            state = ExploreState.from_query(parse_qs(query, keep_blank_values=True))
            with self.lock:
                self._json(evaluate(state))
        except ClusterSimError as e:
            self._json({"error": str(e)})

    def _static(self, name: str) -> None:
        entry = resources.files("sim.explore").joinpath("static", name)
        if not entry.is_file():
            self.send_error(HTTPStatus.NOT_FOUND)
            return
        self._send(entry.read_bytes(), _TYPES.get(Path(name).suffix, "application/octet-stream"))

    def _json(self, data: Any) -> None:
        self._send(json.dumps(data, allow_nan=False).encode("utf-8"), "application/json")

    def _send(self, body: bytes, kind: str) -> None:
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", f"{kind}; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the terminal shows the URL, not every request."""


def _options() -> dict[str, Any]:
    from sim.explore.api import options

    return options()


def make_server(port: int = 8050) -> ThreadingHTTPServer:
    """A server on ``127.0.0.1:port`` (0: any free port); call ``serve_forever()``.

    Raises
    ------
    MissingExtraError
        plotly is not installed.
    ConfigError
        The port is taken or not allowed.
    """
    from sim.errors import ConfigError

    if not 0 <= port <= 65535:
        raise ConfigError(f"--port {port}: not a port; allowed: 0 to 65535 (0: any free port)")
    plotly_js()
    try:
        server = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
    except OSError as e:
        raise ConfigError(
            f"--port {port}: cannot listen on 127.0.0.1:{port} ({e.strerror})"
        ) from None
    server.daemon_threads = True
    return server
