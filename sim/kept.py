"""Bounded tables of values kept across calls, keyed by a hashable part and by the
identity of objects that are costly or impossible to hash.

A sweep, a plan search and the Python API ask the step the same questions again: the same
topology, the same compute parameters, the same layout. Each of the step's caches is a
:class:`Kept` table. The objects whose identity is part of a key are held beside the value,
so their ids stay theirs while the entry lives, and a hit checks that they are the very
objects asked about (an id can be reused once an object is gone). A full table is emptied:
the questions of one search repeat, a new search asks new ones.

>>> table: Kept[str] = Kept(limit=2)
>>> topo = object()
>>> table.get("layout", (topo,), lambda: "built")
'built'
>>> table.get("layout", (topo,), lambda: "built again")  # the same object: kept
'built'
>>> table.get("layout", (object(),), lambda: "other")  # another object: not the same key
'other'
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["Kept"]

V = TypeVar("V")


class Kept(Generic[V]):
    """Values by (key, identities of ``held`` objects), at most ``limit`` at a time."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._table: dict[Hashable, tuple[tuple[object, ...], V]] = {}

    def get(self, key: Hashable, held: tuple[object, ...], make: Callable[[], V]) -> V:
        """The value kept for ``key`` and the objects ``held``, else ``make()``'s, kept;
        a key that cannot be hashed (an unhashable value in it) is ``make()``'s, not kept.

        >>> Kept[int](limit=4).get(([1],), (), lambda: 7)
        7
        """
        full = (key, *map(id, held))
        try:
            hit = self._table.get(full)
        except TypeError:
            return make()
        if hit is None or not all(a is b for a, b in zip(hit[0], held, strict=True)):
            if len(self._table) >= self.limit:
                self._table.clear()
            hit = self._table[full] = (held, make())
        return hit[1]

    def clear(self) -> None:
        """Forget every value."""
        self._table.clear()
