"""``NCCL_ALGO`` / ``NCCL_PROTO``-style restriction of what the tuner may pick.

NCCL reads both as a comma-separated list of names to allow, or, after a leading ``^``,
to exclude (``NCCL_ALGO=ring,tree``; ``NCCL_ALGO=^nvls``; ``NCCL_PROTO=^ll128``;
src/graph/tuning.cc ``parseList``, NCCL 2.19-2.22). The same strings work here, in
``clustersim collective --algo/--protocol`` and in a scenario's ``parallel.nccl_algo`` and
``parallel.nccl_proto``. ``auto`` (or an empty string) allows everything NCCL has for the
operation (:data:`sim.collectives.simulate.NCCL_ALGORITHMS`); naming an algorithm NCCL
does not have (``rhd``, ``hierarchical``) allows it too. NCCL's spellings ``nvlstree``,
``collnetdirect`` and ``collnetchain`` mean this simulator's ``nvls_tree`` and ``collnet``.
When a restriction leaves nothing for an operation, NCCL falls back to ring (2.19+):
so does :func:`allowed_algorithms`, where ring can run it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sim.errors import ConfigError

__all__ = ["ALIASES", "PROTOCOLS", "allowed_algorithms", "allowed_protocols", "parse_list"]

#: NCCL's protocols (``NCCL_PROTO``), in the order every per-protocol table follows.
PROTOCOLS = ("ll", "ll128", "simple")

#: NCCL's names for algorithms this simulator spells otherwise.
ALIASES = {"nvlstree": "nvls_tree", "collnetdirect": "collnet", "collnetchain": "collnet"}


def parse_list(text: str, known: Sequence[str], what: str) -> tuple[bool, frozenset[str]]:
    """(exclude, names) of an NCCL-style list; ConfigError naming an unknown name.

    >>> exclude, names = parse_list("^ring,NVLSTree", ["ring", "nvls_tree"], "algo")
    >>> exclude, sorted(names)
    (True, ['nvls_tree', 'ring'])
    """
    body = text.strip()
    exclude = body.startswith("^")
    names = [n.strip().lower() for n in body.lstrip("^").split(",") if n.strip()]
    names = [ALIASES.get(n, n) for n in names]
    bad = [n for n in names if n not in known]
    if bad or not names:
        allowed = ", ".join(["auto", *known])
        raise ConfigError(
            f"{what} {text!r}: {'unknown name ' + repr(bad[0]) if bad else 'empty list'}; "
            f"allowed: {allowed}, as a comma list or ^list to exclude"
        )
    return exclude, frozenset(names)


def allowed_algorithms(
    spec: str, nccl: Sequence[str], known: Sequence[str], can_run: Callable[[str], bool]
) -> list[str]:
    """Algorithms ``spec`` allows that can run, in ``known`` order.

    ``nccl`` are NCCL's algorithms for the operation (what ``auto`` means), ``known``
    every implemented one, ``can_run`` whether one can run the operation on the group.
    A restriction that leaves nothing falls back to ring, as NCCL does.

    >>> ok = lambda a: a != "tree"
    >>> allowed_algorithms("^nvls", ["ring", "tree", "nvls"], ["ring", "tree", "rhd", "nvls"], ok)
    ['ring']
    >>> allowed_algorithms("rhd", ["ring"], ["ring", "rhd"], ok)
    ['rhd']
    >>> allowed_algorithms("tree", ["ring"], ["ring", "tree"], ok)  # NCCL: ring stays
    ['ring']
    """
    if spec.strip().lower() in ("", "auto"):
        return [a for a in known if a in nccl and can_run(a)]
    exclude, names = parse_list(spec, known, "--algo/nccl_algo")
    keep = (lambda a: a in nccl and a not in names) if exclude else (lambda a: a in names)
    chosen = [a for a in known if keep(a) and can_run(a)]
    if not chosen and "ring" in nccl and can_run("ring"):
        return ["ring"]
    return chosen


def allowed_protocols(spec: str, protocols: Sequence[str]) -> list[str]:
    """Protocols ``spec`` allows (NCCL_PROTO semantics).

    >>> allowed_protocols("^ll", ["ll", "ll128", "simple"])
    ['ll128', 'simple']
    """
    if spec.strip().lower() in ("", "auto"):
        return list(protocols)
    exclude, names = parse_list(spec, protocols, "--protocol/nccl_proto")
    return [p for p in protocols if (p not in names) == exclude]
