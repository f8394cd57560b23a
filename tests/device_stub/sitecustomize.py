"""The device script's CPU dry run sees what the GPU image has: no pydantic, no simpy.

Imported at start-up because ``tests/device_stub`` is first on PYTHONPATH in that run
(tests/test_device_script.py, which also sets
``CLUSTERSIM_DEVICE_STUB=1``): importing pydantic, pydantic_core or simpy raises the
ModuleNotFoundError a machine without them would.
"""

from __future__ import annotations

import importlib.abc
import os
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


# Inert unless the dry run asks for it: a test collector that imports this file must not
# hide pydantic from the whole test session.
if os.environ.get("CLUSTERSIM_DEVICE_STUB") == "1":
    sys.meta_path.insert(0, _Absent())
