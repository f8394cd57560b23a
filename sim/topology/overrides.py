"""Per-link overrides: change chosen links of a built topology.

A topology file may end with a list of overrides, applied in order after everything
else is built (a later one wins where two touch the same link)::

    overrides:
      - link: n03.nic5<->leaf0.r5     # one link, by its two endpoint names
        bandwidth: 200Gb/s
      - match: leaf*<->spine*          # every link between nodes matching the two globs
        latency: 2us
      - match: spine3                  # every link touching a node matching the glob
        kind: ib-hdr                   # take the catalog kind's values, then the others

Selectors: exactly one of ``link`` (``a<->b``, two exact node names, either order) and
``match`` (``p<->q``: links whose ends match the shell-style globs ``p`` and ``q`` in
either order; ``p`` alone: links with either end matching). Changes: any of ``kind``,
``bandwidth``, ``latency``, ``transport``, ``scope`` as in an inline link
(:mod:`sim.topology.links`); what is not given keeps the link's current value, or the
catalog kind's where ``kind`` is given. An override changes a link's values, not its
role: a kind or scope of another class (``ib-ndr`` over an NVLink) is refused. Links are
symmetric: both directions change.
``bandwidth`` is per cable: an edge holding ``cables`` parallel cables keeps its cables,
each at the new rate. A selector that matches nothing is an error naming
it: overrides are checked against the topology as built, so ``--nodes`` can make one
point at a server that no longer exists.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from fnmatch import translate

from sim.catalog import LinkSpec
from sim.errors import TopologyError
from sim.topology.digraph import DiGraph
from sim.topology.links import InlineLink, catalog_link, patched_link

__all__ = ["Override", "apply_overrides", "check_overrides"]

_GLOB = re.compile(r"[*?\[\]]")
_CHANGES = ("kind", "bandwidth", "latency", "transport", "scope")


class Override(InlineLink):
    """One override: a selector (``link`` or ``match``) and the values to set."""

    link: str | None = None
    match: str | None = None


def _ends(text: str) -> list[str]:
    return [p.strip() for p in text.split("<->")]


def check_overrides(overrides: Sequence[Override], where: str) -> None:
    """Refuse overrides with no or two selectors, a bad selector, or nothing to change.

    Raises
    ------
    TopologyError
        One line naming ``overrides[i]`` and what is allowed.
    """
    for i, o in enumerate(overrides):
        key = f"{where}: overrides[{i}]"
        if (o.link is None) == (o.match is None):
            raise TopologyError(f"{key}: give exactly one of link (a<->b) and match (globs)")
        if not any(getattr(o, f) is not None for f in _CHANGES):
            raise TopologyError(f"{key}: changes nothing; give any of {', '.join(_CHANGES)}")
        if o.link is not None:
            ends = _ends(o.link)
            if len(ends) != 2 or not all(ends) or any(_GLOB.search(e) for e in ends):
                raise TopologyError(
                    f"{key}.link: write two node names as 'a<->b' (got {o.link!r}); "
                    "use match for glob patterns"
                )
        elif o.match is not None:
            ends = _ends(o.match)
            if len(ends) > 2 or not all(ends):
                raise TopologyError(f"{key}.match: write 'glob' or 'glob<->glob' (got {o.match!r})")


def _selected(g: DiGraph, o: Override, key: str) -> list[tuple[str, str]]:
    if o.link is not None:
        a, b = _ends(o.link)
        for name in (a, b):
            if name not in g:
                raise TopologyError(f"{key}.link: unknown node {name!r} in {o.link!r}")
        if not g.has_edge(a, b):
            raise TopologyError(f"{key}.link: no link between {a!r} and {b!r}")
        return [(a, b)]
    assert o.match is not None  # check_overrides
    pats = [re.compile(translate(p)) for p in _ends(o.match)]
    if len(pats) == 1:
        (p,) = pats
        hits = [(u, v) for u, v in _pairs(g) if p.match(u) or p.match(v)]
    else:
        p, q = pats
        hits = [
            (u, v)
            for u, v in _pairs(g)
            if (p.match(u) and q.match(v)) or (q.match(u) and p.match(v))
        ]
    if not hits:
        raise TopologyError(f"{key}.match: {o.match!r} matches no link")
    return hits


def _pairs(g: DiGraph) -> list[tuple[str, str]]:
    seen: set[tuple[str, str]] = set()
    out = []
    for u, v in g.edges:
        if (v, u) not in seen:
            seen.add((u, v))
            out.append((u, v))
    return out


def _current(g: DiGraph, u: str, v: str) -> tuple[LinkSpec, int]:
    """The link ``u <-> v`` as a LinkSpec (per cable) and its cable count.

    A NIC's outgoing direction carries the kind's per-message overhead on top of its
    latency; the LinkSpec keeps them apart (latency of the plain direction, overhead the
    difference), so :func:`add_link` lays them out again as they were.
    """
    d, back = g.edges[u, v], g.edges[v, u]
    lat = min(float(d["latency_s"]), float(back["latency_s"]))
    over = max(float(d["latency_s"]), float(back["latency_s"])) - lat
    return LinkSpec(
        name=str(d["kind"]),
        bandwidth_Bps=float(d["capacity_Bps"]),
        latency_s=lat,
        scope=str(d["scope"]),
        transport=str(d.get("transport", "")),
        overhead_s=over,
    ), int(d.get("cables", 1))


def apply_overrides(g: DiGraph, overrides: Sequence[Override], where: str) -> None:
    """Apply ``overrides`` in order to the links of ``g`` (both directions of each).

    Parameters
    ----------
    g : DiGraph
        A built topology graph (see :mod:`sim.topology.model`); changed in place.
    overrides : Sequence[Override]
        Validated overrides (see :func:`check_overrides`).
    where : str
        The file or preset name, for messages and the changed values' sources.

    Raises
    ------
    TopologyError
        A selector naming an unknown node or matching no link, or a bad value.
    """
    # Imported here: fabric imports spec, which imports this module's schema.
    from sim.topology.fabric import add_link

    check_overrides(overrides, where)
    for i, o in enumerate(overrides):
        key = f"overrides[{i}]"
        base = catalog_link(o.kind, f"{key}.kind", where) if o.kind is not None else None
        for u, v in _selected(g, o, f"{where}: {key}"):
            now, cables = _current(g, u, v)
            new = patched_link(base or now, o, key, where)
            if new.scope != now.scope:  # a kind of another role (ib-ndr for an NVLink)
                raise TopologyError(
                    f"{where}: {key}: {u}<->{v} is a {now.scope} link and {new.name!r} a "
                    f"{new.scope} one; an override changes a link's values, not its role"
                )
            add_link(g, u, v, new, new.bandwidth_Bps, cables)
