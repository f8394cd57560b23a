"""Solver rows of a route table on the flow network (sim.network.tablerows): built for the
routes flows use, announced before a schedule runs, and the same rates and bytes as a
table holding only those routes."""

from __future__ import annotations

import numpy as np
import pytest

from sim.collectives.simulate import CollectiveSetup, replay_on_network
from sim.network import flow as flow_module
from sim.profile_select import resolve_profile
from sim.topology.presets import load_topology

SIZE = 2**26  # 64 MiB: a tree all-reduce on 4 servers


def _setup(nodes: int = 4) -> CollectiveSetup:
    """A fresh topology (its own link classes) and collective setup."""
    topo = load_topology("h100-ib-ndr", nodes=nodes)
    return CollectiveSetup(topo, None, resolve_profile(None, topo).profile.collectives)


def _run(setup: CollectiveSetup, algorithm: str) -> tuple[float, np.ndarray, object]:
    """Tune (over ``algorithm``'s candidates) and run the winner on a flow network."""
    _, _, proto, sched, _ = setup.tune("all_reduce", SIZE, algorithm)
    time_s, net = replay_on_network(setup, sched, proto, SIZE, "flow")
    return time_s, net.link_bytes.copy(), net


def test_rows_are_built_for_the_routes_flows_use_only() -> None:
    """The tuner numbers every candidate's routes in the table; the run builds rows for
    the winner's only, and gives bit for bit what a table of the winner's routes gives."""
    every = _setup()
    time_all, bytes_all, net = _run(every, "auto")
    chosen = every.tune("all_reduce", SIZE)[1]
    (rows,) = net._tables.values()  # type: ignore[attr-defined]
    assert 0 < rows.built.sum() < len(every.routes.table.paths)
    alone = _setup()
    time_one, bytes_one, _ = _run(alone, chosen)
    assert len(alone.routes.table.paths) < len(every.routes.table.paths)
    assert time_all == time_one
    assert np.array_equal(bytes_all, bytes_one)


def test_announced_routes_refine_the_classes_before_any_flow(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the schedule's routes announced, no flow admitted is ever rebuilt for a class
    split; without the announcement the rows are built step by step and the result is
    the same, bit for bit."""
    rebuilds: list[int] = []
    real = flow_module.FlowNetwork._full_rows
    monkeypatch.setattr(flow_module.FlowNetwork, "_full_rows",
                        lambda self, *a: rebuilds.append(1) or real(self, *a))  # fmt: skip
    announced = _run(_setup(), "tree")
    assert rebuilds == []
    monkeypatch.setattr(flow_module.FlowNetwork, "expect_routes", lambda self, t, r: None)
    stepwise = _run(_setup(), "tree")
    assert rebuilds  # the classes split as new routes came
    assert announced[0] == stepwise[0]
    assert np.array_equal(announced[1], stepwise[1])
