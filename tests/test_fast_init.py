"""simulator.fast_init: every decorated class builds the same instances as its dataclass-generated ``__init__``."""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import MISSING, InitVar, dataclass, field, fields
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import SpecError
from simulator.fast_init import fast_init

ROOT = Path(__file__).resolve().parent.parent
_DECORATED = re.compile(r"^@fast_init\n(?:@.*\n)*class (\w+)", re.M)


def _decorated() -> list[type]:
    """Every class of ``simulator/`` written under ``@fast_init`` (found in the source, so a new one is tested)."""
    out = []
    for path in sorted((ROOT / "simulator").rglob("*.py")):
        text = path.read_text()
        names = _DECORATED.findall(text)
        if names:
            module = importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
            out += [getattr(module, name) for name in names]
    return out


CLASSES = _decorated()
PLAIN = [c for c in CLASSES if not hasattr(c, "__post_init__")]


def _params(init) -> list[tuple]:
    return [(p.name, p.kind, p.default) for p in list(inspect.signature(init).parameters.values())[1:]]


def test_found_the_hot_records():
    names = {c.__name__ for c in CLASSES}
    assert {"ChunkWork", "StageWork", "CommCall", "ParallelLayout", "Kernel", "Hop"} <= names
    assert all(c.__init__ is not c.__dataclass_init__ for c in CLASSES)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_same_signature(cls):
    """Same parameter names, kinds (positional or keyword-only) and defaults as the generated ``__init__``."""
    assert _params(cls.__init__) == _params(cls.__dataclass_init__)


def _both(cls, kwargs):
    a, b = object.__new__(cls), object.__new__(cls)
    a.__init__(**kwargs)
    cls.__dataclass_init__(b, **kwargs)
    return a, b


@settings(max_examples=25, deadline=None)
@given(data=st.data())
@pytest.mark.parametrize("cls", PLAIN, ids=lambda c: c.__name__)
def test_same_instance(cls, data):
    """Arbitrary field values (some left to their defaults): the same ``__dict__``, in the same order, equal and
    equally hashed."""
    values = st.one_of(st.integers(), st.floats(allow_nan=False), st.none(), st.text(max_size=3))
    kwargs = {f.name: data.draw(values) for f in fields(cls) if f.default is MISSING or data.draw(st.booleans())}
    a, b = _both(cls, kwargs)
    assert list(vars(a).items()) == list(vars(b).items())
    assert a == b and hash(a) == hash(b)


def test_post_init_still_checks():
    """The classes with ``__post_init__`` still run it, last: a bad value raises the same error either way."""
    from simulator.gemm_efficiency import GemmEfficiency
    from simulator.work import CommCall, CommKind, Transport
    from simulator.collectives.base import Op
    from simulator.workload.grad_accum import GradAdd

    good = dict(kind=CommKind.PP, op=Op.SEND_RECV, group=(0, 1), nbytes=8, transport=Transport.P2P, time_s=1.0)
    a, b = _both(CommCall, good)
    assert list(vars(a).items()) == list(vars(b).items())
    for cls, bad in ((CommCall, dict(good, transport=Transport.COLLECTIVE)), (GradAdd, dict(accumulator_bytes=0,
                     gradient_bytes=2)), (GemmEfficiency, dict(points=()))):
        with pytest.raises(SpecError) as fast:
            cls(**bad)
        with pytest.raises(SpecError) as generated:
            cls.__dataclass_init__(object.__new__(cls), **bad)
        assert str(fast.value) == str(generated.value)


def test_refuses_what_it_does_not_copy():
    with pytest.raises(TypeError, match="slots"):
        fast_init(dataclass(frozen=True, slots=True)(type("S", (), {"__annotations__": {"x": int}})))

    @dataclass(frozen=True)
    class Factory:
        x: list = field(default_factory=list)

    @dataclass(frozen=True)
    class Hidden:
        x: int = field(default=0, init=False)

    @dataclass(frozen=True)
    class WithInitVar:
        x: int
        y: InitVar[int] = 0

    for cls in (Factory, Hidden, WithInitVar):
        with pytest.raises(TypeError):
            fast_init(cls)
