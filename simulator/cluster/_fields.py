"""A checked view of one mapping in a cluster file: typed getters whose errors name the field path.

Every error is a :class:`SpecError` whose field is the dotted path from the top of the file
(``intra_node.pcie_tree.switch_uplink.bw_GBps``), so a user can find the line to fix.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Iterable

from simulator.errors import SpecError

_MISSING = object()

MAX_NUMBER = 1e15
"""A sanity guard, not a physical limit: the largest number a cluster file may hold, in any unit (GB, GB/s, µs, TFLOP/s, params/s). Real
values are far below it (the presets' largest is 30,720 GB of NVMe; a host's CPU Adam rate is ~1e9
params/s), while ``1e300`` GB overflowed to infinity once turned into bytes and ``.inf`` GB/s printed
and computed as infinity."""
MIN_POSITIVE = 1e-9
"""A sanity guard, not a physical limit: the smallest value a number that must be positive may take (1e-9 GB/s is one byte per second):
smaller ones, such as ``5e-324``, made times infinite."""


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Section:
    """One mapping of a cluster file; rejects keys outside ``allowed`` on construction."""

    def __init__(self, data: Any, path: str, allowed: Iterable[str]):
        self.path = path
        self.allowed = tuple(allowed)
        if not isinstance(data, dict):
            raise SpecError(path or "cluster", f"must be a mapping of keys to values, got {_show(data)}")
        self.data = data
        for key in data:
            if key not in self.allowed:
                raise SpecError(path or "cluster",
                                f"unknown key {key!r}; valid keys: {', '.join(self.allowed)}")

    def field(self, key: str) -> str:
        """Dotted path of ``key`` inside this section."""
        return f"{self.path}.{key}" if self.path else key

    def has(self, key: str) -> bool:
        return key in self.data

    def raw(self, key: str, default: Any = _MISSING) -> Any:
        """The value of ``key``; missing and no default is an error naming the section."""
        if key in self.data:
            return self.data[key]
        if default is _MISSING:
            raise SpecError(self.path or "cluster", f"missing key {key!r}")
        return default

    def number(self, key: str, default: Any = _MISSING, *, minimum: str = "positive") -> float:
        """A finite number up to :data:`MAX_NUMBER`; ``minimum`` is ``"positive"`` (at least
        :data:`MIN_POSITIVE`) or ``"non_negative"`` (>= 0)."""
        value = self.raw(key, default)
        if minimum == "positive" and not (_is_number(value) and value > 0):
            raise SpecError(self.field(key), f"must be a positive number, got {_show(value)}{_hint(value)}")
        if minimum == "non_negative" and not (_is_number(value) and value >= 0):
            raise SpecError(self.field(key), f"must be a non-negative number, got {_show(value)}{_hint(value)}")
        return self._in_range(key, value, MIN_POSITIVE if minimum == "positive" else 0)

    def fraction(self, key: str, default: Any = _MISSING) -> float:
        """A number in (0, 1] (an efficiency or a bandwidth factor), at least :data:`MIN_POSITIVE`."""
        value = self.raw(key, default)
        if not (_is_number(value) and 0 < value <= 1):
            raise SpecError(self.field(key), f"must be a number in (0, 1], got {_show(value)}")
        return self._in_range(key, value, MIN_POSITIVE)

    def integer(self, key: str, default: Any = _MISSING, *, minimum: int = 1) -> int:
        value = self.raw(key, default)
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= minimum):
            kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise SpecError(self.field(key), f"must be {kind}, got {_show(value)}")
        return self._in_range(key, value, minimum)

    def _in_range(self, key: str, value: float, lowest: float) -> float:
        """``value`` if it lies in [``lowest``, :data:`MAX_NUMBER`] (so finite); else the limit it broke."""
        if not value <= MAX_NUMBER:  # inf; a huge int is compared exactly
            raise SpecError(self.field(key), f"must be at most {MAX_NUMBER:.0e}, got {_show(value)}")
        if value < lowest:
            raise SpecError(self.field(key), f"must be at least {lowest:g}, got {_show(value)}")
        return value

    def boolean(self, key: str, default: Any = _MISSING) -> bool:
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise SpecError(self.field(key), f"must be true or false, got {_show(value)}")
        return value

    def string(self, key: str, default: Any = _MISSING, *, non_empty: bool = True) -> str:
        value = self.raw(key, default)
        if not isinstance(value, str) or (non_empty and not value.strip()):
            raise SpecError(self.field(key), f"must be a non-empty string, got {_show(value)}")
        return value

    def choice(self, key: str, enum: type[Enum], default: Any = _MISSING) -> Enum:
        """An enum member given by its value (``nvswitch``, ``pcie_tree``, ...)."""
        value = self.raw(key, default)
        return enum_value(self.field(key), enum, value)

    def section(self, key: str, allowed: Iterable[str], default: Any = _MISSING) -> "Section":
        return Section(self.raw(key, default), self.field(key), allowed)


def enum_value(field: str, enum: type[Enum], value: Any) -> Enum:
    """``enum`` member whose value is ``value``; anything else names the valid values."""
    if isinstance(value, enum):
        return value
    for member in enum:
        if member.value == value:
            return member
    valid = ", ".join(str(m.value) for m in enum)
    raise SpecError(field, f"unknown value {_show(value)}; valid: {valid}")


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing (null)"
    if isinstance(value, int) and abs(value) > 10**30:
        return f"an integer of {value.bit_length()} bits"  # repr of a 5000-digit int raises ValueError
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _hint(value: Any) -> str:
    """PyYAML reads ``5e3`` (no dot) as text; say how to write it as a number."""
    if isinstance(value, str):
        try:
            return f" (YAML reads this as text; write it with a dot, e.g. {float(value):.1e})"
        except ValueError:
            return ""
    return ""
