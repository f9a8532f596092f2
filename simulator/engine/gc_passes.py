"""The cyclic collector while the DES runs: a young-generation pass every :data:`YOUNG_PASS_EVERY` allocations.

A step at scale allocates millions of objects that live for a few settles — flows, their groups, SimPy events
and the callbacks' closures — in reference cycles (a flow and its group point at each other), so only CPython's
cyclic collector frees them. Its default passes the young generation every 700 net allocations and, every ten of
those, the middle one; the objects that survive a few settles reach the oldest generation and make it grow past
the quarter that triggers a full pass over the whole heap (the call plans included). The collector never changes
what the simulation computes (the engine keys no memo by a freed object's id without keeping the object).

Two settings, one home: :func:`fewer_young_passes` around each :func:`~simulator.engine.step.simulate` and around
the closed form's compilation of a search's structures (:func:`simulator.analytical_vec.estimate_many`), and
:func:`rarer_full_collections` around the planner's refinement of several candidates (whose caches the full
passes would walk again and again).
"""

from __future__ import annotations

import gc
from contextlib import contextmanager

YOUNG_PASS_EVERY = 50_000
"""Net allocations between two young-generation passes of the collector during :func:`~simulator.engine.step.simulate`
(CPython's default threshold: 700). Measured (``gc.callbacks`` around ``simulate`` of ``benchmarks/bench_des.py``'s
32,768-GPU step, 2026-11-25, the 2-core VM under load ~6): with the default, 6,294 young, 572 middle and 14 full
passes took 2.4 of 12.1 CPU seconds, peak resident memory 445 MB; at 10,000, 0.7–1.3 s, 422 MB; at 50,000, 73 young
and 6 middle passes, no full one, 0.8 s, 429 MB; the collector off, 607 MB. Step time, events and flows are the same
in every setting. The same threshold around :func:`~simulator.analytical_vec.estimate_many`'s structure lookup
(``benchmarks/bench_analytical.py --candidates 5000``, GPT-3 175B on 1,024 A100s, cold cache, 2026-11-25, the 2-core VM
under load ~4): with the default, 648 passes took 0.50–0.52 of 2.6–2.8 CPU seconds; at 50,000, 9 passes, 0.10 s;
estimates unchanged (the structures' memo keys hold every object whose id they use)."""


@contextmanager
def fewer_young_passes():
    """The young generation's threshold raised to :data:`YOUNG_PASS_EVERY` for the block (never lowered; a
    threshold of 0, automatic collection off, is left as it is), the thresholds restored after, also on an error."""
    before = gc.get_threshold()
    if before[0]:
        gc.set_threshold(max(before[0], YOUNG_PASS_EVERY), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


FULL_COLLECTION_EVERY = 100
"""Passes of the cyclic collector's middle generation between two full passes while the planner's DES refines
(``planner/refine.py``; CPython's default threshold: 10). The DES's events, flows and call plans live through a
step, reach the oldest generation and grow it past the quarter that lets CPython walk the whole heap (the search's
caches included) again: with the default, GPT-3 175B's refinement (8 candidates at 1,024 GPUs) ran 14 full passes,
2.9 of its 17.4 CPU seconds; at 100, 2 passes, 1.5 of 15.9 s, peak resident memory 183 -> 201 MB (``gc.callbacks``
and ``getrusage``, 2026-11-25, the 2-core VM under load; at 1,000: 0.9 s, 277 MB). A setting of this process's
collector (and of each worker's), restored after: it trades some peak memory (cyclic garbage waits longer) for those
passes."""


def rarer_full_passes() -> tuple[int, int, int]:
    """Raise the collector's oldest-generation threshold to :data:`FULL_COLLECTION_EVERY` (never lower it);
    the thresholds before. Also each worker process's initializer."""
    before = gc.get_threshold()
    gc.set_threshold(before[0], before[1], max(before[2], FULL_COLLECTION_EVERY))
    return before


@contextmanager
def rarer_full_collections():
    """:func:`rarer_full_passes` for the block, the thresholds restored after (also on an error)."""
    before = rarer_full_passes()
    try:
        yield
    finally:
        gc.set_threshold(*before)


@contextmanager
def frozen_heap():
    """The collector's tracked objects moved to its permanent generation for the block (``gc.freeze``), moved back
    after (``gc.unfreeze``, also on an error): around forking worker processes, whose collector then never walks
    the heap they inherit (nor writes to its pages, which copy-on-write would copy). It frees nothing and changes
    no result (the module docstring). CPython has one permanent generation: a ``gc.freeze`` made before the block
    is undone by its end too. Measured on the Llama-2-70B plan command's refinement (docs/planner.md, plan27): the
    parent's CPU while it waits 0.16 -> 0.04 s, the workers' minor page faults 26-28k -> 15.6k."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
