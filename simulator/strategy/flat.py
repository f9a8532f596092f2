"""A :class:`Strategy` to and from one flat mapping of named values (CLI flags, a
profile, the plan file).

Every key is one declared field (:mod:`simulator.strategy.fields`); the fields of the nested
records (gradient sync, input, stragglers, failures) are keys of their own (``ps_`` in front of
the parameter-server ones, as declared). Text values are read by each field's own parser into
enums (``"1f1b"``, ``"zero2"`` or ``2``, ``"hierarchical"``) and sizes (``"25MB"``). Unknown keys
and keys of the sync kind not chosen are errors that list the valid ones. Nothing here lists
fields by hand: the tables below are derived from the declarations.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from simulator.errors import SpecError
from simulator.strategy.fields import FieldDecl, Role, declared, enum_parser
from simulator.strategy.spec import Strategy
from simulator.strategy.sync import DpSyncKind


@dataclass(frozen=True)
class FlatKey:
    """Where one flat key lands: the Strategy field, and the field of the nested record if any."""

    key: str
    field: str
    """The Strategy field."""
    record: type | None
    """The nested record type (None: a plain Strategy field)."""
    attr: str
    """The field of ``record`` (or ``field`` again for a plain one)."""
    decl: FieldDecl


def flat_keys(cls=Strategy) -> dict[str, FlatKey]:
    """Flat key → where it lands, for ``cls`` (Strategy, or a subclass with more declared fields)."""
    out: dict[str, FlatKey] = {}
    for f, d in declared(cls):
        if not d.nested:
            out[d.key] = FlatKey(d.key, f.name, None, f.name, d)
            continue
        if len(d.nested) > 1:  # a choice of record kinds, selected by this key
            out[d.key] = FlatKey(d.key, f.name, None, f.name, d)
        for record in d.nested:
            for g, e in declared(record):
                if e.key in out:
                    raise TypeError(f"flat key {e.key!r} is declared twice")
                out[e.key] = FlatKey(e.key, f.name, record, g.name, e)
    return out


FLAT: dict[str, FlatKey] = flat_keys()
"""Every flat key of a Strategy, derived from the field declarations."""
ALL_KEYS: tuple[str, ...] = tuple(FLAT)
_SYNC_KIND = enum_parser(DpSyncKind, "dp_sync")
_SYNC_CLASS = {cls().kind: cls for cls in FLAT["dp_sync"].decl.nested}
FLAT_RECORD = {f.name: d.nested[0] for f, d in declared(Strategy) if len(d.nested) == 1}
"""Strategy field → its one nested record type (input, stragglers, failures)."""


_RECORD_KEYS: dict[type, tuple[tuple[str, str], ...]] = {}
for _k in FLAT.values():
    if _k.record is not None:
        _RECORD_KEYS.setdefault(_k.record, ())
        _RECORD_KEYS[_k.record] += ((_k.key, _k.attr),)
_PLAIN_FIELDS: tuple[tuple[str, str], ...] = tuple((k.key, k.field) for k in FLAT.values() if k.record is None)
"""(flat key, field) per nested record type and of the plain Strategy fields, in :data:`FLAT`'s order: read once
here, not by a scan of every key per strategy (the planner builds thousands: cold22 in docs/planner.md)."""


def keys_of(record: type) -> dict[str, str]:
    """Flat key → field name of nested ``record``."""
    return dict(_RECORD_KEYS.get(record, ()))


def keys_with_role(*roles: Role) -> tuple[str, ...]:
    """The flat keys whose declared role is one of ``roles`` (nested keys take their own role)."""
    return tuple(k.key for k in FLAT.values() if k.decl.role in roles and not k.decl.nested)


def _parse(key: str, value):
    parse = FLAT[key].decl.parse
    return value if parse is None or value is None else parse(value)


def _nested(values: dict, record: type) -> dict:
    return {attr: values[key] for key, attr in _RECORD_KEYS.get(record, ()) if key in values}


def strategy_from_flat(values: dict) -> Strategy:
    """A :class:`Strategy` from flat keys (see :data:`ALL_KEYS`); missing keys keep the field defaults."""
    if not isinstance(values, dict):
        raise SpecError("strategy", f"must be a mapping of keys to values, got {type(values).__name__}")
    unknown = sorted(str(k) for k in set(values) - set(FLAT))
    if unknown:
        raise SpecError(unknown[0], f"unknown strategy key; known: {', '.join(ALL_KEYS)}")
    if "global_batch" not in values:
        raise SpecError("global_batch", "missing; give the global batch (sequences per optimizer step)")
    values = {k: _parse(k, v) for k, v in values.items()}
    kind = _SYNC_KIND(values.pop("dp_sync", DpSyncKind.ALL_REDUCE))
    sync_class = _SYNC_CLASS[kind]
    clash = sorted(k for k in values if FLAT[k].field == "dp_sync" and FLAT[k].record is not sync_class)
    if clash:
        other = "a parameter server" if kind is DpSyncKind.ALL_REDUCE else "all-reduce"
        raise SpecError(clash[0], f"applies to {other}, not to {kind.value}; drop it, or choose {other} "
                        "(dp_sync; --param-server on the command line)")
    if values.get("bucket_params") is not None:
        if values.get("bucket_bytes") is not None:
            raise SpecError("bucket_params", "give bucket_bytes or bucket_params, not both")
        values["bucket_bytes"] = None
    records: dict[str, object] = {}
    for name in ("input", "stragglers"):
        records[name] = FLAT_RECORD[name](**_nested(values, FLAT_RECORD[name]))
    records["dp_sync"] = sync_class(**_nested(values, sync_class))
    failure = _nested(values, FLAT_RECORD["failures"])
    if failure and len(failure) != len(keys_of(FLAT_RECORD["failures"])):
        missing = [k for k in keys_of(FLAT_RECORD["failures"]) if k not in values]
        raise SpecError(missing[0], "the failure model needs all four of its values: the MTBF, the checkpoint "
                        "interval, the checkpoint cost and the restart cost")
    records["failures"] = FLAT_RECORD["failures"](**failure) if failure else None
    plain = {field: values[key] for key, field in _PLAIN_FIELDS if key in values}
    return Strategy(**plain, **records)


def plain(value):
    """A field value as plain JSON data: enums by value, tuples as lists."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    return value


