"""The explorer's controls as one value: read from a URL query, turned into a scenario.

The state is what a teacher shares: every control is a query parameter, so
``http://127.0.0.1:8050/?scenario=llama3-8b-dgx&gpus=16&tp=2`` opens that view. Empty or
absent parameters keep the scenario's own value; ``dp=auto`` derives data parallelism
from the GPU count.

>>> s = ExploreState.from_query({"scenario": ["gpt2-1gpu"], "mb": ["4"], "dp": ["auto"]})
>>> s.overrides()
['parallel.dp=null', 'parallel.micro_batch=4']
>>> s.query()
'scenario=gpt2-1gpu&dp=auto&mb=4'
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from urllib.parse import urlencode

from sim.errors import ConfigError

__all__ = ["CONTROLS", "ExploreState"]

CONTROLS = {
    "fabric": "cluster.topology",
    "tp": "parallel.tp",
    "pp": "parallel.pp",
    "dp": "parallel.dp",
    "cp": "parallel.cp",
    "zero": "parallel.zero",
    "mb": "parallel.micro_batch",
    "seq": "training.seq_len",
    "precision": "training.precision",
}
"""Query parameter -> the scenario key it sets (``gpus`` and ``scenario`` are handled apart)."""

_INTS = ("gpus", "tp", "pp", "cp", "zero", "mb", "seq")


@dataclass(frozen=True)
class ExploreState:
    """One view of the explorer: a scenario (or ``studies/NAME``: its base scenario) and
    the controls laid over it (None: the scenario's own)."""

    scenario: str = "llama3-8b-dgx"
    gpus: int | None = None
    fabric: str | None = None
    tp: int | None = None
    pp: int | None = None
    dp: str | None = None
    cp: int | None = None
    zero: int | None = None
    mb: int | None = None
    seq: int | None = None
    precision: str | None = None

    @classmethod
    def from_query(cls, query: Mapping[str, Sequence[str]]) -> ExploreState:
        """From ``urllib.parse.parse_qs`` output; a bad number is a ConfigError naming it."""
        known = {f.name for f in fields(cls)}
        values: dict[str, object] = {}
        for key, items in query.items():
            if key not in known:
                raise ConfigError(f"{key}: unknown control; allowed: {', '.join(sorted(known))}")
            text = items[-1].strip() if items else ""
            if not text:
                continue
            if key in _INTS:
                try:
                    values[key] = int(text)
                except ValueError:
                    raise ConfigError(f"{key}: {text!r} is not a whole number") from None
                if values[key] < 0 or (key != "zero" and values[key] == 0):  # type: ignore[operator]
                    raise ConfigError(f"{key}: {text} must be at least {0 if key == 'zero' else 1}")
            else:
                values[key] = text
        if values.get("dp") not in (None, "auto") and not str(values["dp"]).isdigit():
            raise ConfigError(f"dp: {values['dp']!r} must be a whole number or auto")
        return cls(**values)  # type: ignore[arg-type]

    def overrides(self) -> list[str]:
        """The controls as ``--set`` items (``dp=auto``: ``parallel.dp=null``)."""
        out = []
        for key, path in CONTROLS.items():
            value = getattr(self, key)
            if value is None:
                continue
            if key == "dp":
                value = None if value == "auto" else int(value)
            out.append(f"{path}={json.dumps(value)}")
        return out

    def query(self) -> str:
        """The URL query of this state (controls left to the scenario are left out)."""
        pairs = [(f.name, getattr(self, f.name)) for f in fields(self)]
        return urlencode([(k, str(v)) for k, v in pairs if v is not None])
