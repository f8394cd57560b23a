"""The device script's CPU dry run sees what the GPU image has: no pydantic, no simpy.

Imported at start-up because ``tests/device_stub`` is first on PYTHONPATH in that run
(tests/test_device_script.py): importing pydantic, pydantic_core or simpy raises the
ModuleNotFoundError a machine without them would.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

_ABSENT = ("pydantic", "pydantic_core", "simpy")


class _Absent(importlib.abc.MetaPathFinder):
    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> Any:
        if name.split(".")[0] in _ABSENT:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _Absent())
