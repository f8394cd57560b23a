"""The collective algorithms by name: a plain dict, what each supports, and where it applies.

Every algorithm is a function
``fn(op, n, nbytes, *, layout, channels=1, root=0, pipeline_chunks=1) -> Schedule``.
Pick one by name from :data:`ALGORITHMS`; :func:`applicable` says whether it can run
an op on a layout without raising; :func:`check_hardware` refuses a request for an
algorithm whose hardware a cluster lacks (NVLS without NVSwitch, CollNet without SHARP).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from sim.collectives import collnet, direct, gloo, hierarchical, nvls, nvls_tree, rhd, ring, tree
from sim.collectives.layout import Layout
from sim.collectives.schedule import Schedule
from sim.errors import ConfigError, UnsupportedCollectiveError

if TYPE_CHECKING:
    from sim.topology.model import Topology

#: NVLink generations whose NVSwitches reduce in the switch (NVLink SHARP, NCCL's NVLS).
NVLS_NVLINK = ("nvlink4", "nvlink5")

__all__ = ["ALGORITHMS", "SUPPORTED", "Algorithm", "Layout", "applicable"]


class Algorithm(Protocol):
    """The signature every collective algorithm function has."""

    def __call__(
        self,
        op: str,
        n: int,
        nbytes: float,
        *,
        layout: Layout,
        channels: int = 1,
        root: int = 0,
        pipeline_chunks: int = 1,
    ) -> Schedule:
        """Build the schedule of ``op`` on ``n`` ranks moving ``nbytes`` bytes."""
        ...


ALGORITHMS: dict[str, Algorithm] = {
    "ring": ring.ring,
    "tree": tree.tree,
    "rhd": rhd.rhd,
    "hierarchical": hierarchical.hierarchical,
    "nvls": nvls.nvls,
    "nvls_tree": nvls_tree.nvls_tree,
    "collnet": collnet.collnet,
    "direct": direct.direct,
    "gloo": gloo.gloo,
}

SUPPORTED: dict[str, tuple[str, ...]] = {
    "ring": ring.SUPPORTS,
    "tree": tree.SUPPORTS,
    "rhd": rhd.SUPPORTS,
    "hierarchical": hierarchical.SUPPORTS,
    "nvls": nvls.SUPPORTS,
    "nvls_tree": nvls_tree.SUPPORTS,
    "collnet": collnet.SUPPORTS,
    "direct": direct.SUPPORTS,
    "gloo": gloo.SUPPORTS,
}


def applicable(name: str, op: str, layout: Layout) -> bool:
    """Whether algorithm ``name`` can run ``op`` on the group described by ``layout``.

    Raises
    ------
    UnsupportedCollectiveError
        ``name`` is not a key of :data:`ALGORITHMS`.

    Examples
    --------
    >>> applicable("nvls", "all_reduce", Layout.flat(8, nvswitch=True))
    True
    >>> applicable("hierarchical", "all_reduce", Layout.flat(8))
    False
    """
    if name not in ALGORITHMS:
        raise UnsupportedCollectiveError(
            f"unknown collective algorithm {name!r}; known: {', '.join(ALGORITHMS)}"
        )
    if op not in SUPPORTED[name] or layout.n < 1:
        return False
    if name == "hierarchical":
        return hierarchical.hierarchical_shape(layout) is None
    if name == "nvls":
        return layout.nvswitch
    if name == "nvls_tree":
        return nvls_tree.nvls_tree_shape(layout) is None
    if name == "collnet":
        return layout.sharp and collnet.collnet_shape(layout) is None
    return op != "send_recv" or layout.n == 2


def _has_nvls(topology: Topology) -> bool:
    """Whether some GPU sits on an NVSwitch of an NVLS-capable NVLink generation."""
    return any(
        topology.gpu_of(g).nvlink in NVLS_NVLINK and topology.nvswitch_of(g) is not None
        for g in topology.gpus
    )


#: Algorithms that need hardware: what they need, and whether a topology has it.
HARDWARE: dict[str, tuple[str, Callable[[Topology], bool]]] = {
    "nvls": ("NVSwitches with NVLink SHARP (nvlink4/nvlink5 on an nvswitch fabric)", _has_nvls),
    "nvls_tree": ("NVSwitches with NVLink SHARP (nvlink4/nvlink5 on an nvswitch fabric)", _has_nvls),
    "collnet": ("switches that reduce in the network (network.sharp: true, InfiniBand SHARP)",
                lambda t: bool(t.sharp)),
}  # fmt: skip


def check_hardware(spec: str, topology: Topology, what: str) -> None:
    """Refuse an ``--algo``/``nccl_algo`` list naming an algorithm ``topology`` cannot run.

    ``auto`` and exclusion lists (``^nvls``) ask for nothing; a named NVLS, NVLS-tree or
    CollNet algorithm on a cluster without its hardware would otherwise fall back to ring
    without a word (NCCL's rule when a restriction leaves nothing).

    Raises
    ------
    ConfigError
        Naming the algorithm, what it needs and the topology.
    """
    from sim.collectives.selection import parse_list

    body = spec.strip().lower()
    if body in ("", "auto") or body.startswith("^"):
        return
    _, names = parse_list(spec, list(ALGORITHMS), what)
    for name in sorted(names & HARDWARE.keys()):
        need, has = HARDWARE[name]
        if not has(topology):
            raise ConfigError(
                f"{what} {spec!r}: {name} needs {need}; topology {topology.name!r} has none "
                "(NCCL would run ring instead)"
            )
