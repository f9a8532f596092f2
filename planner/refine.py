"""Re-simulate the best candidates with the discrete-event engine, in parallel over processes.

The closed form ranks thousands of candidates; the DES plays the few best with contention on
shared links, so the final ranking is by the DES step time. ``jobs`` worker processes run the
candidates (each its own compile and simulation); the results come back in the input order, so
the ranking does not depend on which process finished first. In one process the candidates share
their communication calls' plans (one :class:`~simulator.engine.call_plan.CallPlanner` for the
cluster: a plan depends on the call and the cluster only), which the DES would otherwise build again
per candidate (at 1,024 GPUs, a fifth of a refinement). While it runs, the cyclic garbage collector walks
the whole heap ten times less often (:data:`FULL_COLLECTION_EVERY`).
"""

from __future__ import annotations

import gc
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager

from simulator.compile import compile_step
from simulator.engine.call_plan import CallPlanner
from simulator.engine.step import simulate
from simulator.strategy import build_layout


FULL_COLLECTION_EVERY = 100
"""Passes of the cyclic collector's middle generation between two full passes while the DES refines (CPython's
default threshold: 10). The DES's events, flows and call plans live through a step, reach the oldest generation
and grow it past the quarter that lets CPython walk the whole heap (the search's caches included) again: with the
default, GPT-3 175B's refinement (8 candidates at 1,024 GPUs) ran 14 full passes, 2.9 of its 17.4 CPU seconds;
at 100, 2 passes, 1.5 of 15.9 s, peak resident memory 183 -> 201 MB (``gc.callbacks`` and ``getrusage``,
2026-11-25, the 2-core VM under load; at 1,000: 0.9 s, 277 MB). A setting of this process's collector (and of
each worker's), restored after: it trades some peak memory (cyclic garbage waits longer) for those passes."""


def _rarer() -> tuple[int, int, int]:
    """Raise the collector's oldest-generation threshold to :data:`FULL_COLLECTION_EVERY` (never lower it);
    the thresholds before. Also each worker process's initializer."""
    before = gc.get_threshold()
    gc.set_threshold(before[0], before[1], max(before[2], FULL_COLLECTION_EVERY))
    return before


@contextmanager
def rarer_full_collections():
    """:func:`_rarer` for the block, the thresholds restored after (also on an error)."""
    before = _rarer()
    try:
        yield
    finally:
        gc.set_threshold(*before)


def des_step(cluster, workload, strategy, gpus: int | None = None, plans: CallPlanner | None = None):
    """The DES :class:`StepResult` of one strategy on the first ``gpus`` workers (None: the whole
    cluster), no timeline kept; ``plans``: call plans shared with other candidates on ``cluster``."""
    layout = build_layout(strategy, cluster, workload, gpus=gpus)
    work = compile_step(cluster, workload, strategy, layout=layout)
    return simulate(work, cluster, trace=False, plans=plans)


def _one(args):
    return des_step(*args)


def refine(cluster, workload, strategies, jobs: int = 1, gpus: int | None = None, tick=None,
           share_plans: bool = True) -> list:
    """DES results of ``strategies`` on ``gpus`` workers, in order; ``jobs`` > 1 runs them in that many
    processes; ``tick(done, total)`` after each result. In one process the candidates share one
    :class:`CallPlanner` (``share_plans``; False: each its own, the reference it is tested against)."""
    if jobs <= 1 or len(strategies) <= 1:  # one process: the candidates share their call plans
        plans = CallPlanner(cluster) if share_plans else None
        with rarer_full_collections():
            return _collect((des_step(cluster, workload, s, gpus, plans) for s in strategies), len(strategies), tick)
    tasks = [(cluster, workload, s, gpus) for s in strategies]
    with ProcessPoolExecutor(max_workers=jobs, initializer=_rarer) as pool:
        return _collect(pool.map(_one, tasks), len(tasks), tick)


def _collect(results, total: int, tick) -> list:
    out = []
    for r in results:
        out.append(r)
        if tick is not None:
            tick(len(out), total)
    return out
