"""Every enum of ``simulator/`` derives from :class:`simulator.enum_kind.Kind` (members hashed by identity, in C), so
memo keys holding members hash without calling back into Python: a source scan fails if a new enum derives from
``Enum`` itself; every member found hashes by identity, is found in a dict, equals only itself and loads from a
pickle as the same singleton. ``simulator/engine/`` is left to its own owner (one enum, not in a memo key)."""

import importlib
import pickle
import re
from pathlib import Path

from simulator.enum_kind import Kind

ROOT = Path(__file__).resolve().parents[1]
_PLAIN = re.compile(r"^class \w+\(Enum\)|=\s*Enum\(", re.M)


def _modules() -> list[str]:
    out = []
    for path in sorted((ROOT / "simulator").rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[1] != "engine" and "Kind" in path.read_text():
            out.append(".".join(rel.with_suffix("").parts))
    return out


def test_no_enum_outside_the_base():
    plain = [str(p.relative_to(ROOT)) for p in (ROOT / "simulator").rglob("*.py")
             if p.relative_to(ROOT).parts[1] != "engine" and p.name != "enum_kind.py" and _PLAIN.search(p.read_text())]
    assert plain == [], f"derive these enums from simulator.enum_kind.Kind: {plain}"


def _kinds(cls=Kind):
    for sub in cls.__subclasses__():
        yield sub
        yield from _kinds(sub)


def test_every_member_hashes_by_identity():
    for name in _modules():
        importlib.import_module(name)
    kinds = list(_kinds())
    assert len(kinds) >= 50  # the scan above found them: not vacuous
    for kind in kinds:
        members = list(kind)
        table = {m: i for i, m in enumerate(members)}
        for i, m in enumerate(members):
            assert hash(m) == object.__hash__(m) and table[m] == i
            assert pickle.loads(pickle.dumps(m)) is m and kind(m.value) is m
            assert [o for o in members if o == m] == [m]
