"""A strategy with another global batch, without checking its other fields again (:func:`with_global_batch`).

``dataclasses.replace(s, global_batch=g)`` runs :class:`~simulator.strategy.Strategy`'s ``__post_init__``: every
field's own check (:func:`simulator.strategy.fields.validate`) and the checks of combinations
(:func:`simulator.strategy.combinations.check_combinations`), ~30 µs. A field's check reads its own value only, and
no combination reads the global batch, so for a strategy that passed them the copy passes them again exactly when
the new global batch passes its own check (a positive integer). A search compiles each structure with a small batch
(:mod:`simulator.analytical_structures`, :mod:`planner.feasible`): thousands of copies.
"""

from __future__ import annotations

from simulator.checks import positive_int
from simulator.strategy.spec import Strategy


def with_global_batch(s: Strategy, global_batch: int) -> Strategy:
    """``dataclasses.replace(s, global_batch=global_batch)``: the same fields (the same objects), the global batch
    checked as its declaration checks it (a SpecError naming ``global_batch``), the others not again (module
    docstring). ``s`` itself when the batch is its own."""
    if global_batch == s.global_batch and type(global_batch) is type(s.global_batch):
        return s
    positive_int("global_batch", global_batch)
    if type(s) is not Strategy:  # a subclass may check more in its own __post_init__
        from dataclasses import replace
        return replace(s, global_batch=global_batch)
    out = object.__new__(Strategy)
    out.__dict__.update(s.__dict__)
    out.__dict__["global_batch"] = global_batch
    return out
