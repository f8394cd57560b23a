"""Twin groups (sim.collectives.twins): a group shares another's tuning only with proof.

The proof is route by route, so a twin's answer must be bit-identical to what the group's
own tuning gives (exact equality, no tolerance), and a group whose routes differ in any
cost input (here one link's capacity) must tune itself.
"""

from __future__ import annotations

import numpy as np
import pytest

from sim.collectives.engine import schedule_link_bytes, wire_scale
from sim.collectives.links import scaled_for
from sim.collectives.params import default_params
from sim.collectives.simulate import CollectiveSetup
from sim.collectives.twins import Twin, twin_key
from sim.topology.model import Topology
from sim.topology.presets import load_topology
from sim.training.compute.passes import CollectiveTimer

OPS = [("all_reduce", 2**20), ("all_gather", 3 * 2**26), ("reduce_scatter", 2**28)]


NODES = 4


def _topology() -> Topology:
    return scaled_for(load_topology("h100-ib-ndr", nodes=NODES), default_params())


def _setups(topo: Topology) -> tuple[CollectiveSetup, CollectiveSetup, CollectiveSetup]:
    """The data-parallel groups of TP ranks 3 and 5 on a rail-optimized fabric (one GPU
    per server: rails 3 and 5), and rank 5's tuned alone as the reference."""
    params = default_params()
    a, b = ([f"n{i}.gpu{k}" for i in range(NODES)] for k in (3, 5))
    made = [CollectiveSetup(topo, g, params, link_scaled=True) for g in (a, b, b)]
    return made[0], made[1], made[2]


@pytest.mark.parametrize(("op", "size"), OPS)
def test_twin_answers_what_its_own_tuning_gives(op: str, size: float) -> None:
    """Rails 3 and 5 are alike: the twin's time, choice and link counters are its own
    tuning's, bit for bit, and its counters sit on its own rail's links."""
    rep, twin, alone = _setups(_topology())
    assert twin_key(rep) == twin_key(twin)
    twin.twin = Twin(rep, twin)
    got, ref = twin.tune(op, size), alone.tune(op, size)
    assert twin.twin is not None  # the proof held
    assert got[0] == ref[0] and got[1:3] == ref[1:3] and got[4] == ref[4]
    sched, proto = got[3], got[2]
    scale = wire_scale(alone.params, got[1], proto)
    mine = twin.link_bytes(sched, scale)
    own = schedule_link_bytes(ref[3], alone.endpoints(ref[3]), alone.routes, scale)
    assert np.array_equal(mine, own)
    assert not np.array_equal(mine, rep.link_bytes(sched, scale))  # other links


def test_twin_whose_route_differs_tunes_itself() -> None:
    """One link of the twin's rail made slower: the proof fails, and the group's answer
    is its own tuning's (slower than the representative's)."""
    base = _topology()
    factors = np.ones(len(base.capacity_Bps))
    factors[base.path("n0.gpu5", "n1.gpu5", 5).links[0]] = 0.5  # GPU 5's way to its NIC
    topo = base.scaled(factors)
    rep, twin, _ = _setups(topo)
    twin.twin = Twin(rep, twin)
    got = twin.tune("all_reduce", 2**28)
    assert twin.twin is None
    fresh = CollectiveSetup(topo, twin.group, twin.params, link_scaled=True)
    assert got[0] == fresh.tune("all_reduce", 2**28)[0]
    assert got[0] > rep.tune("all_reduce", 2**28)[0]


def test_timer_pairs_groups_of_the_same_shape_only() -> None:
    """The timer makes a group the twin of the first group of its shape: a DP group of
    another rail is one, a server's TP group is not."""
    timer = CollectiveTimer(load_topology("h100-ib-ndr", nodes=2), default_params(), "analytical")
    first = timer.setup(["n0.gpu0", "n1.gpu0"])
    other = timer.setup(["n0.gpu6", "n1.gpu6"])
    tp = timer.setup([f"n0.gpu{k}" for k in range(8)])
    assert first.twin is None and tp.twin is None
    assert other.twin is not None and other.twin.rep is first
    alone = CollectiveSetup(timer.topology, other.group, timer.params, link_scaled=True)
    assert timer.time_s(other.group, "all_reduce", 2**26) == alone.tune("all_reduce", 2**26)[0]
