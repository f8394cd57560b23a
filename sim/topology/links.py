"""Link references in topology files: a catalog kind by name, or an inline link.

Wherever a topology file names a link (``node.nvlink``, ``node.pcie``, ``node.nic``,
``node.nvlink_bridges``, ``network.link``, ``graph.edges[].link``) it may give either a
catalog name (``topologies/catalog/links.yaml``) or a mapping::

    nic: ib-ndr                                   # catalog kind as is
    nic: {kind: ib-ndr, bandwidth: 200Gb/s}       # catalog kind, some values replaced
    nic: {bandwidth: 400Gb/s, latency: 1.2us, transport: roce}   # a link of its own

``bandwidth`` is the line rate per direction (``400Gb/s`` is bits: 50e9 bytes/s;
``450GB/s`` is bytes), ``latency`` the one-way latency of one hop, ``overhead`` (network
links) the per-message overhead charged once per transfer at the sending NIC, ``transport`` one of
:data:`TRANSPORTS` and ``scope`` (``nvlink``, ``pcie``, ``net``; the class profiles
and statistics use) defaults to the base kind's, else follows the transport (``nvlink``
and ``pcie`` are their own scope, the network transports are ``net``). A link without
``kind`` needs ``bandwidth``, ``latency`` and ``transport``. A link with a base kind
keeps the kind's name (its values' sources say which came from the file); a link of its
own is named ``custom-<transport>``.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Tag

from sim.catalog import TRANSPORTS, LinkSpec, link_spec
from sim.errors import ConfigError, TopologyError
from sim.topology.quantities import Bandwidth, Duration
from sim.units import parse_bandwidth, parse_time

__all__ = [
    "ROLES",
    "SCOPES",
    "TRANSPORTS",
    "UNION_TAGS",
    "InlineLink",
    "LinkRef",
    "catalog_link",
    "check_role",
    "link_from_ref",
    "patched_link",
    "with_bandwidth",
]

SCOPES = ("nvlink", "pcie", "net")
Transport = Literal["ib", "roce", "efa", "tcp", "tcpx", "tcpxo", "nvlink", "pcie"]
Scope = Literal["nvlink", "pcie", "net"]

# Tags of the LinkRef union; error locations drop them (see sim.topology.spec).
UNION_TAGS = frozenset({"catalog-name", "inline-link"})


class InlineLink(BaseModel):
    """A link given in place: an optional catalog base plus values that replace its own."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)
    kind: str | None = None
    bandwidth: Bandwidth | None = None
    latency: Duration | None = None
    overhead: Duration | None = None
    transport: Transport | None = None
    scope: Scope | None = None


def _which(value: Any) -> str | None:
    if isinstance(value, str):
        return "catalog-name"
    if isinstance(value, (dict, InlineLink)):
        return "inline-link"
    return None


LinkRef = Annotated[
    Annotated[str, Tag("catalog-name")] | Annotated[InlineLink, Tag("inline-link")],
    Discriminator(
        _which,
        custom_error_type="link_ref",
        custom_error_message=(
            "expected a catalog link name or a mapping of kind, bandwidth, latency, "
            "transport, scope"
        ),
    ),
]
"""Type of a link field: a catalog name or an :class:`InlineLink`."""


#: The roles a link field plays in a topology, and the scope a link kind needs to play
#: it: a GPU's scale-up fabric (``node.nvlink``, ``node.nvlink_bridges``) is NVLink-class
#: (NVLink, NVLink bridges, xGMI); PCIe (``node.pcie``: GPUs and NICs to their PCIe
#: switches and the host) is ``pcie`` (also the catalog's ``loopback``, intra-host TCP);
#: a NIC (``node.nic``) and the cables between switches (``network.link``) are network
#: links (InfiniBand, RoCE, EFA, TCP...). The scope, not the transport, decides: it is
#: the class the catalog (or an inline link's ``scope``) says the link's parameters are.
ROLES: dict[str, tuple[str, str]] = {
    "scale-up fabric": ("nvlink", "an NVLink-class kind, e.g. nvlink4"),
    "PCIe": ("pcie", "a PCIe kind, e.g. pcie-gen5"),
    "NIC": ("net", "a network kind, e.g. ib-ndr or roce-400g"),
    "switch-to-switch": ("net", "a network kind, e.g. ib-ndr or roce-400g"),
}


def check_role(link: LinkSpec, role: str, key: str, where: str) -> LinkSpec:
    """Refuse ``link`` in a role its kind cannot play (see :data:`ROLES`).

    Raises
    ------
    TopologyError
        Naming the key, the role, the kind and what the role needs, e.g.
        ``t.yaml: node.nvlink: 'ib-ndr' is a net link (transport ib); the scale-up fabric
        role needs an NVLink-class kind, e.g. nvlink4``.

    Examples
    --------
    >>> check_role(link_spec("pcie-gen5"), "PCIe", "node.pcie", "t").name
    'pcie-gen5'
    >>> check_role(link_spec("roce-400g"), "PCIe", "node.pcie", "t")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    sim.errors.TopologyError: t: node.pcie: 'roce-400g' is a net link (...); the PCIe role needs ...
    """
    need, example = ROLES[role]
    if link.scope == need:
        return link
    raise TopologyError(
        f"{where}: {key}: {link.name!r} is a {link.scope} link (transport "
        f"{link.transport or '-'}); the {role} role needs {example}"
    )


