"""A tuple that hashes its items once (:class:`HashedKey`), for memo keys looked up several times.

CPython does not keep a tuple's hash: every dictionary look-up of a tuple key hashes all its items again. A
structure's key (:func:`simulator.analytical_structures.structure_key`: ~37 strategy fields, ~20 of them enum
members, whose ``__hash__`` is Python code) costs ~8 µs to hash, and a cold structure's key and its stages key were
each hashed twice or more (looked up, then stored). A :class:`HashedKey` equals, and hashes as, the plain tuple of its
items, so the two may be used interchangeably in one dict.

:func:`kept_hash` is the same for a frozen dataclass: its hash computed once per object.
"""

from __future__ import annotations

from dataclasses import fields
from functools import cache


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


_KEPT = "_kept_hash"
"""The instance-dict entry :func:`kept_hash` fills (never pickled: :func:`state_without_kept_hash`)."""


@cache
def _hashed_fields(cls: type) -> tuple[str, ...]:
    """The fields ``@dataclass`` hashes: those with ``hash=True``, or ``hash=None`` and ``compare=True``."""
    return tuple(f.name for f in fields(cls) if (f.compare if f.hash is None else f.hash))


def kept_hash(self) -> int:
    """``__hash__`` of a frozen dataclass that keeps its value: ``hash((self.f1, self.f2, …))`` over the fields
    ``@dataclass(frozen=True)`` hashes (the value its generated ``__hash__`` gives), computed at the first ask and
    kept in the instance's dict. For objects a search hashes thousands of times as memo keys (the workload, the
    compute options: tens of fields, enum members among them, each a Python ``__hash__``). Set in the class body
    (``__hash__ = kept_hash``), where ``@dataclass`` leaves an explicit ``__hash__`` alone, with
    ``__getstate__ = state_without_kept_hash``. Frozen, so the fields and the kept value cannot drift apart."""
    d = self.__dict__
    h = d.get(_KEPT)
    if h is None:
        h = d[_KEPT] = hash(tuple(getattr(self, name) for name in _hashed_fields(type(self))))
    return h


def state_without_kept_hash(self) -> dict:
    """``__getstate__`` beside :func:`kept_hash`: the instance's dict without the kept hash, which another process
    (its own hash seed for strings, and so for enum members) computes again."""
    state = dict(self.__dict__)
    state.pop(_KEPT, None)
    return state
