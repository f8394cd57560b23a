"""Lazy package attributes (PEP 562): a public name imported from its home on first use."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

__all__ = ["lazy_attr"]


def lazy_attr(package: str, name: str, homes: Mapping[str, str], namespace: dict[str, Any]) -> Any:
    """``name`` imported from its home module ``homes[name]`` and kept in ``namespace`` (the
    package's globals); AttributeError for a name ``package`` does not have."""
    module = homes.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    namespace[name] = value
    return value
