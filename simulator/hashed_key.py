"""A tuple that hashes its items once (:class:`HashedKey`), for memo keys looked up several times.

CPython does not keep a tuple's hash: every dictionary look-up of a tuple key hashes all its items again. A
structure's key (:func:`simulator.analytical_structures.structure_key`: ~37 strategy fields, ~20 of them enum
members, whose ``__hash__`` is Python code) costs ~8 µs to hash, and a cold structure's key and its stages key were
each hashed twice or more (looked up, then stored). A :class:`HashedKey` equals, and hashes as, the plain tuple of its
items, so the two may be used interchangeably in one dict.
"""

from __future__ import annotations


class HashedKey(tuple):
    """``tuple(items)`` whose hash is computed once, at construction (the same value as the plain tuple's)."""

    def __new__(cls, items) -> "HashedKey":
        self = tuple.__new__(cls, items)
        self._hash = tuple.__hash__(self)
        return self

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self):
        """Pickled as its items: the hash is computed again where it is loaded (a process of its own hash seed)."""
        return HashedKey, (tuple(self),)
