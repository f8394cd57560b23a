"""The package's layers point one way: no import (at module level or inside a function)
makes a loop between the rooms of ``sim`` (its subpackages and top-level modules, and the
subpackages of ``sim.training``), so every room has a place in one layer order."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

import sim

ROOT = Path(sim.__file__).parent


def _room(module: str) -> str:
    """``sim.training.graph.build`` -> ``sim.training.graph``; ``sim.units`` -> ``sim.units``."""
    parts = module.split(".")
    depth = 3 if len(parts) > 2 and parts[1] == "training" else 2
    return ".".join(parts[:depth])


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("sim")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sim"):
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def _room_graph() -> nx.DiGraph:
    modules = {_module(p): p for p in ROOT.rglob("*.py")}
    rooms = {_room(m) for m in modules}
    g = nx.DiGraph()
    for mod, path in modules.items():
        here = _room(mod)
        if here == "sim":  # the package facade: the top of the house, re-exporting the API
            continue
        for target in _imports(path):
            there = _room(target)
            if there != here and there in rooms and there != "sim":
                g.add_edge(here, there)
    return g


def test_no_import_forms_a_loop_between_rooms() -> None:
    """A loop between rooms means some room imports one above its own layer."""
    g = _room_graph()
    cycles = list(nx.simple_cycles(g))
    assert not cycles, f"import loops between rooms: {sorted(cycles, key=len)[:5]}"


def test_nothing_below_imports_the_facade_or_the_commands() -> None:
    """``sim`` (the facade) and ``sim.cli`` sit on top: no room imports them."""
    for path in ROOT.rglob("*.py"):
        mod = _module(path)
        if mod in ("sim", "sim.__main__") or _room(mod) == "sim.cli":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in ("sim",):
                names = {a.name for a in node.names}
                assert names <= {"__version__"} and mod.startswith("sim.cli"), (mod, names)
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("sim.cli")
            ):
                raise AssertionError(f"{mod} imports {node.module}")


def test_the_step_sits_above_the_scenario_and_below_the_studies() -> None:
    """The scenario format is read by the step, and parses the opt-in sections with the
    packages that own them, which use the step's result but never the step itself; the
    whole-run layer, the studies and the report sit above the step."""
    g = _room_graph()
    step = nx.descendants(g, "sim.training.graph")
    assert "sim.scenario" in step
    assert not {"sim.beyond", "sim.studies", "sim.report", "sim.cli"} & step
    for owner in ("sim.variability", "sim.reliability", "sim.cost"):
        below = nx.descendants(g, owner)
        assert not {r for r in below if r.startswith("sim.training")}, owner
    assert not {"sim.training.graph", "sim.training.setup"} & nx.descendants(g, "sim.scenario")
