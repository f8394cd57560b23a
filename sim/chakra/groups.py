"""ASTRA-sim's communicator-group file: which ranks a ``pg_name`` stands for.

ASTRA-sim takes ``--comm-group-configuration FILE``: a JSON object whose keys are group
ids (decimal integers, 1 or more; id 0 is the group of every rank) and whose values are
the member ranks, e.g. ``{"1": [0, 1, 2, 3], "2": [4, 5, 6, 7]}``. A node's ``pg_name``
attribute names the group (``""``, ``"0"`` or no attribute: every rank). Traces converted
from PyTorch describe their process groups instead in a METADATA_NODE whose
``inputs.values`` holds PyTorch's ``process_group:init`` record;
:func:`groups_from_metadata` reads those as ASTRA-sim's ``issue_pytorch_pg_metadata`` does.

>>> comm_groups_json({"2": (5, 4), "1": (0, 1)})
'{"1": [0, 1], "2": [4, 5]}'
>>> parse_comm_groups('{"1": [0, 1], "0": [2]}', "g.json")
Traceback (most recent call last):
...
sim.errors.ConfigError: g.json: group "0": ids are integers >= 1 (0 is every rank)
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence

from sim.chakra.ranks import TraceSet
from sim.chakra.trace import node_label
from sim.errors import ConfigError
from sim.files import load_json, read_text

__all__ = [
    "comm_groups_json",
    "group_key",
    "groups_from_metadata",
    "parse_comm_groups",
    "read_comm_groups",
]


def group_key(pg_name: str | None) -> str:
    """The group a ``pg_name`` stands for: ``""`` for every rank (no name, ``""``, ``"0"``)."""
    return "" if pg_name in (None, "", "0") else pg_name


def parse_comm_groups(text: str, where: str) -> dict[str, tuple[int, ...]]:
    """Groups of a communicator-group JSON text, members sorted.

    Raises
    ------
    ConfigError
        Not strict JSON (as :func:`sim.files.load_json`: a duplicate id, an integer over
        4,300 digits, ``NaN``), not an object, an id that is not a decimal integer >= 1, or members that
        are not a non-empty list of distinct integers >= 0.
    """
    data = load_json(text, where)
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: a communicator-group file is a JSON object of id: [ranks]")
    groups: dict[str, tuple[int, ...]] = {}
    for key, members in data.items():
        if not key.isdigit() or key != str(int(key)) or int(key) < 1:
            raise ConfigError(f'{where}: group "{key}": ids are integers >= 1 (0 is every rank)')
        ok = isinstance(members, list) and len(members) > 0
        ok = ok and all(type(m) is int and m >= 0 for m in members)
        if not ok or len(set(members)) != len(members):
            raise ConfigError(
                f'{where}: group "{key}": members must be a non-empty list of distinct '
                f"ranks >= 0, got {json.dumps(members)[:80]}"
            )
        groups[key] = tuple(sorted(members))
    return groups


def read_comm_groups(path: str | os.PathLike[str]) -> dict[str, tuple[int, ...]]:
    """Read ASTRA-sim's communicator-group file (see :func:`parse_comm_groups`)."""
    return parse_comm_groups(read_text(path, "communicator-group file"), str(path))


def comm_groups_json(groups: Mapping[str, Sequence[int]]) -> str:
    """The communicator-group file of ``groups``: ids in numeric order, members sorted.

    Raises
    ------
    ConfigError
        As :func:`parse_comm_groups` for the result.
    """
    ordered = sorted(groups.items(), key=lambda kv: (len(kv[0]), kv[0]))
    text = json.dumps({k: sorted(v) for k, v in ordered})
    parse_comm_groups(text, "communicator groups")
    return text


def _pg_records(values: str, where: str) -> list[tuple[str, list[int]]]:
    """(pg_name, ranks) of a process-group record: Python's repr of a one-string list,
    ``['[{"pg_name": "1", "ranks": [0, 1], ...}]']``, read as ASTRA-sim reads it (two
    characters off each end, then JSON)."""
    try:
        items = load_json(values[2:-2], "its JSON")  # strict: a ConfigError, a ValueError
        if not isinstance(items, list):
            raise ValueError("not a list")
        out = []
        for item in items:
            name, ranks = item["pg_name"], item["ranks"]
            if not isinstance(name, str) or not isinstance(ranks, list):
                raise ValueError("pg_name must be a string and ranks a list")
            if not all(type(r) is int and r >= 0 for r in ranks):
                raise ValueError(f"ranks of {name!r} must be integers >= 0")
            out.append((name, ranks))
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"{where}: not a process-group record ({e})") from None
    return out


def groups_from_metadata(traces: TraceSet) -> dict[str, tuple[int, ...]]:
    """Communicator groups that the traces' METADATA_NODEs describe, by ``pg_name``.

    A record with no ranks means every rank; the group of every rank (``"0"``) is left
    out (it needs no entry). Nodes without ``inputs.values`` are skipped.

    Raises
    ------
    ConfigError
        A record that does not parse (file and node named), or one ``pg_name`` given two
        different member lists.
    """
    n = traces.num_ranks
    groups: dict[str, tuple[int, ...]] = {}
    for rank, trace in enumerate(traces.traces):
        for node in trace.nodes:
            if node.type != "METADATA_NODE" or node.inputs is None or not node.inputs.values:
                continue
            where = f"{traces.path(rank)}: {node_label(node)}"
            for name, ranks in _pg_records(node.inputs.values, where):
                members = tuple(sorted(ranks)) if ranks else tuple(range(n))
                if group_key(name) == "":
                    continue
                if groups.setdefault(name, members) != members:
                    raise ConfigError(
                        f"{where}: pg_name {name!r} has ranks {list(members)[:16]} here but "
                        f"{list(groups[name])[:16]} in an earlier record"
                    )
    return groups
