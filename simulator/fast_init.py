"""A frozen dataclass's ``__init__`` that fills the instance's ``__dict__`` directly (:func:`fast_init`).

``@dataclass(frozen=True)`` writes each field with ``object.__setattr__(self, name, value)`` (its ``__setattr__``
raises), one C call through the attribute machinery per field. The cold analytical ranking builds ~10⁶ small frozen
records (chunks, calls, stage works, layouts, kernels, hops: ``benchmarks/profile_cold.py`` puts the generated
``__init__``s at 10–12 % of a cold candidate's CPU, spread over ~30 classes); writing the same values into
``self.__dict__`` by key is the same instance (same fields, same order, same equality and hash, ``__post_init__``
still called last) at ~40 % of the cost (10 fields, CPython 3.11: 5.1 → 2.2 µs per instance; measured 2026-11-26,
2-core CI-class VM, ``timeit`` of a 10-field class). ``tests/test_fast_init.py`` compares every decorated class's
instances with the dataclass-generated ``__init__``'s (kept as ``__dataclass_init__``).
"""

from __future__ import annotations

from dataclasses import MISSING, fields, is_dataclass


def fast_init(cls: type) -> type:
    """Replace ``cls``' dataclass-generated ``__init__`` by one that stores the arguments in ``self.__dict__`` (module
    docstring). Only for a dataclass with a ``__dict__`` (no slots) whose fields are all in ``__init__``, with plain
    defaults (no ``default_factory``) and no ``InitVar``: anything else raises ``TypeError`` here, at import."""
    if not is_dataclass(cls) or "__slots__" in cls.__dict__:
        raise TypeError(f"fast_init: {cls.__name__} must be a dataclass without slots")
    own = fields(cls)
    if len(own) != len(cls.__dataclass_fields__):  # ClassVar / InitVar pseudo-fields
        raise TypeError(f"fast_init: {cls.__name__} has InitVar or ClassVar fields")
    params, body, defaults = [], [], {}
    keyword_only = False
    for f in sorted(own, key=lambda f: f.kw_only):  # the generated __init__'s order: positional, then keyword-only
        if not f.init or f.default_factory is not MISSING:
            raise TypeError(f"fast_init: {cls.__name__}.{f.name} is not a plain __init__ field")
        if f.kw_only and not keyword_only:
            params.append("*")
            keyword_only = True
        if f.default is MISSING:
            params.append(f.name)
        else:
            defaults[f"_d_{f.name}"] = f.default
            params.append(f"{f.name}=_d_{f.name}")
    body = [f"    _fi_dict[{f.name!r}] = {f.name}" for f in own]  # the fields' own order (the __dict__'s)
    if hasattr(cls, "__post_init__"):
        body.append("    _fi_self.__post_init__()")
    source = f"def __init__(_fi_self, {', '.join(params)}):\n    _fi_dict = _fi_self.__dict__\n" + "\n".join(body) + "\n"
    space: dict = dict(defaults)
    exec(source, space)  # noqa: S102 - built from the class's own field names only
    init = space["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = cls.__init__.__doc__
    cls.__dataclass_init__ = cls.__init__
    cls.__init__ = init
    return cls