def _scope_for(transport: str) -> str:
    return transport if transport in ("nvlink", "pcie") else "net"


def patched_link(base: LinkSpec | None, change: InlineLink, key: str, where: str) -> LinkSpec:
    """``base`` with the values ``change`` gives replaced (SI units, sources updated).

    Parameters
    ----------
    base : LinkSpec or None
        The link the values replace; None for a link of its own (then ``change`` must
        give bandwidth, latency and transport).
    change : InlineLink
        The replacing values; its ``kind`` is ignored here (resolve it into ``base``).
    key : str
        The file key, for messages and sources (e.g. ``"node.nic"``).
    where : str
        The file or preset name, for messages and sources.

    Returns
    -------
    LinkSpec
        Named as the base, or ``custom-<transport>`` without one.

    Raises
    ------
    TopologyError
        A missing value, an unreadable unit or a scope that contradicts the transport.
    """
    if base is None:
        missing = [f for f in ("bandwidth", "latency", "transport") if getattr(change, f) is None]
        if missing:
            raise TopologyError(
                f"{where}: {key}: a link without kind needs {', '.join(missing)} "
                f"(transport one of {', '.join(TRANSPORTS)})"
            )
    try:
        bw = None if change.bandwidth is None else parse_bandwidth(change.bandwidth, "bandwidth")
        lat = None if change.latency is None else parse_time(change.latency, "latency")
        over = None if change.overhead is None else parse_time(change.overhead, "overhead")
    except ConfigError as e:
        raise TopologyError(f"{where}: {key}.{e}") from None
    transport = change.transport or (base.transport if base else "")
    scope = change.scope or (base.scope if base else _scope_for(transport))
    if transport in ("nvlink", "pcie") and scope != transport:
        raise TopologyError(
            f"{where}: {key}.scope: transport {transport!r} needs scope {transport!r} "
            f"(got {scope!r})"
        )
    given = {
        f: f"{key} in {where}"
        for f in ("bandwidth", "latency", "overhead")
        if getattr(change, f) is not None
    }
    return LinkSpec(
        name=base.name if base else f"custom-{transport}",
        bandwidth_Bps=bw if bw is not None else base.bandwidth_Bps,  # type: ignore[union-attr]
        latency_s=lat if lat is not None else base.latency_s,  # type: ignore[union-attr]
        scope=scope,
        transport=transport,
        sources={**(base.sources if base else {}), **given},
        overhead_s=over if over is not None else (base.overhead_s if base else 0.0),
    )


def catalog_link(name: str, key: str, where: str) -> LinkSpec:
    """The catalog kind ``name``; TopologyError naming ``key`` and the known kinds."""
    try:
        return link_spec(name)
    except TopologyError as e:
        raise TopologyError(f"{where}: {key}: {e}") from None


def link_from_ref(ref: str | InlineLink, key: str, where: str) -> LinkSpec:
    """Resolve a link field (catalog name or inline mapping) into a :class:`LinkSpec`.

    Parameters
    ----------
    ref : str or InlineLink
        The validated field value.
    key : str
        The file key, for messages (e.g. ``"network.link"``).
    where : str
        The file or preset name, for messages.

    Returns
    -------
    LinkSpec
        Bandwidth in bytes/s per direction, latency in seconds per hop.

    Raises
    ------
    TopologyError
        Unknown catalog kind, missing value or unreadable unit, naming ``key``.

    Examples
    --------
    >>> link_from_ref("ib-ndr", "node.nic", "x") == link_spec("ib-ndr")
    True
    >>> own = InlineLink(bandwidth="400Gb/s", latency="1.2us", transport="roce")
    >>> s = link_from_ref(own, "node.nic", "x")
    >>> (s.name, s.bandwidth_Bps, s.latency_s, s.scope)
    ('custom-roce', 50000000000.0, 1.2e-06, 'net')
    """
    if isinstance(ref, str):
        return catalog_link(ref, key, where)
    base = catalog_link(ref.kind, f"{key}.kind", where) if ref.kind is not None else None
    if base is not None and ref == InlineLink(kind=ref.kind):
        return base
    return patched_link(base, ref, key, where)


def with_bandwidth(link: LinkSpec, bandwidth_Bps: float, why: str) -> LinkSpec:
    """``link`` at another line rate (bytes/s), its source saying ``why``."""
    sources = {**link.sources, "bandwidth": why}
    return dataclasses.replace(link, bandwidth_Bps=bandwidth_Bps, sources=sources)
