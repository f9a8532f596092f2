"""The base of the simulator's enums (:class:`Kind`): members hashed by identity.

``enum.Enum.__hash__`` is Python code (``hash(self._name_)``, CPython 3.11 ``Lib/enum.py``), so every dict look-up
of a key holding members calls back into the interpreter once per member: a cold planner search hashed ~410k of
them (the strategy's fields in structure keys, ``Op`` and placement orders in collective and group memo keys;
``benchmarks/bench_analytical.py``, 2026-11-26). A member is a singleton, and ``Enum`` compares by identity
(it defines no ``__eq__``), so ``object.__hash__`` is a hash consistent with equality, computed in C (~6× faster on
a tuple of ten members). Like the name's hash it differs between processes (``PYTHONHASHSEED`` already varies a
string's), so no order the simulator writes may depend on it; a pickled member loads as the same singleton.
``tests/test_enum_kind.py`` checks that every enum of ``simulator/`` derives from :class:`Kind` (an ``IntEnum``
or ``str`` mixin already hashes in C).
"""

from __future__ import annotations

from enum import Enum


class Kind(Enum):
    """An :class:`~enum.Enum` whose members hash by identity (module docstring)."""

    __hash__ = object.__hash__
