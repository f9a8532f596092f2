"""The value checks every spec shares: positive integers, positive and non-negative numbers.

Each raises :class:`~simulator.errors.SpecError` naming the field, in one wording everywhere
("must be a positive integer, got 0"). ``bool`` is not a number here (``True`` is not a count),
NaN fails every comparison, and infinity is no quantity a spec can hold (an infinite
``fusion_cycle_s`` or bandwidth only overflows later), so both are rejected too.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from simulator.errors import SpecError


def _is_number(value) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return isinstance(value, int) or math.isfinite(value)  # a huge int is finite (isfinite would overflow)


def positive_int(field: str, value) -> int:
    """``value`` if it is an integer ≥ 1, else a SpecError naming ``field``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SpecError(field, f"must be a positive integer, got {value!r}")
    return value


def positive_number(field: str, value) -> float:
    """``value`` if it is a number > 0, else a SpecError naming ``field``."""
    if not _is_number(value) or not value > 0:
        raise SpecError(field, f"must be a positive number, got {value!r}")
    return value


def non_negative_number(field: str, value) -> float:
    """``value`` if it is a number ≥ 0, else a SpecError naming ``field``."""
    if not _is_number(value) or not value >= 0:
        raise SpecError(field, f"must be a non-negative number, got {value!r}")
    return value


def non_negative_int(field: str, value) -> int:
    """``value`` if it is an integer ≥ 0, else a SpecError naming ``field``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise SpecError(field, f"must be a non-negative integer, got {value!r}")
    return value


def enum_member(kind, value, field: str, what: str = "value", spellings: Callable[[str], str] = str.lower):
    """The member of enum ``kind`` that ``value`` is or names (its value or its name, compared after
    ``spellings``, lower case by default); anything else is a SpecError naming ``field`` and listing
    the values. The one rule every enum read from text follows."""
    if isinstance(value, kind):
        return value
    text = spellings(str(value))
    for member in kind:
        if text in (spellings(str(member.value)), spellings(member.name)):
            return member
    raise SpecError(field, f"unknown {what} {value!r}; known: {', '.join(str(m.value) for m in kind)}")


def known_fields(where: str, given, known: tuple[str, ...]) -> None:
    """Nothing if ``given`` is a mapping whose keys are all in ``known``; else a SpecError naming
    ``where`` (not a mapping) or ``where.key`` (an unknown field) and listing the known fields."""
    if not isinstance(given, dict):
        raise SpecError(where, f"must be a mapping, got {type(given).__name__}")
    for key in given:
        if key not in known:
            raise SpecError(f"{where}.{key}", f"unknown field; known: {', '.join(known)}")
