"""Re-simulate the best candidates with the discrete-event engine, in parallel over processes.

The closed form ranks thousands of candidates; the DES plays the few best with contention on
shared links, so the final ranking is by the DES step time. ``jobs`` worker processes run the
candidates (each its own compile and simulation); the results come back in the input order, so
the ranking does not depend on which process finished first.
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor

from simulator.compile import compile_step
from simulator.engine.step import simulate
from simulator.strategy import build_layout


def des_step(cluster, workload, strategy, gpus: int | None = None):
    """The DES :class:`StepResult` of one strategy on the first ``gpus`` workers (None: the whole
    cluster), no timeline kept."""
    layout = build_layout(strategy, cluster, workload, gpus=gpus)
    work = compile_step(cluster, workload, strategy, layout=layout)
    return simulate(work, cluster, trace=False)


def _one(args):
    return des_step(*args)


def refine(cluster, workload, strategies, jobs: int = 1, gpus: int | None = None, tick=None) -> list:
    """DES results of ``strategies`` on ``gpus`` workers, in order; ``jobs`` > 1 runs them in that many
    processes; ``tick(done, total)`` after each result."""
    tasks = [(cluster, workload, s, gpus) for s in strategies]
    if jobs <= 1 or len(tasks) <= 1:
        return _collect(map(_one, tasks), len(tasks), tick)
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return _collect(pool.map(_one, tasks), len(tasks), tick)


def _collect(results, total: int, tick) -> list:
    out = []
    for r in results:
        out.append(r)
        if tick is not None:
            tick(len(out), total)
    return out