def strategy_to_flat(s: Strategy, roles: tuple[Role, ...] | None = None) -> dict:
    """The flat keys of ``s`` as plain JSON data; ``strategy_from_flat`` of it gives ``s`` back.

    ``roles``: only the fields of these roles (nested records by their fields' roles), e.g. the
    executable layout without the what-if :data:`Role.SCENARIO` inputs.
    """
    out: dict = {}
    for k in FLAT.values():
        if roles is not None and k.decl.role not in roles:
            continue
        if k.record is None:
            value = getattr(s, k.field)
            out[k.key] = value.kind.value if k.key == "dp_sync" else plain(value)
        else:
            holder = getattr(s, k.field)
            if isinstance(holder, k.record):
                out[k.key] = plain(getattr(holder, k.attr))
    return out


def strategy_from_flat_with_profile(defaults: dict, overrides: dict) -> Strategy:
    """Profile ``defaults`` under user ``overrides``; switching ``dp_sync`` drops the other kind's defaults."""
    merged = dict(defaults)
    kind = _SYNC_KIND(overrides.get("dp_sync", merged.get("dp_sync", DpSyncKind.ALL_REDUCE)))
    merged = {k: v for k, v in merged.items()
              if k not in FLAT or FLAT[k].field != "dp_sync" or FLAT[k].record in (None, _SYNC_CLASS[kind])}
    for given, other in (("bucket_bytes", "bucket_params"), ("bucket_params", "bucket_bytes")):
        if given in overrides:  # one bucket capacity: the user's replaces the profile's, whichever unit
            merged.pop(other, None)
    merged.update(overrides)
    return strategy_from_flat(merged)
