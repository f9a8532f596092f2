"""One declaration per strategy field: its default, doc, flat key, command-line flag, role and check.

Every field of :class:`~simulator.strategy.Strategy` and of the records nested in it
(:class:`~simulator.strategy.sync.AllReduceSync`, ``ParamServerSync``, ``InputPipeline``,
``StragglerModel``, ``FailureModel``) is declared with :func:`declare`. Everything else is derived
from the declarations, so adding a field is one declaration plus the logic that uses it:

- the flat keys and their converters (:mod:`simulator.strategy.flat`: profiles, the plan file);
- the command-line flags every strategy-taking command shares (``trainplan.strategy_flags``), and
  the map from a field to the flag that sets it, for error messages;
- the fields that decide a candidate's compiled structure (:data:`Role.STRUCTURE`, the key of
  :func:`simulator.analytical_vec.estimate_many`'s cache);
- what the plan file calls the executable layout and what it calls the what-if scenario.

A declaration names no argparse type: the command line reads a flag's text with the field's own
``parse`` (the same converter a plan file goes through), then ``from_flag`` for a unit the flag
counts differently (``--bucket-mb`` counts MiB, the field bytes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum

from simulator.checks import enum_member, non_negative_int, positive_int
from simulator.enum_kind import Kind
from simulator.errors import SpecError


class Role(Kind):
    """What a field decides; consumers select fields by role instead of keeping their own lists."""

    STRUCTURE = "structure"
    """Decides the compiled step (per-chunk work, collectives): part of the analytical cache key."""
    BATCH = "batch"
    """Read per candidate on top of a compiled structure (the global batch, the input pipeline)."""
    MEMORY = "memory"
    """Used by the memory model only (how the framework allocates); not in the time structure."""
    SCENARIO = "scenario"
    """A what-if input (stragglers, failures): simulated, never executed."""
    INFO = "info"
    """Informational (which profile supplied the defaults)."""


class FlagKind(Kind):
    """How a flag is written on the command line."""

    VALUE = "value"
    """``--tp 8``: one value read by the field's ``parse``."""
    SWITCH = "switch"
    """``--sp`` / ``--no-sp``: a boolean with its negation."""
    CUSTOM = "custom"
    """Written by a command-line helper of its own (``--straggler rank=3,factor=1.5``); the
    declaration documents it and error messages name it."""


@dataclass(frozen=True)
class Flag:
    """The command-line flag that sets a field."""

    name: str
    """``--tp``."""
    help: str
    """One line for ``--help``; the field's default is appended by the flag builder."""
    kind: FlagKind = FlagKind.VALUE
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    """Valid spellings listed in ``--help`` (enum values); None: free text checked by ``parse``."""
    from_flag: Callable[[object], object] | None = None
    """Turns the parsed flag value into the field's value (a unit conversion); None: as parsed."""
    default_help: str | None = None
    """The default as ``--help`` states it, where the field's own default reads badly on the command
    line (a unit conversion, a derived value); None: the field's default."""
    aliases: tuple[str, ...] = ()
    """Other spellings of a VALUE flag (``--order`` for ``--placement``); error messages name ``name``."""


@dataclass(frozen=True)
class FieldDecl:
    """Everything known about one field besides its Python type and default."""

    doc: str
    key: str
    """The field's flat key (unique over the strategy and its nested records)."""
    role: Role
    flag: Flag | None = None
    parse: Callable[[object], object] | None = None
    """Reads a flat value (text from a file or a flag, or the value itself) into the field's type."""
    check: Callable[[str, object], None] | None = None
    """Raises SpecError(key, ...) for a bad value of the field's type; run by :func:`validate`."""
    nested: tuple[type, ...] = ()
    """For a field holding a record of declared fields (the gradient sync, the input pipeline,
    stragglers, failures): the record types it may hold. Their fields are flat keys of their own."""


_META = "trainplan"


def declare(default=dataclasses.MISSING, *, doc: str, key: str, role: Role, flag: Flag | None = None,
            parse=None, check=None, nested: tuple[type, ...] = (), default_factory=dataclasses.MISSING):
    """A dataclass field carrying its :class:`FieldDecl` (``key`` is the flat key)."""
    decl = FieldDecl(doc=doc, key=key, role=role, flag=flag, parse=parse, check=check, nested=nested)
    return dataclasses.field(default=default, default_factory=default_factory, metadata={_META: decl})


def decl_of(f: dataclasses.Field) -> FieldDecl:
    """The declaration of dataclass field ``f``; a field without one is a programming error."""
    if _META not in f.metadata:
        raise TypeError(f"field {f.name!r} has no declaration: declare it with simulator.strategy.fields.declare")
    return f.metadata[_META]


