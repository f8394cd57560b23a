"""A fabric's bill of materials: switches, NICs, cables and optics with capex and power.

A layer over a built topology (DESIGN.md, "Design review"): every part the scale-out
network holds, priced and powered from the parts catalog (:mod:`sim.topology.parts`):

* switches per tier (:class:`~sim.topology.cabling.FabricPlan`; for an explicit graph,
  its ``leaf``/``spine``/``core``/``switch`` nodes at the default switch of their link
  kind). A top-tier switch that needs more ports ``P`` than the switch's radix ``R`` is
  priced as a director built from ``R``-port switches: a two-level Clos inside,
  ``ceil(2P/R) + ceil(P/R)`` switches (its internal links on a backplane, not priced);
* NICs: every NIC of every server, at the catalog NIC for its link kind (a NIC modelled
  faster than that part, such as OCI's two 200G ports per GPU, counts as that many cards);
* cables: every NIC-to-leaf and switch-to-switch cable by speed and reach class
  (:func:`sim.topology.summary.cable_groups`), each a whole link (both ends).

Links inside servers (NVLink, PCIe) and the servers themselves are not the fabric's.

>>> from sim.topology.presets import load_topology
>>> bom = bill_of_materials(load_topology("h100-roce-400g"))
>>> [(i.category, i.part, i.count) for i in bom.items]  # doctest: +NORMALIZE_WHITESPACE
[('switch', 'nvidia-sn5400', 16), ('nic', 'nvidia-connectx-7-400g', 256),
 ('cable', 'dac-400g', 256), ('cable', 'optics-sr-400g', 256)]
>>> bom.capex_usd == 16 * 18000 + 256 * 2000 + 256 * 300 + 256 * 1500
True
>>> round(bom.power_w, 1)  # 16 x 800 + 256 x 25 + 256 x 0.1 + 256 x 16.5
23449.6
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from sim.topology.model import Topology
from sim.topology.parts import PartsCatalog, nic_for, parts_catalog, switch_for
from sim.topology.summary import cable_groups, nic_links

__all__ = ["BillOfMaterials", "BomItem", "bill_of_materials"]


@dataclass(frozen=True)
class BomItem:
    """``count`` of catalog part ``part`` at ``unit_usd`` and ``unit_w`` each."""

    category: str
    part: str
    count: int
    unit_usd: float
    unit_w: float
    what: str
    as_of: str
    estimate: bool
    sources: dict[str, str]

    @property
    def usd(self) -> float:
        """``count * unit_usd``."""
        return self.count * self.unit_usd

    @property
    def watts(self) -> float:
        """``count * unit_w``."""
        return self.count * self.unit_w


@dataclass(frozen=True)
class BillOfMaterials:
    """The fabric's parts (:class:`BomItem`), capex (USD) and power (W) for ``gpus`` GPUs."""

    topology: str
    gpus: int
    items: tuple[BomItem, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def capex_usd(self) -> float:
        """List price of every part, USD."""
        return float(sum(i.usd for i in self.items))

    @property
    def power_w(self) -> float:
        """Power of every part, W (switches without optics, optics with their links)."""
        return float(sum(i.watts for i in self.items))

    def by_category(self) -> dict[str, dict[str, float]]:
        """Capex (USD) and power (W) per category: switch, nic, cable."""
        out: dict[str, dict[str, float]] = {}
        for i in self.items:
            c = out.setdefault(i.category, {"usd": 0.0, "w": 0.0})
            c["usd"] += i.usd
            c["w"] += i.watts
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: totals, per GPU, per category, the items and notes."""
        return {
            "topology": self.topology,
            "gpus": self.gpus,
            "capex_usd": self.capex_usd,
            "power_w": self.power_w,
            "capex_per_gpu_usd": self.capex_usd / self.gpus,
            "power_per_gpu_w": self.power_w / self.gpus,
            "by_category": self.by_category(),
            "items": [{**asdict(i), "usd": i.usd, "watts": i.watts} for i in self.items],
            "notes": list(self.notes),
        }


def _item(category: str, part: Any, count: int, what: str) -> BomItem:
    return BomItem(category, part.name, count, part.price_usd, part.watts, what, part.as_of,
                   part.estimate, dict(part.sources))  # fmt: skip


def _switches(topology: Topology, catalog: PartsCatalog, notes: list[str]) -> list[BomItem]:
    plan = topology.fabric
    counts: Counter[str] = Counter()
    what: dict[str, list[str]] = {}
    if plan is not None:
        for tier in plan.tiers:
            n = tier.count
            if tier.over_radix:  # a director: a two-level Clos of radix-R switches inside
                p, r = tier.ports_used, tier.radix
                n = tier.count * (math.ceil(2 * p / r) + math.ceil(p / r))
                notes.append(f"each {tier.name} of {p} ports is priced as a director built from "
                             f"{r}-port switches: {n // tier.count} switches inside")  # fmt: skip
            counts[tier.switch] += n
            what.setdefault(tier.switch, []).append(f"{n} {tier.name}")
    else:
        g = topology.graph
        for v, d in g.nodes(data=True):
            if d.get("kind") in ("leaf", "spine", "core", "switch"):
                kind = next(iter(g.edges[v, w]["kind"] for w in g.successors(v)), "")
                counts[switch_for(catalog, kind).name] += 1
                what.setdefault(switch_for(catalog, kind).name, ["explicit graph"])
    return [
        _item("switch", catalog.switches[n], c, ", ".join(what[n]))
        for n, c in sorted(counts.items())
    ]


def _nics(
    nics: Counter[tuple[str, float]], catalog: PartsCatalog, notes: list[str]
) -> list[BomItem]:
    out = []
    for (kind, rate), n in sorted(nics.items()):
        part = nic_for(catalog, kind, rate)
        if part is None:
            notes.append(f"no catalog NIC for {n} x {kind}: not priced")
            continue
        # a modelled NIC faster than the part is several cards (OCI: 2 x 200G per GPU)
        each = max(1, math.ceil(rate / part.speed_Bps - 1e-9)) if part.speed_Bps else 1
        what = f"{kind} at {rate * 8 / 1e9:g} Gb/s" + (f", {each} cards each" if each > 1 else "")
        out.append(_item("nic", part, n * each, what))
    return out


def bill_of_materials(topology: Topology, catalog: PartsCatalog | None = None) -> BillOfMaterials:
    """Every part of ``topology``'s scale-out network, priced and powered (see the module
    docstring). A topology without one (a single server) has no items."""
    catalog = catalog or parts_catalog()
    notes: list[str] = []
    nics = nic_links(topology)
    items = _switches(topology, catalog, notes) + _nics(nics, catalog, notes)
    for c in cable_groups(topology, catalog, nics):
        if c.part is None:
            notes.append(f"no catalog cable for {c.count} x {c.between} at "
                         f"{c.rate_Bps * 8 / 1e9:g} Gb/s ({c.reach}): not priced")  # fmt: skip
            continue
        items.append(_item("cable", catalog.cables[c.part], c.count,
                           f"{c.between}, {c.rate_Bps * 8 / 1e9:g} Gb/s {c.kind}, {c.reach}"))  # fmt: skip
    merged: dict[tuple[str, str], BomItem] = {}
    for i in items:  # one line per part (e.g. NIC-leaf and leaf-spine optics of one kind)
        key = (i.category, i.part)
        if key in merged:
            m = merged[key]
            i = BomItem(i.category, i.part, m.count + i.count, i.unit_usd, i.unit_w,
                        f"{m.what}; {i.what}", i.as_of, i.estimate, i.sources)  # fmt: skip
        merged[key] = i
    if any(i.estimate for i in merged.values()):
        notes.append("prices or watts marked estimate in the parts catalog: replace them with "
                     "a quote (--parts FILE)")  # fmt: skip
    return BillOfMaterials(topology.name, topology.num_gpus, tuple(merged.values()), tuple(notes))
