"""The server router's cached choice of exit and entry NICs (sim/topology/routing.py).

``ServerRouter._pairs`` keeps, per (port structure of both servers, fabric hop matrix,
local source, local destination, rail), the attachment pairs a route may use. Pinning to a
rail (NCCL pins each ring channel to one NIC) was recomputed for every route, looping over
every attachment of both servers; it is now part of the cached choice. These tests hold
the cached choice to the rule written out afresh, and the routes to their rail.
"""

from __future__ import annotations

import itertools

import pytest

from sim.topology.presets import load_topology
from sim.topology.routing import ServerRouter

TOPOLOGIES = [("h100-ib-ndr", 4), ("h100-roce-400g", 3), ("aws-p5-efa", 2), ("a100-ib-hdr", 2)]


def _reference(router: ServerRouter, a: int, b: int, s: int, t: int, rail: int) -> tuple:
    """The pairs for ``s -> t`` as route_parts chose them before the cache held the rail."""
    sa, sb = router.servers[a], router.servers[b]
    pairs = router._best_pairs(sa, sb, router._hops(sa, sb), s, t)
    if rail >= 0:
        pinned = [x for x in pairs if sa.rail_of(x[0]) == rail and sb.rail_of(x[1]) == rail]
        pairs = tuple(pinned) or router._rail_pairs(sa, sb, rail) or pairs
    return pairs


@pytest.mark.parametrize(("name", "nodes"), TOPOLOGIES)
def test_cached_pairs_follow_the_rail_rule(name: str, nodes: int) -> None:
    topo = load_topology(name, nodes=nodes)
    router = topo._server_router()
    assert router is not None
    servers = sorted(router.servers)
    gpus = [i for i, k in enumerate(router.servers[servers[0]].tmpl.kinds) if k == "gpu"]
    rails = sorted(set(router.servers[servers[0]].rails.values()))
    for a, b in itertools.permutations(servers[:3], 2):
        for s, t in itertools.product(gpus, gpus):
            for rail in (-1, *rails):
                want = _reference(router, a, b, s, t, rail)
                sa, sb = router.servers[a], router.servers[b]
                assert router._pairs(sa, sb, s, t, rail) == want
                assert router._pairs(sa, sb, s, t, rail) == want  # and from the cache


@pytest.mark.parametrize(("name", "nodes"), TOPOLOGIES[:2])
def test_a_pinned_route_leaves_and_enters_through_its_rail(name: str, nodes: int) -> None:
    """Between servers, a route pinned to rail ``r`` crosses NIC ``r`` of both."""
    topo = load_topology(name, nodes=nodes)
    router = topo._server_router()
    assert router is not None
    per = topo.gpus_per_node
    for rail in sorted(set(router.servers[0].rails.values())):
        src, dst = topo.gpus[1], topo.gpus[per + 6]
        head, _, _, tail = router.route_parts(src, dst, rail)
        sa, sb = router.servers[0], router.servers[1]
        up = {u: router.servers[0].rail_of(i) for i, (_, _, u, _) in enumerate(sa.attach)}
        down = {d: router.servers[1].rail_of(j) for j, (_, _, _, d) in enumerate(sb.attach)}
        assert up[head[-1]] == rail and down[tail[0]] == rail