def declared(cls) -> Iterator[tuple[dataclasses.Field, FieldDecl]]:
    """(field, declaration) of every field of dataclass ``cls``, in order."""
    for f in dataclasses.fields(cls):
        yield f, decl_of(f)


def validate(obj) -> None:
    """Run every field's ``check`` on ``obj`` (call from ``__post_init__``), in field order."""
    cls = type(obj)
    checks = _CHECKS.get(cls)
    if checks is None:
        checks = _CHECKS[cls] = tuple((f.name, d.key, d.check) for f, d in declared(cls) if d.check is not None)
    for name, key, check in checks:
        check(key, getattr(obj, name))


_CHECKS: dict[type, tuple] = {}
"""Per dataclass, its fields' (name, flat key, check) that :func:`validate` runs, read once from the declarations
(a class's fields do not change; a search builds thousands of strategies)."""


# Checks and parsers shared by the declarations ------------------------------------------------

pos_int = positive_int
nonneg_int = non_negative_int


def opt(check: Callable[[str, object], None]) -> Callable[[str, object], None]:
    """``check``, letting None through."""
    def wrapped(key: str, value) -> None:
        if value is not None:
            check(key, value)
    return wrapped


opt_pos_int = opt(pos_int)
opt_nonneg_int = opt(nonneg_int)


def boolean(key: str, value) -> None:
    if not isinstance(value, bool):
        raise SpecError(key, f"must be true or false, got {value!r}")


def is_a(kind: type) -> Callable[[str, object], None]:
    """A check that the value is a member of enum ``kind`` (or None where the field allows it)."""
    def check(key: str, value) -> None:
        if not isinstance(value, kind):
            raise SpecError(key, f"must be a {kind.__name__} member ({', '.join(str(m.value) for m in kind)}), "
                                 f"got {value!r}")
    return check


def enum_parser(kind: type[Enum], key: str) -> Callable[[object], Enum]:
    """Reads a member of ``kind`` by value or name, case-insensitively (``kind.parse`` if it has one)."""
    def parse(value):
        if isinstance(value, kind):
            return value
        if hasattr(kind, "parse"):
            return kind.parse(str(value))
        return enum_member(kind, value, key)
    return parse


def _text_parser(key: str, read: Callable[[str], object], what: str) -> Callable[[object], object]:
    """Reads text with ``read`` (``"8"`` → 8); a non-text value is left for the field's check."""
    def parse(value):
        if isinstance(value, str):
            try:
                return read(value.strip())
            except ValueError:
                raise SpecError(key, f"must be {what}, got {value!r}") from None
        return value
    return parse


def int_parser(key: str) -> Callable[[object], int]:
    """Reads an integer from an int or its decimal text (``"8"``)."""
    return _text_parser(key, int, "an integer")


def float_parser(key: str) -> Callable[[object], float]:
    """Reads a number from a number or its text (``"1.5"``)."""
    return _text_parser(key, float, "a number")


def int_tuple_parser(key: str) -> Callable[[object], tuple | None]:
    """Reads ``"2,10"`` or a list into a tuple of integers (None stays None)."""
    def parse(value):
        if value is None or isinstance(value, tuple):
            return value
        parts = value.split(",") if isinstance(value, str) else value
        try:
            return tuple(int(str(p).strip()) if isinstance(p, str) else p for p in parts)
        except (TypeError, ValueError):
            raise SpecError(key, f"must be a list of integers such as 2,10, got {value!r}") from None
    return parse


def choices_of(kind: type[Enum]) -> tuple[str, ...]:
    return tuple(str(m.value) for m in kind)


# Shorthands for the declarations in simulator.strategy.spec.Strategy.

def enum_field(kind, key: str, flag: Flag | None = None, role: Role = Role.STRUCTURE, doc: str = "", default=None):
    """A declared enum field: parsed by value or name, checked to be a member."""
    return declare(default, key=key, role=role, doc=doc, flag=flag, parse=enum_parser(kind, key), check=is_a(kind))


def int_field(default, key: str, doc: str, flag: Flag | None, check=pos_int, role: Role = Role.STRUCTURE):
    return declare(default, key=key, role=role, doc=doc, flag=flag, parse=int_parser(key), check=check)


def opt_enum_field(kind, key: str, doc: str, flag: Flag):
    """A declared optional enum field: None means "the framework's" (resolved elsewhere), else a member."""
    return declare(None, key=key, role=Role.STRUCTURE, doc=doc, flag=flag, parse=enum_parser(kind, key),
                   check=opt(is_a(kind)))


def switch_field(default: bool, key: str, doc: str, flag: str, role: Role = Role.STRUCTURE):
    return declare(default, key=key, role=role, doc=doc, check=boolean,
                   flag=Flag(flag, doc, kind=FlagKind.SWITCH))
