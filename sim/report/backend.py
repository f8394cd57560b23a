"""matplotlib, imported only when a figure is drawn, and set up for byte-identical output.

The core install does not have matplotlib (it is the ``[plot]`` extra); asking for a
figure without it raises :class:`MissingExtraError` naming the install command.
Figures are :class:`matplotlib.figure.Figure` objects (no pyplot, no global state); the
settings that make output reproducible (SVG hash salt, no dates, glyphs as paths) are
applied in a ``rc_context`` around drawing and saving only.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import PurePath
from types import ModuleType
from typing import Any

from sim.errors import ConfigError, MissingExtraError

__all__ = [
    "PLOT_FORMATS", "RC", "MissingExtraError", "figure_bytes", "figure_svg", "import_matplotlib",
    "plot_format", "styled",
]  # fmt: skip

RC: dict[str, Any] = {
    "svg.hashsalt": "clustersim",  # clip-path and marker ids from content, not from a random salt
    "svg.fonttype": "path",  # glyphs as paths: the page needs no font
    "font.family": "DejaVu Sans",  # shipped with matplotlib: same glyphs on every machine
    "font.size": 9.0,
    "axes.titlesize": 10.0,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.fontsize": 8.0,
    "legend.frameon": False,
    "savefig.bbox": "tight",
    "path.simplify": False,
}
"""matplotlib settings every clustersim figure is drawn with."""

# No date, creator (it holds matplotlib's URL) or other metadata in the files.
_SVG_METADATA = {"Date": None, "Creator": None, "Format": None, "Type": None}
_PNG_METADATA = {"Software": None}
_PNG_DPI = 150


def import_matplotlib() -> ModuleType:
    """Import matplotlib, or say how to install it.

    Raises
    ------
    MissingExtraError
        When matplotlib is not installed: ``pip install clustersim[plot]``.
    """
    try:
        import matplotlib as mpl
        import matplotlib.figure  # the Figure class every plot uses
    except ImportError:
        raise MissingExtraError(
            "plots and HTML reports need matplotlib: pip install 'clustersim[plot]'"
        ) from None
    return mpl


@contextmanager
def styled() -> Iterator[Callable[..., Any]]:
    """Context in which figures are drawn and saved; yields the ``Figure`` class."""
    mpl = import_matplotlib()
    with mpl.rc_context(RC):
        yield mpl.figure.Figure


def figure_svg(fig: Any, prefix: str) -> str:
    """One figure as an ``<svg>`` element for inlining in HTML (no XML prolog).

    Every ``id`` (and every reference to one) gets ``prefix``, so that several figures
    on one page do not share ids; width and height are left to the page's CSS.
    """
    buf = io.StringIO()
    with import_matplotlib().rc_context(RC):
        fig.savefig(buf, format="svg", metadata=_SVG_METADATA)
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    ids = set(re.findall(r'\bid="([^"]+)"', text))
    text = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{prefix}-{m.group(1)}"', text)
    text = re.sub(
        r'(href="#|url\(#)([^")]+)',
        lambda m: m.group(1) + (f"{prefix}-{m.group(2)}" if m.group(2) in ids else m.group(2)),
        text,
    )
    return text.strip()


def figure_bytes(fig: Any, fmt: str) -> bytes:
    """A figure as the bytes of an ``svg`` or ``png`` file (deterministic for one matplotlib)."""
    buf = io.BytesIO()
    metadata = _SVG_METADATA if fmt == "svg" else _PNG_METADATA
    with import_matplotlib().rc_context(RC):
        fig.savefig(buf, format=fmt, metadata=metadata, dpi=_PNG_DPI)
    return buf.getvalue()


#: Image formats a figure is written in, by file suffix.
PLOT_FORMATS = ("png", "svg")


def plot_format(path: str) -> str:
    """The image format ``path``'s suffix names (``png`` or ``svg``); ConfigError otherwise."""
    fmt = PurePath(path).suffix.lower().lstrip(".")
    if fmt not in PLOT_FORMATS:
        raise ConfigError(f"--plot {path!r}: unknown image type {fmt!r}; allowed: .png, .svg")
    return fmt
